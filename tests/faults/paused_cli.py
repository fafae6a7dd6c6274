"""``python -m tests.faults.paused_cli ARGS``: the CLI, stopping itself with SIGSTOP at the point named by
``VECBRIDGE_PAUSE_AT`` (``NAME`` or ``NAME:N``, as :mod:`vecbridge.faultpoint`), so that a test can act while the
run is held in the middle of its work (a second writer, an application writing to the source) and then let it go
on with SIGCONT."""
from __future__ import annotations

import importlib
import os
import signal
import sys

from vecbridge import faultpoint

_name, _nth = faultpoint._parse(os.environ.get("VECBRIDGE_PAUSE_AT"))
_seen = 0


def pause_point(name: str) -> None:
    global _seen
    if name == _name:
        _seen += 1
        if _seen == _nth:
            os.kill(os.getpid(), signal.SIGSTOP)


for module in ("checkpoint", "pipeline", "rewrite", "merge", "upgrade.starting", "upgrade.sync", "upgrade.scheduler",
               "upgrade.cutover"):   # each imported fault_point by name
    importlib.import_module(f"vecbridge.jobs.{module}").fault_point = pause_point
for module in ("checkpoint", "pipeline"):   # where the checkpoint and the copy jobs' batch points live now
    importlib.import_module(f"vecbridge.runtime.{module}").fault_point = pause_point

if __name__ == "__main__":
    from vecbridge.cli import main

    sys.argv[0] = "vecbridge"
    main()
