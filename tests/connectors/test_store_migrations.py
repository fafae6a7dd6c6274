"""Store-specific migration paths: in-place vector fields and deferred index builds (where the store has them)."""
from __future__ import annotations

import numpy as np
import pytest

from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import StoreError
from vecbridge.jobs import migrate, verify, wrap


@pytest.fixture
def align(tmp_path, sample):
    return Alignment.from_estimator(OrthogonalProcrustes().fit(sample.docs_old[:1000], sample.docs_new[:1000])).save(
        tmp_path / "a.vb")


def _fill(url, sample):
    coll = connect(url).create(dim=384)
    coll.upsert(VectorBatch(sample.ids, sample.docs_old, [{"text": it["doc"]} for it in sample.items]))
    return coll


def test_in_place_field_keeps_the_original_vectors(engine, new_url, sample, align):
    url = new_url("inplace")
    coll = _fill(url, sample)
    if "add_vector_field" not in engine.features:   # stores without named vectors refuse, clearly
        with pytest.raises(StoreError, match="not supported"):
            coll.with_vector_field("probe")
        with pytest.raises(StoreError, match="not supported"):
            migrate(url, align, field="v_mpnet")
        return
    coll.with_vector_field("probe")   # a store with vector fields gives a view (an error here fails the test)
    before = {b_id: (v, p) for b in coll.scan(500) for b_id, v, p in zip(b.ids, b.vectors, b.payloads)}
    result = migrate(url, align, field="v_mpnet", batch_size=400)
    assert result["written"] == 1500
    assert connect(url).info().count == 1500
    after = {b_id: (v, p) for b in connect(url).scan(500) for b_id, v, p in zip(b.ids, b.vectors, b.payloads)}
    assert after.keys() == before.keys()
    for i in before:
        np.testing.assert_array_equal(after[i][0], before[i][0])   # the original vectors are untouched
        assert after[i][1] == before[i][1]                         # and so are the payloads
    field_batch = connect(url).with_vector_field("v_mpnet").get(list(before))
    assert field_batch.payloads == [before[i][1] for i in field_batch.ids] and len(field_batch) == 1500
    assert verify(url, url, align, field="v_mpnet")["ok"]
    field_view = connect(url).with_vector_field("v_mpnet")
    ids_f, _ = field_view.search(sample.queries_new[:5], 5)
    ids_w, _ = wrap(connect(url), align).search(sample.queries_new[:5], 5)
    assert np.mean([len(set(a) & set(b)) / 5 for a, b in zip(ids_f, ids_w)]) >= 0.8   # ANN vs exact


def test_deferred_index_is_built_after_a_migration(engine, new_url, sample, align, tmp_path):
    target = connect(new_url("defer"))
    if not target.supports_deferred_index:
        pytest.skip(f"{engine.name} maintains its index as it loads")
    src = connect(f"file://{tmp_path}/old").create(dim=384)
    src.upsert(VectorBatch(sample.ids, sample.docs_old))
    migrate(src.url, align, target.url)
    conn = target._connection()   # the connector's own connection (pgvector is the only deferred store)

    def n_hnsw(coll):
        return conn.execute("SELECT count(*) FROM pg_indexes WHERE indexdef ILIKE '%%hnsw%%' AND tablename = %s",
                            (coll.table.split(".")[-1],)).fetchone()[0]

    assert n_hnsw(target) == 1
    # --no-index: the user builds it later; the data is complete either way
    bare = connect(new_url("noindex"))
    migrate(src.url, align, bare.url, build_index=False)
    assert n_hnsw(bare) == 0 and bare.info().count == len(sample.ids)
