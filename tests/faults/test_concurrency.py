"""Runs held in the middle of their work (SIGSTOP at a named point, :mod:`tests.faults.paused_cli`) while something
else happens: a second writer on the same migration target is refused, and an application writing to the source
during ``upgrade reembed`` loses nothing: deleted records never come back, added and changed ones are picked up."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from vecbridge.connectors import VectorBatch, connect

from .conftest import BATCH, FIELD, FIT, ROOT, N, Up, cli, ok, old_records, release, snapshot, state_of, write


def paused(*args, at: str) -> subprocess.Popen:
    """The CLI in a child process that stops itself at the point ``at``; returns once it is stopped there."""
    release()
    env = {k: v for k, v in os.environ.items() if k != "VECBRIDGE_FAULT_AT"}
    env["VECBRIDGE_PAUSE_AT"] = at
    proc = subprocess.Popen([sys.executable, "-m", "tests.faults.paused_cli", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the run ended (exit {proc.returncode}) before it reached {at}: {proc.stderr.read()[-800:]}")
        with open(f"/proc/{proc.pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "T":
                return proc
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"the run did not reach {at} within 120 s")


def resumed(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    """Let a paused run go on to its end."""
    proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=180)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="module")
def migration(store, sample, alignment_file):
    """Per store: a source and its uninterrupted migration."""
    src, done = write(store.url("a"), *old_records(sample)), store.url("migrated")
    ok(cli("migrate", src, "--alignment", alignment_file, "--to", done, "--batch-size", BATCH))
    return {"source": src, "source_rows": snapshot(src), "migrated": snapshot(done)}


@pytest.mark.parametrize("how", ["--resume", "--overwrite"])
def test_second_writer_on_a_migration_target_is_refused(store, migration, alignment_file, work, how):
    """While one migration writes a target (held after its first batch), a second run into the same target, even
    one that would resume or overwrite it, is refused with one line and exit 4 and writes nothing; the first then
    finishes with exactly an uninterrupted run's result."""
    target, ckpt = store.url("t"), work / "migrate.json"
    args = ["migrate", migration["source"], "--alignment", alignment_file, "--to", target, "--batch-size", BATCH,
            "--checkpoint", ckpt]
    first = paused(*args, at="migrate.main.batch-committed:1")
    try:
        second = cli(*args, how, timeout=60)
    finally:
        done = resumed(first)
    assert second.returncode == 4, f"the second writer was not refused: exit {second.returncode}: {second.stderr}"
    message = second.stderr.strip()
    assert message.startswith("error:") and "\n" not in message and "Traceback" not in message, message
    ok(done)
    assert snapshot(target) == migration["migrated"], "the target differs from an uninterrupted migration's"
    assert snapshot(migration["source"]) == migration["source_rows"], "the source changed"
    assert not ckpt.exists()


def test_application_writes_during_reembed(store, sample, work):
    """An application inserts, updates and deletes source records while ``upgrade reembed`` is held after a batch
    landed (written with its stamps in one upsert; the run has not counted it yet). The run finishes; the next picks
    the changes up: the new vectors are then exactly the new model's vectors of the source's current texts, for
    exactly the source's current records, each stamped native in the store; no deleted record comes back, in the
    source or in the new vectors."""
    if store.kind == "qdrant_edge":
        pytest.skip("a Qdrant Edge shard has one owning process: no application can write while the upgrade runs")
    from tests.embedders import mpnet_lookup

    up = Up(store, sample, work)
    ok(up.start())
    run = paused("upgrade", "reembed", "--state", up.state, "--batch-size", 32, at="reembed.batch-written:2")
    try:
        new_now = snapshot(up.src, FIELD) if up.to is None else snapshot(up.to)
        stamps = {i: json.loads(st)["origin"] for i, (_, _, st) in new_now.items()}
        texts = {i: it["doc"] for i, it in zip(sample.ids, sample.items)}
        native = sorted(i for i, o in stamps.items() if o == "native")
        assert len(native) == FIT + 2 * 32, "the two landed batches are stamped native, in the same write"
        assert all(new_now[i][0] == mpnet_lookup([texts[i]])[0].tobytes() for i in native)
        in_flight, native = native[:8], native[8:]   # (records of every kind: any native may be the held batch's)
        mapped = sorted(i for i, o in stamps.items() if o == "mapped")
        deleted = in_flight[:4] + native[:4] + mapped[:4]
        changed = in_flight[4:8] + native[4:8] + mapped[4:8]
        app = connect(up.src)
        app.delete(deleted)
        extra = np.arange(N, N + len(changed) + 10)   # texts the source never held
        app.upsert(VectorBatch(changed, sample.docs_old[extra[:len(changed)]],
                               [{"text": sample.items[j]["doc"], "changed": True} for j in extra[:len(changed)]]))
        added_ids, added_vectors, added_payloads = old_records(sample, N + len(changed), N + len(changed) + 10)
        app.upsert(VectorBatch(added_ids, added_vectors, added_payloads))
        release()
    finally:
        first = resumed(run)
    ok(first)
    source_ids = set(snapshot(up.src, up.old_field))
    assert not source_ids & set(deleted), "a deleted record came back into the source"
    ok(up.reembed())

    source = connect(up.src, read_only=True)
    if up.old_field is not None:
        source = source.with_vector_field(up.old_field)
    current = {i: p["text"] for b in source.scan(batch_size=500) for i, p in zip(b.ids, b.payloads)}
    release()
    assert set(current) == (set(sample.ids[:N]) - set(deleted)) | set(added_ids)
    got = snapshot(up.src, FIELD) if up.to is None else snapshot(up.to)
    assert not set(got) & set(deleted), "a deleted record came back into the new vectors"
    assert set(got) == set(current), "the new vectors are not those of the source's current records"
    wrong = [i for i, t in current.items() if got[i][0] != mpnet_lookup([t])[0].tobytes()]
    assert not wrong, f"{len(wrong)} records lack the new model's vector of their current text: {wrong[:5]}"
    records = {i: json.loads(st)["origin"] for i, (_, _, st) in got.items()}
    assert set(records) == set(current) and set(records.values()) == {"native"}
    assert state_of(up.state)["counts"] == {"mapped": 0, "native": len(current), "pending": 0, "no-text": 0}
