"""The "server killed in the middle of a scan" fault, shared by the engine-specific test modules.

Every store must behave alike: the scan that was running fails within ``deadline_s`` with a one-line
``StoreError`` that names no secret, and after a restart a new connection resumed from the last cursor it
yielded returns every remaining record exactly once (nothing skipped, nothing repeated).
"""
from __future__ import annotations

import time
from typing import Callable

import pytest

from vecbridge.connectors import Collection
from vecbridge.errors import StoreError


def assert_scan_resumes_after_kill(coll: Collection, *, kill: Callable[[], None], restart: Callable[[], None],
                                   reopen: Callable[[], Collection], batch_size: int, kill_after: int,
                                   expected_ids: list, secret: str | None = None,
                                   deadline_s: float = 30.0) -> StoreError:
    """Kill the server after ``kill_after`` batches of ``coll.scan(batch_size)``, ``restart()`` it, and resume the
    scan on ``reopen()`` (a fresh connection to the same collection, made after the restart). Returns the error."""
    seen: list = []
    cursor = None
    scan = coll.scan(batch_size=batch_size)
    for _ in range(kill_after):
        batch = next(scan)
        seen.extend(batch.ids)
        cursor = batch.cursor
    kill()
    try:
        started = time.monotonic()
        with pytest.raises(StoreError) as err:
            next(scan)
        assert time.monotonic() - started < deadline_s
        message = str(err.value)
        assert "\n" not in message
        if secret:
            assert secret not in message
        assert len(seen) == kill_after * batch_size
    finally:   # a failure here must not leave the server down for the tests after it
        restart()
    rest = [i for batch in reopen().scan(batch_size=batch_size, after=cursor) for i in batch.ids]
    assert not set(rest) & set(seen), "records repeated after resuming"
    assert sorted(seen + rest) == sorted(expected_ids), "records skipped or repeated"
    return err.value
