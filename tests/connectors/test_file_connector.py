"""file:// specifics: crash safety of segments, plain numpy layouts, read-only protection."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import InputError, StoreError


def test_uncommitted_segment_is_invisible(tmp_path):
    coll = connect(f"file://{tmp_path}/c").create(dim=4)
    coll.upsert(VectorBatch(["a", "b"], np.eye(2, 4)))
    # a crash between writing the vectors and committing the ids leaves these behind
    np.save(tmp_path / "c" / "segments" / "000002.npy", np.ones((3, 4), dtype=np.float32))
    (tmp_path / "c" / "segments" / ".000003.meta.npz.tmp-1").write_bytes(b"partial")
    fresh = connect(f"file://{tmp_path}/c")
    assert fresh.info().count == 2
    fresh.upsert(VectorBatch(["c"], np.ones((1, 4))))
    assert sorted(i for b in fresh.scan(10) for i in b.ids) == ["a", "b", "c"]


def test_int_and_str_ids_round_trip(tmp_path):
    coll = connect(f"file://{tmp_path}/c").create(dim=2)
    coll.upsert(VectorBatch([10, 20], np.ones((2, 2)), [{"x": [1, {"y": None}]}, {}]))
    got = coll.get([20, 10])
    assert got.ids == [20, 10] and got.payloads[1] == {"x": [1, {"y": None}]}
    with pytest.raises(InputError, match="duplicate"):
        coll.upsert(VectorBatch(["a", "a"], np.ones((2, 2))))


def test_plain_numpy_layouts_are_read_only(tmp_path):
    vectors = np.arange(12, dtype=np.float32).reshape(4, 3) + 1
    np.save(tmp_path / "v.npy", vectors)
    coll = connect(str(tmp_path / "v.npy"))
    assert coll.info().count == 4 and coll.get([2]).vectors.tolist() == [vectors[2].tolist()]
    with pytest.raises(StoreError, match="read-only"):
        coll.upsert(VectorBatch([9], np.ones((1, 3))))
    d = tmp_path / "plain"
    d.mkdir()
    np.save(d / "vectors.npy", vectors)
    (d / "ids.json").write_text(json.dumps(["w", "x", "y", "z"]))
    (d / "payloads.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(4)))
    got = connect(f"file://{d}").get(["y"])
    assert got.ids == ["y"] and got.payloads == [{"n": 2}]


def test_read_only_handle_refuses_writes_and_drop_refuses_foreign_dirs(tmp_path):
    connect(f"file://{tmp_path}/c").create(dim=2)
    ro = connect(f"file://{tmp_path}/c", read_only=True)
    with pytest.raises(StoreError, match="read-only"):
        ro.upsert(VectorBatch(["a"], np.ones((1, 2))))
    with pytest.raises(StoreError, match="read-only"):
        ro.drop()
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "thesis.txt").write_text("do not delete")
    with pytest.raises(StoreError, match="not found"):
        connect(f"file://{tmp_path}/precious").drop()
    with pytest.raises(StoreError, match="not an empty directory"):
        connect(f"file://{tmp_path}/precious").create(dim=2)
    assert (tmp_path / "precious" / "thesis.txt").exists()


def test_create_checks_existing_schema(tmp_path):
    coll = connect(f"file://{tmp_path}/c").create(dim=3, metric="dot")
    assert coll.create(dim=3, metric="dot", exist_ok=True) is coll
    with pytest.raises(StoreError, match="already exists"):
        coll.create(dim=3, metric="dot")
    with pytest.raises(StoreError, match="exists with dim 3"):
        coll.create(dim=4, metric="dot", exist_ok=True)
    with pytest.raises(InputError, match="metric"):
        connect(f"file://{tmp_path}/d").create(dim=3, metric="hamming")


def test_scan_with_a_bad_cursor_is_a_clear_error(tmp_path):
    coll = connect(f"file://{tmp_path}/c").create(dim=2)
    coll.upsert(VectorBatch(["a"], np.ones((1, 2))))
    with pytest.raises(InputError, match="cursor"):
        list(coll.scan(10, after="garbage"))


def test_percent_encoding_in_file_urls_is_decoded(tmp_path):
    """``file:///DIR/my%20dir`` names the directory "my dir" (the path part of a URL is percent-decoded; a bare path
    is a file name as it is written)."""
    target = tmp_path / "my dir" / "c%d"
    url = f"file://{tmp_path}/my%20dir/c%25d"
    coll = connect(url).create(dim=2)
    coll.upsert(VectorBatch(["a"], np.ones((1, 2))))
    assert coll.path == target and (target / "manifest.json").is_file()
    assert not (tmp_path / "my%20dir").exists()
    assert connect(str(target)).info().count == 1        # the bare path names the same collection
    assert connect(f"file://{tmp_path}/my%20dir/c%25d?metric=dot").get(["a"]).ids == ["a"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    """A writer killed with SIGKILL between writing a temporary file and renaming it leaves ``.NAME.tmp-PID``
    behind; the next write removes the temporaries of processes that no longer run, and only those."""
    coll = connect(f"file://{tmp_path}/c").create(dim=4)
    coll.upsert(VectorBatch(["a", "b"], np.eye(2, 4)))
    seg_dir = tmp_path / "c" / "segments"
    dead = _dead_pid()
    stale = [seg_dir / f".000002.npy.tmp-{dead}", seg_dir / f".000002.meta.npz.tmp-{dead}",
             tmp_path / "c" / f".manifest.json.tmp-{dead}"]
    for path in stale:
        path.write_bytes(b"partial")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = seg_dir / f".000002.npy.tmp-{sleeper.pid}"   # a writer that is still running: not ours to touch
        live.write_bytes(b"in progress")
        other = seg_dir / "notes.tmp-x"                      # not a temporary of ours
        other.write_bytes(b"mine")
        fresh = connect(f"file://{tmp_path}/c")
        fresh.upsert(VectorBatch(["c"], np.ones((1, 4))))
        assert not any(p.exists() for p in stale)
        assert live.read_bytes() == b"in progress" and other.read_bytes() == b"mine"
    finally:
        sleeper.kill()
        sleeper.wait()
    reread = connect(f"file://{tmp_path}/c")
    assert sorted(i for b in reread.scan(10) for i in b.ids) == ["a", "b", "c"]
    np.testing.assert_array_equal(reread.get(["a", "c"]).vectors, [[1, 0, 0, 0], [1, 1, 1, 1]])


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2"])
def test_search_keeps_its_vectors_only_while_the_records_are_the_same(tmp_path, metric):
    """A search keeps the live vectors it read for the next one: a write or a delete, through this handle or
    another (another process), is seen by the very next search, and every answer is the exact one."""
    from vecbridge.metrics import top_k

    rng = np.random.default_rng(0)
    url = f"file://{tmp_path}/c"
    c = connect(url).create(dim=8, metric=metric)
    other = connect(url)
    live = {f"r{i}": v for i, v in enumerate(rng.standard_normal((300, 8)).astype(np.float32))}
    c.upsert(VectorBatch(list(live), np.stack(list(live.values()))))
    Q = rng.standard_normal((5, 8)).astype(np.float32)

    def check(handle):
        ids, scores = handle.search(Q, 7)
        names = list(live)
        want = top_k(Q, np.stack([live[i] for i in names]), 7, metric=metric)
        assert ids == [[names[j] for j in row] for row in want]
        assert scores.shape == (5, 7)

    check(c)
    check(c)                                        # the kept vectors
    assert c._searched is not None
    moved = rng.standard_normal((40, 8)).astype(np.float32) * 3
    ids = [f"r{i}" for i in range(40)] + [f"n{i}" for i in range(10)]
    other.upsert(VectorBatch(ids, np.concatenate([moved, rng.standard_normal((10, 8)).astype(np.float32)])))
    live.update(zip(ids, other.get(ids).vectors))
    check(c)                                        # another handle's write
    c.upsert(VectorBatch(["r50"], -live["r50"][None] * 5))
    live["r50"] = -live["r50"] * 5
    check(c)                                        # this handle's write
    other.delete(["r1", "n3", "r200"])
    for i in ("r1", "n3", "r200"):
        del live[i]
    check(c)                                        # another handle's delete
    check(other)


def test_a_collection_over_the_kept_size_is_read_block_by_block(tmp_path, monkeypatch):
    from vecbridge.connectors import file as file_store
    from vecbridge.metrics import top_k

    monkeypatch.setattr(file_store, "SEARCH_CACHE_BYTES", 1000)
    monkeypatch.setattr(file_store, "SEARCH_BLOCK", 64)
    X = np.random.default_rng(1).standard_normal((300, 8)).astype(np.float32)
    c = connect(f"file://{tmp_path}/c").create(dim=8)
    c.upsert(VectorBatch([f"r{i}" for i in range(300)], X))
    ids, _ = c.search(X[:4], 5)
    assert ids == [[f"r{j}" for j in row] for row in top_k(X[:4], X, 5)]
    assert c._searched is None
