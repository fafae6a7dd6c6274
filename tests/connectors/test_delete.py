"""``Collection.delete(ids)`` on every real engine: deleted records are gone from count, scan, get and search, the
others are untouched bit for bit, read-only handles refuse, and a record with a second vector field goes whole. The
file store's rewrite of its append-only segments is also checked for crash safety."""
from __future__ import annotations

import numpy as np
import pytest

from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import NotFound, StoreError

N, DIM = 50, 8
#: engines with a native integer key besides their default one, and the URL suffix that creates it
INT_KEY = {"pgvector": "&id_type=bigint", "milvus_lite": "?id_type=int", "milvus_server": "?id_type=int"}


def _ids(kind: str) -> list:
    if kind == "str":
        # quotes, a backslash and non-ASCII: ids a delete expression must quote safely
        return [f"doc-{i:03d}" for i in range(N - 3)] + ['say "hi"', "back\\slash", "naïve-ünïcode"]
    return [i * 7 + 1 for i in range(N)]


def _records(ids: list, dim: int = DIM, seed: int = 0) -> VectorBatch:
    rng = np.random.default_rng(seed)
    payloads = [{"text": f"document {n}", "n": n, "x": n / 7, "ok": bool(n % 2), "tags": ["a", "b"][: n % 3],
                 "meta": {"lang": "en", "rank": n}} for n in range(len(ids))]
    return VectorBatch(ids, rng.normal(size=(len(ids), dim)).astype(np.float32), payloads)


def _snapshot(coll) -> dict:
    """id -> (vector bytes, payload) of every record, read by scan."""
    seen = {}
    for batch in coll.scan(batch_size=16):
        for i, v, p in zip(batch.ids, batch.vectors, batch.payloads):
            assert i not in seen, f"{i!r} scanned twice"
            seen[i] = (v.tobytes(), p)
    return seen


@pytest.mark.parametrize("kind", ["int", "str", "int_key"])
def test_delete_removes_exactly_the_asked_records(engine, new_url, kind):
    url = new_url("del")
    if kind == "int_key":
        if engine.name not in INT_KEY:
            pytest.skip(f"{engine.name} has no integer key apart from its default")
        url += INT_KEY[engine.name]
    coll = connect(url).create(dim=DIM, metric="l2")   # l2: no store normalises the vectors
    batch = _records(_ids(kind))
    coll.upsert(batch)
    before = _snapshot(coll)
    # a text key gives int ids back as strings (pgvector): the store's own spelling is what reads return
    stored = {str(i): i for i in before}
    assert len(stored) == N
    ids = [stored[str(i)] for i in batch.ids]
    gone, ghosts = ids[3:35:4] + ids[-3:-1], (["no-such-id", "another-ghost"] if kind == "str" else [10_007, 99_999_999])
    assert len(gone) == 10

    assert coll.delete(gone + ghosts) == 12
    kept = [i for i in ids if i not in set(gone)]
    for handle in (coll, connect(url)):   # this handle, and a fresh one (no stale cache)
        assert handle.info().count == N - 10
        after = _snapshot(handle)
        assert set(after) == set(kept)
        for i in kept:   # bit-identical vectors, equal payloads
            assert after[i] == before[i], i
        assert len(handle.get(gone)) == 0
        got = handle.get([gone[0], kept[0], ghosts[0], kept[-1]])
        assert got.ids == [kept[0], kept[-1]]
        assert [v.tobytes() for v in got.vectors] == [before[kept[0]][0], before[kept[-1]][0]]
        # the deleted records' own vectors as queries: their exact matches must not come back
        rows = [ids.index(i) for i in gone] + [ids.index(i) for i in kept[:5]]
        found, _ = handle.search(batch.vectors[rows], k=15)
        assert not set(gone) & {i for row in found for i in row}
        assert [row[0] for row in found[10:]] == kept[:5]

    assert coll.delete(gone + gone[:3]) == 10   # again, ids repeated: nothing left to do, distinct ids counted
    assert coll.delete([]) == 0
    assert coll.info().count == N - 10


def test_delete_sends_long_id_lists_in_chunks(engine, new_url):
    coll = connect(new_url("delmany")).create(dim=DIM, metric="l2")
    batch = _records(_ids("str"))
    coll.upsert(batch)
    ghosts = [f"ghost-{i}" for i in range(10_050)]   # past the first chunk of every store (pgvector's is 10,000)
    assert coll.delete(ghosts + batch.ids[-5:]) == 10_055
    assert coll.info().count == N - 5
    assert len(coll.get(batch.ids[-5:])) == 0
    assert len(coll.get(batch.ids[:-5])) == N - 5


