"""Every connector declares what its store can do (``Collection.capabilities``), and on every real engine the store
does what its declaration says: key ranges cover the collection exactly once, a second vector field can be added
and written, an alias can be pointed (and moved), a serving view switched, an index built after a bulk load, a
batch of the preferred size written in one upsert, a store open to many processes is read by another one, and a
stamp is found where the store says it keeps it.
Stores that declare a capability they lack refuse it in one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from vecbridge.connectors import VectorBatch, connect
from vecbridge.connectors.base import Capabilities, Collection
from vecbridge.errors import StoreError

from .test_key_ranges import SINGLE_PROCESS

N, DIM = 60, 4


def _fill(url: str, n: int = N, **create) -> Collection:
    coll = connect(url).create(dim=DIM, metric="cosine", **create)
    vectors = np.random.default_rng(1).normal(size=(n, DIM)).astype(np.float32)
    coll.upsert(VectorBatch([f"r{i:05d}" for i in range(n)], vectors, [{"n": i} for i in range(n)]))
    return coll


def test_capabilities_are_declared_not_probed():
    """Collection itself declares nothing; the connectors each declare theirs (a class attribute, or a property
    where the URL decides: an embedded store or a server)."""
    assert Collection.capabilities == Capabilities()
    assert connect("file:///tmp/x").capabilities == Capabilities(key_ranges=True,
                                                                 stamp="the collection's manifest.json",
                                                                 record_stamps=(
        "columns beside each segment's payloads (in each record's payload in a version 1 directory)"))


def test_single_process_is_declared_by_url(engine, new_url):
    assert connect(new_url()).capabilities.single_process is (engine.name in SINGLE_PROCESS)


def test_key_ranges(engine, new_url):
    coll = _fill(new_url())
    assert coll.capabilities.key_ranges
    ranges = coll.key_ranges(3)
    parts = [[i for b in coll.scan(batch_size=7, after=r.after, until=r.until) for i in b.ids] for r in ranges]
    joined = [i for p in parts for i in p]
    assert sorted(joined) == [f"r{i:05d}" for i in range(N)], "every record exactly once"


def test_named_vectors(engine, new_url):
    coll = _fill(new_url())
    if not coll.capabilities.named_vectors:
        with pytest.raises(StoreError, match="not supported"):
            coll.with_vector_field("extra")
        return
    coll.add_vector_field("extra", 3)
    view = coll.with_vector_field("extra")
    view.upsert(VectorBatch(["r00001", "r00002"], np.eye(2, 3, dtype=np.float32)))
    got = view.get(["r00001", "r00002"])
    assert got.vectors.tolist() == np.eye(2, 3).tolist()
    assert connect(coll.url).get(["r00001"]).vectors.shape == (1, DIM), "the first field is untouched"


def test_alias(engine, new_url):
    first, second = _fill(new_url("one")), _fill(new_url("two"))
    alias = f"alias_{os.urandom(4).hex()}"
    if not first.capabilities.alias:
        with pytest.raises(StoreError, match="not supported"):
            first.point_alias(alias)
        return
    first.point_alias(alias)
    second.point_alias(alias)   # moved in one step


def test_serving_view(engine, new_url):
    coll = _fill(new_url())
    if not coll.capabilities.serving_view:
        assert not callable(getattr(coll, "serving_view", None))
        return
    coll.add_vector_field("extra", DIM)
    assert coll.serving_view("extra").endswith("_serving")
    assert coll.serving_view(coll.vector_field).endswith("_serving")   # and back


def test_deferred_index(engine, new_url):
    """An index left to after the bulk load where the store declares it (others ignore ``index=False``)."""
    coll = _fill(new_url(), index=False)
    coll.build_index()
    ids, _ = coll.search(coll.get(["r00007"]).vectors, k=1)
    assert ids[0] == ["r00007"]
    assert coll.capabilities.deferred_index is (engine.name == "pgvector")


def test_preferred_batch_size_is_one_upsert(engine, new_url):
    n = connect(new_url()).capabilities.preferred_batch_size
    assert n > 0
    assert _fill(new_url(), n=n).info().count == n


def test_many_processes_may_open_what_is_not_single_process(engine, new_url):
    coll = _fill(new_url())
    if coll.capabilities.single_process:
        pytest.skip("one process at a time may open this store")
    code = "import json, sys; from vecbridge.connectors import connect; print(json.dumps(connect(sys.argv[1]).info().count))"
    out = subprocess.run([sys.executable, "-c", code, coll.url], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == N


def _stamp_in_declared_place(coll, engine) -> dict:
    """The stamp as found in the place ``capabilities.stamp`` names, read there directly (not through the
    connector's own ``read_stamp``)."""
    place, scheme = coll.capabilities.stamp, coll.scheme
    if scheme == "file":
        assert "manifest.json" in place
        return json.loads((coll.path / "manifest.json").read_text())["vecbridge:stamp"]
    if scheme == "postgresql":
        import psycopg

        assert "side table vecbridge_stamps" in place
        with psycopg.connect(engine.server.dsn()) as conn:
            return conn.execute("SELECT stamp FROM public.vecbridge_stamps WHERE table_name = %s AND field = %s",
                                [coll.table, coll.vector_column]).fetchone()[0]
    if scheme == "qdrant-edge":
        assert "vecbridge_stamps.json in the shard's directory" in place
        return json.loads((coll.path / "vecbridge_stamps.json").read_text())["vecbridge:stamp"]
    if scheme == "qdrant":
        assert place == "collection metadata"
        return json.loads(coll._client().get_collection(coll.name).config.metadata["vecbridge:stamp"])
    if scheme == "milvus":
        assert place == "collection properties"
        return json.loads(coll._client.describe_collection(coll.name)["properties"]["vecbridge:stamp:vector"])
    assert scheme == "chroma" and place == "collection metadata"
    metadata = coll.client().get_collection(coll.name).metadata
    assert (metadata["hnsw:space"], metadata["vecbridge:dim"]) == ("cosine", DIM), "the rest stays as it was"
    return json.loads(metadata["vecbridge:stamp"])


def test_stamp_is_kept_where_declared(engine, new_url):
    coll = _fill(new_url(), n=3)
    assert coll.capabilities.stamp
    stamp = {"format": "vecbridge.space", "space": {"mean": [0.25, -1.5]}}
    coll.write_stamp(stamp)
    assert _stamp_in_declared_place(coll, engine) == stamp
