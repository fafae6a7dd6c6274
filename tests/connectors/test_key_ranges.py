"""Partitioned scans: ``key_ranges`` + ``scan(after, until)`` read every record exactly once, on every engine (keyset
slices of file, pgvector, Milvus, Qdrant and Qdrant Edge; offset slices of Chroma), and a slice resumes from a cursor
inside it up to its own end, no further. Stores that one process at a time may open say so (``single_process``)."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from vecbridge.connectors import VectorBatch, connect
from vecbridge.connectors.base import KeyRange, quantile_positions, ranges_from_keys
from vecbridge.errors import InputError

#: engines whose collections take integer and string ids side by side
MIXED_IDS = {"qdrant_local", "qdrant_edge", "chroma_server", "chroma_persistent"}
#: engines that store a canonical UUID otherwise than another string (Qdrant: as the point id itself)
UUID_IDS = {"qdrant_local", "qdrant_edge"}
#: engines one process at a time may open
SINGLE_PROCESS = {"milvus_lite", "qdrant_local", "qdrant_edge", "chroma_persistent"}


def _ids(kind: str, n: int) -> list:
    """``n`` distinct ids of a kind, written out of key order."""
    order = [(i * 7919) % n for i in range(n)]
    if kind == "str":
        return [f"k-{i:05d}" for i in order]
    if kind == "int":
        return [i * 3 for i in order]
    if kind == "uuid":   # canonical UUIDs: Qdrant keeps them as point ids (other strings become UUID5 point ids)
        return [str(uuid.UUID(int=(i * 0x9E3779B97F4A7C15) % 2 ** 128)) for i in order]
    return [i if i % 2 else f"m-{i}" for i in order]   # mixed: Qdrant orders integer point ids before UUIDs


def _fill(url, ids, dim=8, seed=0, batch=700):
    coll = connect(url).create(dim=dim, metric="cosine")
    vectors = np.random.default_rng(seed).normal(size=(len(ids), dim)).astype(np.float32)
    for lo in range(0, len(ids), batch):
        coll.upsert(VectorBatch(ids[lo:lo + batch], vectors[lo:lo + batch],
                                [{"n": lo + i} for i in range(len(ids[lo:lo + batch]))]))
    return coll


def _scan_ids(coll, batch_size, after=None, until=None):
    return [i for b in coll.scan(batch_size=batch_size, after=after, until=until) for i in b.ids]


def _check_cover(coll, n, batch_size=97, full=None):
    """``full``: the collection's full scan in key order, when the caller has it (any batch size gives the same)."""
    full = _scan_ids(coll, batch_size) if full is None else full
    ranges = coll.key_ranges(n)
    assert 1 <= len(ranges) <= n
    assert ranges[0].after is None and ranges[-1].until is None
    assert all(a.until == b.after for a, b in zip(ranges, ranges[1:]))   # consecutive, no gap
    assert all(KeyRange.from_dict(r.as_dict()) == r for r in ranges)    # a checkpoint keeps them as they are
    parts = [_scan_ids(coll, batch_size, r.after, r.until) for r in ranges]
    joined = [i for p in parts for i in p]
    assert len(joined) == len(set(joined)), "a record was read by two ranges"
    assert joined == full, "the ranges in order are the full scan"
    return ranges, parts


def _check_resume_inside(coll, ranges, parts, batch_size=50):
    """Each slice read from the cursor of its first batch goes on up to its own end, no further."""
    for r, part in zip(ranges, parts):
        first = next(iter(coll.scan(batch_size=batch_size, after=r.after, until=r.until)), None)
        if first is None:
            assert part == []
            continue
        assert first.ids == part[:batch_size]
        assert first.ids + _scan_ids(coll, batch_size, first.cursor, r.until) == part


@pytest.mark.parametrize("kind", ["str", "int", "uuid", "mixed"])
def test_ranges_cover_every_record_once(engine, new_url, kind):
    if kind == "mixed" and engine.name not in MIXED_IDS:
        pytest.skip(f"{engine.name} collections have one type of id")
    if kind == "uuid" and engine.name not in UUID_IDS:
        pytest.skip(f"{engine.name} stores UUIDs as any other string")
    n = 2_000
    ids = _ids(kind, n)
    coll = _fill(new_url(), ids)
    full = _scan_ids(coll, 500)
    ranges, parts = _check_cover(coll, 5, full=full)
    assert len(ranges) == 5
    assert sorted(map(str, (i for p in parts for i in p))) == sorted(map(str, ids)), "every record is in a range"
    assert min(len(p) for p in parts) > 0.5 * n / 5, "ranges are roughly balanced"
    _check_resume_inside(coll, ranges, parts)
    assert _check_cover(coll, 1, batch_size=500, full=full)[0] == [KeyRange(None, None)]
    # many narrow ranges (about 31 records each)
    _check_cover(coll, 64, batch_size=40, full=full)