def test_delete_refused_on_read_only_handle_and_missing_collection(engine, new_url):
    url = new_url("delro")
    coll = connect(url).create(dim=DIM, metric="l2")
    batch = _records(_ids("str"))
    coll.upsert(batch)
    reader = connect(url, read_only=True)
    with pytest.raises(StoreError, match="read-only"):
        reader.delete(batch.ids[:3])
    with pytest.raises(StoreError, match="read-only"):
        reader.delete([])
    assert coll.info().count == N
    assert len(coll.get(batch.ids[:3])) == 3
    with pytest.raises(NotFound):
        connect(new_url("delmissing")).delete(["a", "b"])


def test_delete_through_a_field_view_removes_the_whole_record(engine, new_url):
    if "add_vector_field" not in engine.features:
        pytest.skip(f"{engine.name} has no second vector fields")
    url = new_url("delfield")
    coll = connect(url).create(dim=DIM, metric="l2")
    batch = _records(_ids("str"))
    coll.upsert(batch)
    coll.add_vector_field("v2", dim=4, metric="l2")
    view = coll.with_vector_field("v2")
    second = np.random.default_rng(5).normal(size=(N, 4)).astype(np.float32)
    view.upsert(VectorBatch(batch.ids, second, batch.payloads))
    assert view.info().count == N

    assert view.delete(batch.ids[:5]) == 5        # through the view: both vectors and the payload go
    assert coll.delete(batch.ids[5:8]) == 3       # through the first field: the second vector goes too
    fresh_view = connect(url).with_vector_field("v2")
    for handle in (coll, view, connect(url), fresh_view):
        assert handle.info().count == N - 8
        assert len(handle.get(batch.ids[:8])) == 0
        assert {i for b in handle.scan(batch_size=16) for i in b.ids} == set(batch.ids[8:])
    np.testing.assert_array_equal(fresh_view.get(batch.ids[8:]).vectors, second[8:])
    np.testing.assert_array_equal(connect(url).get(batch.ids[8:]).vectors, batch.vectors[8:])
    if engine.name == "pgvector":   # no row is left behind with NULL vectors
        import psycopg

        pg = connect(url)
        with psycopg.connect(pg._conninfo) as conn:
            assert conn.execute(f"SELECT count(*) FROM {pg.table}").fetchone()[0] == N - 8


# --- the file store: deleting rewrites append-only segments --------------------------------------------------------
class _Crash(Exception):
    pass


def _file_collection(path):
    """Three segments; ids 0-9 written twice (an older version in segment 1, the live one in segment 2)."""
    coll = connect(f"file://{path}").create(dim=4, metric="l2")
    coll.upsert(_records(list(range(20)), dim=4, seed=1))
    coll.upsert(_records(list(range(10)), dim=4, seed=2))
    coll.upsert(_records(list(range(20, 30)), dim=4, seed=3))
    return coll


def test_file_delete_never_brings_back_an_older_version(tmp_path):
    coll = _file_collection(tmp_path / "c")
    before = _snapshot(coll)
    assert coll.delete([3, 15, 25, 77]) == 4
    after = _snapshot(connect(f"file://{tmp_path / 'c'}"))
    assert set(after) == set(before) - {3, 15, 25}
    assert all(after[i] == before[i] for i in after)
    assert len(coll.get([3])) == 0


@pytest.mark.parametrize("crash_at", range(9))
def test_file_delete_is_crash_safe(tmp_path, monkeypatch, crash_at):
    """A delete killed after any number of its file operations (segment writes and removals) leaves every record
    as it was or deleted, never an older version; deleting again finishes the job."""
    from vecbridge.connectors import file as file_store

    coll = _file_collection(tmp_path / "c")
    before = _snapshot(coll)
    steps = []

    def counted(real):
        def step(*args, **kwargs):
            if len(steps) == crash_at:
                raise _Crash
            steps.append(real.__name__)
            return real(*args, **kwargs)
        return step

    monkeypatch.setattr(file_store, "_atomic_write", counted(file_store._atomic_write))
    monkeypatch.setattr(file_store.os, "unlink", counted(file_store.os.unlink))
    try:
        coll.delete([3, 15])
        crashed = False
    except _Crash:
        crashed = True
    monkeypatch.undo()
    seen = _snapshot(connect(f"file://{tmp_path / 'c'}"))
    assert set(seen) >= set(before) - {3, 15}
    assert all(seen[i] == before[i] for i in seen)
    if not crashed:
        assert set(seen) == set(before) - {3, 15}
    assert connect(f"file://{tmp_path / 'c'}").delete([3, 15]) == 2
    assert _snapshot(connect(f"file://{tmp_path / 'c'}")) == {i: v for i, v in before.items() if i not in (3, 15)}
