"""A model name on a machine that cannot reach the model hub fails at once with a one-line message (it used to
retry for minutes first); a listening hub is seen as reachable."""
from __future__ import annotations

import socket
import time

import pytest

from vecbridge.errors import InputError
from vecbridge.runtime.models import _hub_reachable


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


def test_unreachable_hub_looks_in_the_local_cache_only(monkeypatch, tmp_path):
    """No hub: the model is looked up in the local cache alone, and its absence is one clear line at once."""
    pytest.importorskip("sentence_transformers")
    import vecbridge.runtime.models as reembed

    monkeypatch.setattr(reembed, "_hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    started = time.monotonic()
    with pytest.raises(InputError, match="unreachable and the model is not in the local cache") as err:
        reembed.load_model("sentence-transformers/not-a-cached-model")
    assert "\n" not in str(err.value)
    assert time.monotonic() - started < 60     # no retries against a hub that does not answer
