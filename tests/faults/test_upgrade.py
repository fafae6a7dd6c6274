"""A model upgrade killed with SIGKILL at each step boundary (start, reembed, cutover, rollback, finalize), then the
same command run again: the store and the state file end exactly as after an uninterrupted run, and the old vectors
are never written (until ``finalize --drop-old`` removes them, as asked)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import Up, killed, ok

START_POINTS = ["upgrade-start.sample-reembedded", "upgrade-start.fitted", "migrate.target-created",
                "upgrade-start.mapped", "upgrade-start.sample-written"]
REEMBED_POINTS = ["reembed.batch-written:1", "reembed.batch-written:3"]


@pytest.fixture(scope="module")
def baseline(store, sample, scratch):
    """Per store, once: the result after each step of an uninterrupted upgrade."""
    work = scratch / f"baseline-upgrade-{store.kind}"
    work.mkdir()
    up, out = Up(store, sample, work), {}
    for step, run in [("start", up.start), ("reembed", up.reembed), ("cutover", lambda: up.run("cutover")),
                      ("rollback", lambda: up.run("rollback")), ("cutover again", lambda: up.run("cutover")),
                      ("finalize", up.finalize)]:
        ok(run())
        out[step] = up.result()
    assert out["start"]["old"] == up.old and out["start"]["state"]["stage"] == "mapped"
    assert (out["finalize"]["old"] != up.old) == up.drop_old, "finalize dropped, or did not drop, the old vectors"
    return out


def _same(got: dict, expected: dict, step: str) -> list[str]:
    """What differs from the uninterrupted run after ``step``, in words."""
    return [f"after {step}: {part} differs from the uninterrupted run" for part in ("new", "state", "old")
            if got[part] != expected[part]]


def _problems(check, *args) -> list[str]:
    """What ``check(*args)`` (``ok`` or ``killed``) asserts, as a list of problems instead of a raise."""
    try:
        check(*args)
    except AssertionError as exc:
        return [str(exc)]
    return []


def _killed_then_rerun(store, sample, work, baseline, step: str, points: list[str], prepare, run) -> None:
    """One upgrade per fault point, each ``prepare(up)``d, run killed at its point, then run again; every
    point's result must equal the uninterrupted run's after ``step``. The child processes of two points run at a
    time (independent upgrades: each has its own source and state), the store is read here, one upgrade at a time;
    all points run and all problems are reported together."""
    ups = []
    for n, _ in enumerate(points):
        (work / str(n)).mkdir()
        ups.append(Up(store, sample, work / str(n)))

    def chain(up: Up, point: str) -> list[str]:
        problems = [f"{point}: {p}" for p in prepare(up)]
        problems += [f"{point}: {p}" for p in _problems(killed, run(up, point))]
        return problems + [f"{point} run again: {p}" for p in _problems(ok, run(up, None))]

    with ThreadPoolExecutor(max_workers=2) as pool:
        problems = [p for found in pool.map(chain, ups, points) for p in found]
    for up, point in zip(ups, points):
        got = up.result()
        if got["old"] != up.old:
            problems.append(f"{point}: the old vectors changed")
        problems += [f"{point}: {p}" for p in _same(got, baseline[step], step)]
    assert not problems, "\n".join(problems)


def test_start_killed_then_rerun(store, sample, work, baseline):
    _killed_then_rerun(store, sample, work, baseline, "start", START_POINTS, lambda up: [],
                       lambda up, point: up.start(fault=point))


def test_reembed_killed_then_rerun(store, sample, work, baseline):
    _killed_then_rerun(store, sample, work, baseline, "reembed", REEMBED_POINTS, lambda up: _problems(ok, up.start()),
                       lambda up, point: up.reembed(fault=point))


def test_cutover_rollback_finalize_killed_then_rerun(store, sample, work, baseline):
    """Each move killed after the store switched (or the old vectors were dropped) and before the state recorded
    it, then run again: every step ends where the uninterrupted run's did. All steps run; all differences are
    reported together."""
    up = Up(store, sample, work)
    ok(up.start())
    ok(up.reembed())
    problems = []
    for step, run, point in [("cutover", lambda f: up.run("cutover", fault=f), "cutover.switched"),
                             ("rollback", lambda f: up.run("rollback", fault=f), "rolled-back.switched"),
                             ("cutover again", lambda f: up.run("cutover", fault=f), None),
                             ("finalize", up.finalize, "finalize.dropped")]:
        if point is not None:
            first = run(point)
            if first.returncode != -9:
                problems.append(f"{step}: not killed at {point} (exit {first.returncode}: {first.stderr.strip()})")
        again = run(None)
        if again.returncode != 0:
            problems.append(f"{step} run again: exit {again.returncode}: {again.stderr.strip()}")
        problems += _same(up.result(), baseline[step], step)
    assert not problems, "\n".join(problems)
