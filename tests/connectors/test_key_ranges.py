"""Partitioned scans: ``key_ranges`` + ``scan(after, until)`` read every record exactly once, on every engine that
scans with a keyset cursor; the other engines refuse with one clear line."""
from __future__ import annotations

import numpy as np
import pytest

from vecbridge.connectors import VectorBatch, connect
from vecbridge.connectors.base import KeyRange, quantile_positions, ranges_from_keys
from vecbridge.errors import InputError, StoreError

RANGED = {"file", "pgvector", "milvus_lite", "milvus_server"}


def _fill(url, ids, dim=8, seed=0, batch=700):
    coll = connect(url).create(dim=dim, metric="cosine")
    vectors = np.random.default_rng(seed).normal(size=(len(ids), dim)).astype(np.float32)
    for lo in range(0, len(ids), batch):
        coll.upsert(VectorBatch(ids[lo:lo + batch], vectors[lo:lo + batch],
                                [{"n": lo + i} for i in range(len(ids[lo:lo + batch]))]))
    return coll


def _scan_ids(coll, batch_size, after=None, until=None):
    return [i for b in coll.scan(batch_size=batch_size, after=after, until=until) for i in b.ids]


def _check_cover(coll, n, batch_size=97):
    full = _scan_ids(coll, batch_size)
    ranges = coll.key_ranges(n)
    assert 1 <= len(ranges) <= n
    assert ranges[0].after is None and ranges[-1].until is None
    assert all(a.until == b.after for a, b in zip(ranges, ranges[1:]))   # consecutive, no gap
    parts = [_scan_ids(coll, batch_size, r.after, r.until) for r in ranges]
    joined = [i for p in parts for i in p]
    assert len(joined) == len(set(joined)), "a record was read by two ranges"
    assert joined == full, "the ranges in order are the full scan"
    return ranges, parts


@pytest.mark.parametrize("kind", ["str", "int"])
def test_ranges_cover_every_record_once(engine, new_url, kind):
    if engine.name not in RANGED:
        pytest.skip(f"{engine.name} has no key ranges yet")
    n = 2_000
    ids = [f"k-{(i * 7919) % n:05d}" for i in range(n)] if kind == "str" else [(i * 7919) % n * 3 for i in range(n)]
    coll = _fill(new_url(), ids)
    ranges, parts = _check_cover(coll, 5)
    assert len(ranges) == 5
    assert min(len(p) for p in parts) > 0.5 * n / 5, "ranges are roughly balanced"
    _check_cover(coll, 1)
    # more ranges than records left in some slices: still a cover
    _check_cover(coll, 64, batch_size=10)
    # resuming inside a range with its own cursor continues up to its end, no further
    r = ranges[1]
    first = next(iter(coll.scan(batch_size=50, after=r.after, until=r.until)))
    rest = _scan_ids(coll, 50, first.cursor, r.until)
    assert first.ids + rest == parts[1]


def test_ranges_of_a_small_collection(engine, new_url):
    if engine.name not in RANGED:
        pytest.skip(f"{engine.name} has no key ranges yet")
    coll = _fill(new_url(), [f"id-{i}" for i in range(3)])
    ranges, parts = _check_cover(coll, 8, batch_size=2)
    assert sum(map(len, parts)) == 3
    with pytest.raises(InputError):
        coll.key_ranges(0)


def test_file_ranges_follow_upserts_of_existing_ids(tmp_path):
    """An id upserted again lives in its newest segment: the ranges follow the live rows."""
    coll = _fill(f"file://{tmp_path / 'c'}", [f"id-{i:04d}" for i in range(1000)])
    coll.upsert(VectorBatch([f"id-{i:04d}" for i in range(0, 1000, 3)], np.ones((334, 8), np.float32)))
    _, parts = _check_cover(coll, 4)
    assert sorted(i for p in parts for i in p) == [f"id-{i:04d}" for i in range(1000)]


def test_other_stores_refuse(engine, new_url):
    if engine.name in RANGED:
        pytest.skip("supported")
    coll = _fill(new_url(), [f"id-{i}" for i in range(10)])
    with pytest.raises(StoreError, match="ranges not supported yet"):
        coll.key_ranges(2)


def test_quantiles():
    assert quantile_positions(10, 1) == []
    assert quantile_positions(10, 2) == [4]
    assert quantile_positions(3, 8) == [0, 1]
    assert ranges_from_keys([], 4) == [KeyRange(None, None)]
    assert ranges_from_keys([1, 1, 1, 2], 4) == [KeyRange(None, 1), KeyRange(1, None)]
    assert KeyRange.from_dict(KeyRange([1, 2], None).as_dict()) == KeyRange([1, 2], None)
