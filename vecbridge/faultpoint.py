"""Named crash points, for tests only: the fault-injection suite (``tests/faults/``) proves that a job killed at any
step boundary resumes to exactly the result of an uninterrupted run.

``fault_point(name)`` does nothing unless the environment variable ``VECBRIDGE_FAULT_AT`` names this point, as
``NAME`` (the first time it is reached) or ``NAME:N`` (the N-th time). Then the process kills itself with SIGKILL on
the spot: no ``finally``, no ``atexit``, no flush, exactly like a power cut or ``kill -9``. The variable is read once,
so an unset one costs a single comparison per call.

The points (``<job>.<step>``):

* migrate: ``migrate.target-created``, ``migrate.main.batch-written`` (upserted, checkpoint not yet advanced),
  ``migrate.main.batch-committed`` (checkpoint advanced), ``checkpoint.before-replace`` (the new checkpoint written
  to its temporary file, not yet renamed over the old one), ``migrate.before-finish`` (before the index build and
  the final count check);
* merge: ``merge.target-created``, ``merge.b.batch-written``, ``merge.b.batch-committed``,
  ``merge.between-phases``, ``merge.a.batch-written``, ``merge.a.batch-committed``, ``merge.before-finish``;
* upgrade start: ``upgrade-start.sample-reembedded``, ``upgrade-start.fitted``, then the migrate points (its mapped
  vectors are written by a migration), ``upgrade-start.mapped``, ``upgrade-start.stamped``,
  ``upgrade-start.sample-written`` (the re-embedded sample's native vectors written, not yet stamped);
* upgrade reembed: ``reembed.synced`` (a changed record's new mapped vector written, not yet stamped),
  ``reembed.batch-written`` (native vectors written, not yet stamped);
* ``cutover.switched`` and ``rolled-back.switched`` (the store serves the other vectors, the state not yet written),
  ``finalize.dropped`` (old vectors dropped, the state not yet written).
"""
from __future__ import annotations

import os
import signal

#: ``(name, occurrence)`` to die at, read once from ``VECBRIDGE_FAULT_AT``; None: never
_TARGET: tuple[str, int] | None = None
_seen = 0


def _parse(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    name, sep, count = spec.rpartition(":")
    if sep and count.isdigit() and int(count) > 0:
        return name, int(count)
    return spec, 1


_TARGET = _parse(os.environ.get("VECBRIDGE_FAULT_AT"))


def fault_point(name: str) -> None:
    """Die here by SIGKILL if ``VECBRIDGE_FAULT_AT`` names this point (and this is the occurrence it names)."""
    global _seen
    if _TARGET is None or name != _TARGET[0]:
        return
    _seen += 1
    if _seen == _TARGET[1]:
        os.kill(os.getpid(), signal.SIGKILL)
