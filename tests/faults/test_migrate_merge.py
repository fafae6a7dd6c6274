"""migrate and merge killed with SIGKILL at each step boundary, then resumed with ``--resume``: the result is the
uninterrupted run's, bit for bit, the inputs are untouched and neither the checkpoint nor any temporary file of it
is left behind."""
from __future__ import annotations

import pytest

from .conftest import BATCH, N, cli, killed, ok, old_records, snapshot, write

MIGRATE_POINTS = ["migrate.target-created", "migrate.main.batch-written:2", "migrate.main.batch-committed:2",
                  "checkpoint.before-replace:3", "migrate.before-finish"]
MERGE_POINTS = ["merge.target-created", "merge.b.batch-written:2", "merge.between-phases", "merge.a.batch-written:1",
                "merge.before-finish"]

@pytest.fixture(scope="module")
def inputs(store, sample, alignment_file):
    """Per store, once: A (old model, records 0..N), B (new model, records N/2..3N/2: half of them linked to A), and
    the uninterrupted migration of A and merge of A and B."""
    a = write(store.url("a"), *old_records(sample))
    lo, hi = N // 2, N // 2 + N
    b = write(store.url("b"), sample.ids[lo:hi], sample.docs_new[lo:hi],
              [{"b": j, "text": it["doc"]} for j, it in enumerate(sample.items[lo:hi])])
    migrated, merged = store.url("migrated"), store.url("merged")
    ok(cli("migrate", a, "--alignment", alignment_file, "--to", migrated, "--batch-size", BATCH))
    ok(cli("merge", a, b, "--into", merged, "--alignment", alignment_file, "--batch-size", BATCH))
    return {"a": a, "b": b, "a_rows": snapshot(a), "b_rows": snapshot(b), "migrated": snapshot(migrated),
            "merged": snapshot(merged)}


@pytest.mark.parametrize("point", MIGRATE_POINTS)
def test_migrate_killed_then_resumed(store, inputs, alignment_file, work, point):
    target, ckpt = store.url("t"), work / "migrate.json"
    args = ["migrate", inputs["a"], "--alignment", alignment_file, "--to", target, "--batch-size", BATCH,
            "--checkpoint", ckpt]
    killed(cli(*args, fault=point))
    ok(cli(*args, "--resume"))
    got = snapshot(target)
    assert len(got) == N and got == inputs["migrated"], "the resumed migration differs from an uninterrupted one"
    left = sorted(p.name for p in work.iterdir())
    assert not left, f"the finished migration left files beside its checkpoint: {left}"
    assert snapshot(inputs["a"]) == inputs["a_rows"], "the source changed"


@pytest.mark.parametrize("point", MERGE_POINTS)
def test_merge_killed_then_resumed(store, inputs, alignment_file, work, point):
    into, ckpt = store.url("m"), work / "merge.json"
    args = ["merge", inputs["a"], inputs["b"], "--into", into, "--alignment", alignment_file, "--batch-size", BATCH,
            "--checkpoint", ckpt]
    killed(cli(*args, fault=point))
    ok(cli(*args, "--resume"))
    got = snapshot(into)
    assert len(got) == N + N // 2 and got == inputs["merged"], "the resumed merge differs from an uninterrupted one"
    left = sorted(p.name for p in work.iterdir())
    assert not left, f"the finished merge left files beside its checkpoint: {left}"
    assert snapshot(inputs["a"]) == inputs["a_rows"] and snapshot(inputs["b"]) == inputs["b_rows"], \
        "an input changed"
