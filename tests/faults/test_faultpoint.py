"""The crash hook itself: it kills at the named point's N-th passage, by SIGKILL, and does nothing otherwise."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = ("from vecbridge.faultpoint import fault_point\n"
          "for step in ('a', 'b', 'a', 'b'):\n"
          "    print(step, flush=True)\n"
          "    fault_point(step)\n"
          "print('done', flush=True)\n")


@pytest.mark.parametrize("spec, printed, code", [
    (None, "a b a b done", 0),
    ("b", "a b", -9),
    ("b:2", "a b a b", -9),
    ("a:3", "a b a b done", 0),          # reached twice only
    ("c", "a b a b done", 0),            # no such point
])
def test_fault_point(spec, printed, code):
    env = {k: v for k, v in os.environ.items() if k != "VECBRIDGE_FAULT_AT"}
    if spec is not None:
        env["VECBRIDGE_FAULT_AT"] = spec
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == code and done.stdout.split() == printed.split(), (done.returncode, done.stdout)
