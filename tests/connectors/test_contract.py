"""The connector protocol, proven once per real engine (parametrised over ``engines/``)."""
from __future__ import annotations

import numpy as np
import pytest

from vecbridge import metrics
from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import InputError, NotFound, StoreError


def _records(n, dim, seed=0, prefix="id"):
    rng = np.random.default_rng(seed)
    ids = [f"{prefix}-{i:05d}" for i in range(n)]
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    payloads = [{"text": f"document number {i}", "n": i, "tags": ["a", "b"][: i % 3], "ok": bool(i % 2)}
                for i in range(n)]
    return ids, vectors, payloads


def _fill(url, n, dim, metric="cosine", seed=0, batch=1000):
    coll = connect(url).create(dim=dim, metric=metric)
    ids, vectors, payloads = _records(n, dim, seed)
    for lo in range(0, n, batch):
        coll.upsert(VectorBatch(ids[lo:lo + batch], vectors[lo:lo + batch], payloads[lo:lo + batch]))
    return coll, ids, vectors, payloads


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2"])
def test_create_reports_dim_metric_and_count(new_url, metric):
    coll = connect(new_url()).create(dim=16, metric=metric)
    info = coll.info()
    assert (info.dim, info.metric, info.count) == (16, metric, 0)
    assert coll.exists()


def test_round_trip_with_payloads(new_url):
    # 3,000 records: three upsert batches and three scan pages, as many as the round trip needs (10,000 only
    # lengthened the stores' index inserts)
    coll, ids, vectors, payloads = _fill(new_url(), 3000, 384)
    assert coll.info().count == 3000
    seen = {}
    for batch in coll.scan(batch_size=1000):
        for i, v, p in zip(batch.ids, batch.vectors, batch.payloads):
            assert i not in seen
            seen[i] = (v, p)
    assert set(seen) == set(ids)
    order = [seen[i] for i in ids]
    got = np.stack([v for v, _ in order])
    if coll.info().metric == "cosine" and not np.allclose(got, vectors, rtol=1e-5, atol=1e-6):
        # some stores keep cosine collections normalised: then directions must match exactly
        got = got / np.linalg.norm(got, axis=1, keepdims=True)
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    np.testing.assert_allclose(got, vectors, rtol=1e-5, atol=1e-6)
    for (_, p), expected in zip(order, payloads):
        assert {k: p[k] for k in expected} == expected


def test_upsert_is_idempotent_by_id(new_url):
    coll, ids, vectors, payloads = _fill(new_url(), 200, 8)
    coll.upsert(VectorBatch(ids[:50], vectors[:50], payloads[:50]))
    assert coll.info().count == 200
    changed = vectors[:5] * -1
    coll.upsert(VectorBatch(ids[:5], changed, [{"text": "changed"}] * 5))
    got = coll.get(ids[:5])
    assert coll.info().count == 200
    np.testing.assert_allclose(got.vectors / np.linalg.norm(got.vectors, axis=1, keepdims=True),
                               changed / np.linalg.norm(changed, axis=1, keepdims=True), atol=1e-6)
    assert all(p["text"] == "changed" for p in got.payloads)


def test_get_keeps_order_and_skips_missing(new_url):
    coll, ids, _, _ = _fill(new_url(), 100, 8)
    got = coll.get([ids[7], "no-such-id", ids[3]])
    assert got.ids == [ids[7], ids[3]]
    assert got.vectors.shape == (2, 8)


def test_sample_is_deterministic_and_uniform(new_url):
    coll, ids, _, _ = _fill(new_url(), 1000, 8)
    a, b, c = coll.sample(300, seed=1), coll.sample(300, seed=1), coll.sample(300, seed=2)
    assert a.ids == b.ids and a.ids != c.ids
    assert len(set(a.ids)) == 300
    assert len(coll.sample(5000, seed=0)) == 1000
    # uniformity: over 30 seeds every decile of the collection is drawn about equally often (expected 900 each)
    rank = {i: j for j, i in enumerate(ids)}
    counts = np.zeros(10)
    for seed in range(30):
        for i in coll.sample(300, seed=seed).ids:
            counts[rank[i] // 100] += 1
    assert counts.min() > 750 and counts.max() < 1050, counts


def test_scan_resumes_from_cursor_without_gaps_or_repeats(new_url):
    coll, ids, _, _ = _fill(new_url(), 1050, 8)
    first, cursor = [], None
    for n, batch in enumerate(coll.scan(batch_size=100)):
        first.extend(batch.ids)
        cursor = batch.cursor
        if n == 2:
            break  # simulate a crash after the third committed batch
    rest = [i for batch in coll.scan(batch_size=100, after=cursor) for i in batch.ids]
    assert len(first) == 300
    assert sorted(first + rest) == sorted(ids)


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2"])
def test_search_matches_brute_force(new_url, metric):
    coll, ids, vectors, _ = _fill(new_url(), 2000, 32, metric=metric, seed=3)
    queries = np.random.default_rng(9).normal(size=(20, 32)).astype(np.float32)
    got_ids, scores = coll.search(queries, k=10)
    truth = metrics.top_k(queries, vectors, 10, metric=metric)
    recall = np.mean([len(set(g) & {ids[j] for j in t}) / 10 for g, t in zip(got_ids, truth)])
    assert recall >= 0.9, recall
    assert scores.shape == (20, 10)
    assert np.all(np.diff(scores, axis=1) <= 1e-5)  # best first


def test_wrong_dimension_and_nan_are_refused_before_writing(new_url):
    coll = connect(new_url()).create(dim=8)
    with pytest.raises(InputError, match="dimension"):
        coll.upsert(VectorBatch(["a"], np.ones((1, 9))))
    bad = np.ones((2, 8))
    bad[1, 3] = np.nan
    with pytest.raises(InputError, match="NaN"):
        coll.upsert(VectorBatch(["a", "b"], bad))
    assert coll.info().count == 0


def test_missing_collection_is_a_clear_store_error(new_url):
    coll = connect(new_url("missing"))
    assert not coll.exists()
    with pytest.raises(StoreError, match="not found"):
        coll.info()


def test_reading_a_missing_collection_raises_not_found(new_url):
    coll = connect(new_url("missing"))
    for read in (coll.info, lambda: next(iter(coll.scan(batch_size=10)))):
        with pytest.raises(NotFound, match="^collection not found: ") as err:
            read()
        assert isinstance(err.value, StoreError) and err.value.exit_code == 4
        assert coll.display_url in str(err.value) and "\n" not in str(err.value)


def test_empty_collection_samples_and_scans_nothing(new_url):
    coll = connect(new_url()).create(dim=8)
    assert len(coll.sample(10, seed=0)) == 0
    assert [len(b) for b in coll.scan(batch_size=10)] == []