def test_more_ranges_than_records(engine, new_url):
    coll = _fill(new_url(), [f"id-{i}" for i in range(3)])
    ranges, parts = _check_cover(coll, 8, batch_size=2)
    assert [len(p) for p in parts] == [1, 1, 1], "one record per range, none empty, none twice"
    _check_resume_inside(coll, ranges, parts, batch_size=1)
    with pytest.raises(InputError):
        coll.key_ranges(0)


def test_ranges_of_an_empty_collection(engine, new_url):
    coll = connect(new_url()).create(dim=4, metric="cosine")
    assert coll.key_ranges(4) == [KeyRange(None, None)]
    assert list(coll.scan(batch_size=10)) == []


def test_single_process_stores_say_so(engine, new_url):
    """What ``--engine ray`` refuses: the stores that one process at a time may open."""
    assert connect(new_url()).single_process is (engine.name in SINGLE_PROCESS)


def test_single_process_by_url(tmp_path):
    """Local forms of a store are single-process, server forms are not (no connection is made to tell)."""
    assert connect(f"qdrant://{tmp_path}/q/c").single_process
    assert connect("qdrant://:memory:/c").single_process      # this process's memory: other processes see nothing
    assert not connect("qdrant://127.0.0.1:6333/c").single_process
    assert connect(f"chroma://{tmp_path}/ch/c").single_process
    assert not connect("chroma://127.0.0.1:8000/c").single_process
    assert connect(f"milvus://{tmp_path}/m.db/c").single_process
    assert not connect("milvus://127.0.0.1:19530/c").single_process
    assert not connect(f"file://{tmp_path}/f").single_process


def test_qdrant_local_directory_ranges(tmp_path):
    """Qdrant's local ``path=`` mode (its contract engine is ``:memory:``): the same ranges, from the same scroll."""
    pytest.importorskip("qdrant_client")
    coll = _fill(f"qdrant://{tmp_path}/q/c", _ids("mixed", 300), batch=300)
    ranges, parts = _check_cover(coll, 4, batch_size=40)
    assert len(ranges) == 4 and [len(p) for p in parts] == [75] * 4
    _check_resume_inside(coll, ranges, parts, batch_size=20)


@pytest.mark.engines("qdrant_local", "qdrant_edge")
def test_qdrant_ranges_are_keysets(engine, new_url):
    """A Qdrant slice is bounded by point ids, not positions: a point written inside it after planning is read by
    that slice alone, and the others are unchanged."""
    coll = _fill(new_url(), [i * 10 for i in range(100)])
    ranges, parts = _check_cover(coll, 4, batch_size=16)
    assert ranges[1] == KeyRange(240, 490)
    coll.upsert(VectorBatch([255], np.ones((1, 8), np.float32)))
    after = [_scan_ids(coll, 16, r.after, r.until) for r in ranges]
    assert after == [parts[0], sorted(parts[1] + [255]), parts[2], parts[3]]


@pytest.mark.engines("chroma_server", "chroma_persistent")
def test_chroma_ranges_are_offsets(engine, new_url):
    """Chroma has no range filter on ids: slices are offsets of its storage order (first-write order), planned from
    the count alone, and the cursor inside a slice is the offset reached (the format of its resumable scans)."""
    ids = _ids("str", 100)
    coll = _fill(new_url(), ids, batch=30)
    ranges, parts = _check_cover(coll, 4, batch_size=16)
    assert ranges == [KeyRange(None, 25), KeyRange(25, 50), KeyRange(50, 75), KeyRange(75, None)]
    assert [i for p in parts for i in p] == ids, "the order records were first written in"
    assert [b.cursor for b in coll.scan(batch_size=10, after=25, until=50)] == [35, 45, 50]
    with pytest.raises(InputError, match="invalid scan cursor"):
        next(iter(coll.scan(after=-1)))


def test_quantiles():
    assert quantile_positions(10, 1) == []
    assert quantile_positions(10, 2) == [4]
    assert quantile_positions(3, 8) == [0, 1]
    assert ranges_from_keys([], 4) == [KeyRange(None, None)]
    assert ranges_from_keys([1, 1, 1, 2], 4) == [KeyRange(None, 1), KeyRange(1, None)]
    assert KeyRange.from_dict(KeyRange([1, 2], None).as_dict()) == KeyRange([1, 2], None)


def test_file_ranges_follow_upserts_of_existing_ids(tmp_path):
    """An id upserted again lives in its newest segment: the ranges follow the live rows."""
    coll = _fill(f"file://{tmp_path / 'c'}", [f"id-{i:04d}" for i in range(1000)])
    coll.upsert(VectorBatch([f"id-{i:04d}" for i in range(0, 1000, 3)], np.ones((334, 8), np.float32)))
    _, parts = _check_cover(coll, 4)
    assert sorted(i for p in parts for i in p) == [f"id-{i:04d}" for i in range(1000)]
