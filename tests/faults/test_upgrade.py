"""A model upgrade killed with SIGKILL at each step boundary (start, reembed, cutover, rollback, finalize), then the
same command run again: the store and the state file end exactly as after an uninterrupted run, and the old vectors
are never written (until ``finalize --drop-old`` removes them, as asked)."""
from __future__ import annotations

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


@pytest.mark.parametrize("point", START_POINTS)
def test_start_killed_then_rerun(store, sample, work, baseline, point):
    up = Up(store, sample, work)
    killed(up.start(fault=point))
    ok(up.start())
    got = up.result()
    assert got["old"] == up.old, "the old vectors changed"
    assert not _same(got, baseline["start"], "start"), "\n".join(_same(got, baseline["start"], "start"))


@pytest.mark.parametrize("point", REEMBED_POINTS)
def test_reembed_killed_then_rerun(store, sample, work, baseline, point):
    up = Up(store, sample, work)
    ok(up.start())
    killed(up.reembed(fault=point))
    ok(up.reembed())
    got = up.result()
    assert got["old"] == up.old, "the old vectors changed"
    assert not _same(got, baseline["reembed"], "reembed"), "\n".join(_same(got, baseline["reembed"], "reembed"))


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
