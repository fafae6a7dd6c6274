"""A model name on a machine that cannot reach the model hub fails at once with a one-line message (it used to
retry for minutes first); a listening hub is seen as reachable."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from vecbridge.jobs.reembed import _hub_reachable


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_hub_reachability(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    assert not _hub_reachable()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert _hub_reachable()
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        assert not _hub_reachable()


def test_unreachable_hub_fails_fast_with_one_line(tmp_path):
    pytest.importorskip("sentence_transformers")
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}", "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_HUB_OFFLINE", None)
    code = ("from vecbridge.jobs.reembed import load_model\n"
            "try:\n    load_model('sentence-transformers/not-a-cached-model')\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.startswith("InputError") and "unreachable" in out.stdout, out.stdout + out.stderr
    assert time.monotonic() - started < 120   # the import of sentence-transformers is most of it; no retries
