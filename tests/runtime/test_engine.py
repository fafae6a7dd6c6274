"""The engine seam (:mod:`vecbridge.runtime.engine`): the local engine and the Ray engine (a real local Ray, two
workers, one session for the module) run the same bodies alike. A generator body's reports reach ``on_report`` once
each, in order per unit; results come back in unit order; a body's own error is raised as itself, in one line; a
pool hands back ``(key, result)`` and ``(key, exception)``."""
from __future__ import annotations

import os
import time

import pytest

from vecbridge.connectors import connect
from vecbridge.errors import InputError
from vecbridge.runtime.engine import LOCAL, drive

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")   # keep every Ray address on the loopback

UNITS = [3, 0, 5, 1, 4]


def count_up(unit: int, shared: int):
    """A generator body: ``unit`` reports, then its result; the larger units start slower (so that on Ray the units
    end out of order)."""
    time.sleep(0.02 * unit)
    for k in range(unit):
        yield (unit, k)
    return unit * shared


def square(unit: int, shared: int) -> int:
    return unit * unit + shared


def refuse(unit: int, shared) -> int:
    if unit == 3:
        raise InputError(f"record {unit} is bad")
    return unit


class Doubler:
    """A pool's resource: made once per worker."""

    def __init__(self):
        self.made = os.getpid()

    def call(self, x: int) -> int:
        if x < 0:
            raise InputError(f"{x} is negative")
        return 2 * x


@pytest.fixture(scope="module")
def ray_engine():
    pytest.importorskip("ray")
    from vecbridge.runtime.ray_engine import RayEngine

    engine = RayEngine(workers=2)
    with engine.session():
        yield engine


@pytest.fixture(params=["local", "ray"])
def engine(request):
    return LOCAL if request.param == "local" else request.getfixturevalue("ray_engine")


def test_generator_body_reports_once_each_in_order_and_results_in_unit_order(engine):
    seen = []
    results = engine.run(count_up, UNITS, shared=10, on_report=lambda i, r: seen.append((i, r)))
    assert results == [u * 10 for u in UNITS]
    for i, unit in enumerate(UNITS):
        assert [r for j, r in seen if j == i] == [(unit, k) for k in range(unit)]
    assert len(seen) == sum(UNITS)


def test_plain_body_returns_its_results_in_unit_order(engine):
    calls = []
    assert engine.run(square, UNITS, shared=1, on_report=lambda i, r: calls.append(i)) == [u * u + 1 for u in UNITS]
    assert calls == []


def test_a_body_error_is_raised_as_itself_in_one_line(engine):
    with pytest.raises(InputError) as raised:
        engine.run(refuse, UNITS, shared=None)
    assert type(raised.value) is InputError   # not Ray's wrapper (RayTaskError subclasses the cause's class)
    assert str(raised.value) == "record 3 is bad"


def test_pool_hands_back_results_and_errors_by_key(engine):
    pool = engine.pool(Doubler, "call", in_flight=2)
    try:
        got: dict = {}
        todo = [("a", 1), ("b", -2), ("c", 3), ("d", 4)]
        deadline = time.monotonic() + 60
        while (todo or len(got) < 4) and time.monotonic() < deadline:
            while todo and pool.free():
                key, x = todo.pop(0)
                pool.submit(key, x)
            for key, value in pool.wait(1.0):
                assert key is not None, value   # a worker that failed to start
                got[key] = value
    finally:
        pool.close()
    assert {k: v for k, v in got.items() if k != "b"} == {"a": 2, "c": 6, "d": 8}
    assert type(got["b"]) is InputError and str(got["b"]) == "-2 is negative"


def test_portable_collections(engine, tmp_path):
    """Here a body gets the collection itself; on Ray its URL, sealed (a password never shows in what Ray prints)."""
    coll = connect(f"file://{tmp_path}/c")
    handle = engine.portable(coll)
    if engine.remote:
        assert handle.url == coll.url and repr(handle) == f"Sealed({coll.display_url!r})"
    else:
        assert handle is coll


def test_a_report_that_raises_stops_the_body_at_once():
    """The body is closed (its ``finally`` runs: readers stopped, connections released), not left to the collector."""
    closed = []

    def body(unit, shared):
        try:
            yield 1
            yield 2
        finally:
            closed.append(unit)

    def on_report(report):
        raise KeyError(report)

    with pytest.raises(KeyError) as raised:   # its traceback, kept here, holds the driver's frame
        drive(body, "u", None, on_report)
    assert closed == ["u"] and raised.value.args == (1,)
