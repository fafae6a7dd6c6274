"""``vecbridge.integrations.ray`` on a real two-node Ray cluster (``ray.cluster_utils.Cluster``, every address local) against real
stores: a collection read as a Ray dataset holds every record once, as the store holds it; read, ``map_batches``
with an alignment and write gives the collection a single-process ``migrate`` gives, bit for bit; a dataset is never
written into its own source; stores that cannot be read in parallel are refused in one line."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import collection_urls
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.connectors import VectorBatch, connect
from vecbridge.connectors.base import Collection
from vecbridge.connectors.file import FileCollection
from vecbridge.errors import CheckFailed, InputError, StoreError
from vecbridge.jobs import migrate
from vecbridge.jobs.rewrite import mapper

# Ray turns 127.0.0.1 in an address into this machine's network address unless it is told that the cluster is a
# local one: keep every address on the loopback
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

N, DIM_OLD, DIM_NEW = 2_000, 64, 96   # wide enough that BLAS rounds a one-row product differently


def _alignment(seed: int = 5) -> Alignment:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(300, DIM_OLD)).astype(np.float32)
    Y = rng.normal(size=(300, DIM_NEW)).astype(np.float32)
    return Alignment.from_estimator(OrthogonalProcrustes().fit(X, Y))


def _payload(i: int) -> dict:
    """Payloads whose keys and value types differ from record to record (what an Arrow struct column would mangle)."""
    if i % 5 == 0:
        return {}
    p = {"n": i if i % 2 else str(i), "text": f"document {i} – naïve ☃", "tags": ["a", "b", "c"][: i % 4]}
    if i % 3 == 0:
        p["nested"] = {"x": [1, 2.5, None], "ok": bool(i % 2)}
    return p


def test_alignment_maps_a_batch_as_migrate_does():
    """``alignment(batch)`` on numpy batches of any size, one row included, equals ``mapper`` bit for bit, and keeps
    the other columns."""
    align = _alignment()
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, DIM_OLD)).astype(np.float32)
    ids = np.array([f"r{i}" for i in range(50)], dtype=object)
    whole = mapper(align)(VectorBatch(list(ids), X)).vectors
    for size in (1, 2, 7, 50):
        parts = []
        for lo in range(0, 50, size):
            batch = {"id": ids[lo:lo + size], "vector": X[lo:lo + size], "payload": ids[lo:lo + size]}
            out = align(batch)
            assert out["id"] is batch["id"] and out["payload"] is batch["payload"]
            assert out["vector"].dtype == np.float32 and out["vector"].shape == (len(batch["id"]), DIM_NEW)
            parts.append(out["vector"])
        assert np.concatenate(parts).tobytes() == whole.tobytes(), size
    bad = X[:3].copy()
    bad[1, 4] = np.nan
    with pytest.raises(InputError, match="'r1' has a NaN"):
        align({"id": ids[:3], "vector": bad})
    with pytest.raises(InputError, match="'vector' column"):
        align(X)


def test_our_error_is_found_inside_what_ray_raised():
    """A task's error arrives wrapped (``RayTaskError``, its ``cause``), and Ray Data chains it further; the one-line
    error raised to the user is ours wherever it sits in that chain, else Ray's own exception."""
    from types import SimpleNamespace

    from vecbridge.runtime.ray_engine import task_error

    class TaskError(Exception):   # stands in for ray.exceptions.RayTaskError: the unwrapping is our own logic
        def __init__(self, cause):
            super().__init__("traceback of the worker ...")
            self.cause = cause

    fake_ray = SimpleNamespace(exceptions=SimpleNamespace(RayTaskError=TaskError))
    ours = StoreError("collection not found")
    try:
        try:
            raise TaskError(ours)
        except TaskError as exc:
            raise RuntimeError("a Ray Data operator failed") from exc
    except RuntimeError as exc:
        chained = exc
    assert task_error(fake_ray, chained) is ours
    assert task_error(fake_ray, TaskError(OSError("disk full"))).args == ("disk full",)
    foreign = TaskError(ValueError("not ours"))
    assert task_error(fake_ray, foreign) is foreign
    loop = RuntimeError("a cycle")
    loop.__context__ = RuntimeError("back")
    loop.__context__.__context__ = loop
    assert task_error(fake_ray, loop) is loop


def test_import_cli_does_not_import_ray():
    code = "import sys, vecbridge, vecbridge.cli; print('ray' in sys.modules, 'vecbridge.integrations.ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False"]


# --- a real two-node cluster, real stores ------------------------------------------------------------------------
def _engine(request, name: str):
    """The session's server of a store (None for the file store)."""
    return None if name == "file" else request.getfixturevalue("pg_engine" if name == "pgvector" else "milvus_engine")


@pytest.fixture(params=["file", "pgvector", pytest.param("milvus_server", marks=pytest.mark.slow)])
def store(request, tmp_path):
    """``url(name)`` of new collections on one engine."""
    return collection_urls(_engine(request, request.param), tmp_path)


@pytest.fixture(scope="module")
def made_sources():
    """Per store, made on first use: the URL of a ``_source`` collection."""
    return {}


@pytest.fixture
def src(request, store, tmp_path_factory, made_sources) -> str:
    """A ``_source`` collection on the test's store, made once per store and shared by the tests that only read it
    (a Milvus collection waits for its load when it is made)."""
    kind = request.node.callspec.params["store"]
    if kind not in made_sources:
        made_sources[kind] = _source(collection_urls(_engine(request, kind), tmp_path_factory.mktemp("src"))("src"))
    return made_sources[kind]


def _source(url: str) -> str:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N, DIM_OLD)).astype(np.float32)
    ids = [f"doc-{(i * 7919) % N:05d}" for i in range(N)]   # not in key order
    coll = connect(url)
    coll.create(dim=DIM_OLD)
    for lo in range(0, N, 500):
        coll.upsert(VectorBatch(ids[lo:lo + 500], X[lo:lo + 500], [_payload(i) for i in range(lo, lo + 500)]))
    return url


def _records(url):
    """(ids, vectors, payloads) of a collection as its own scan returns them, sorted by id."""
    got = VectorBatch.concat(list(connect(url).scan(batch_size=1000)))
    order = sorted(range(len(got)), key=lambda r: got.ids[r])
    return [got.ids[r] for r in order], got.vectors[order], [got.payloads[r] for r in order]


def _dataset_records(ds):
    ids, vectors, payloads = [], [], []
    for batch in ds.iter_batches(batch_format="numpy", batch_size=None):
        ids += batch["id"].tolist()
        vectors.append(batch["vector"])
        payloads += [json.loads(p) for p in batch["payload"]]
    vectors = np.concatenate(vectors)
    order = sorted(range(len(ids)), key=lambda r: ids[r])
    return [ids[r] for r in order], vectors[order], [payloads[r] for r in order]


def _assert_same(got, want):
    assert len(got[0]) == len(set(got[0])) == N, "every record once"
    assert got[0] == want[0]
    assert got[1].dtype == np.float32 and got[1].tobytes() == want[1].tobytes(), "vectors bit for bit"
    assert got[2] == want[2]


def test_read_collection_returns_every_record_once(ray_cluster, src):
    import vecbridge.integrations.ray as vbr

    source = vbr.CollectionDatasource(src, batch_size=97)
    tasks = source.get_read_tasks(4)
    assert len(tasks) == 4 and sum(t.metadata.num_rows for t in tasks) == N
    ds = vbr.read_collection(src, parallelism=4, batch_size=97)
    assert ds.count() == N
    assert ds.schema().names == ["id", "vector", "payload"]
    _assert_same(_dataset_records(ds), _records(src))
    ids = vbr.read_collection(src, parallelism=3, columns=["id"]).take_all()
    assert sorted(r["id"] for r in ids) == _records(src)[0]


def test_map_batches_and_write_equal_a_single_process_migrate(ray_cluster, store, src, tmp_path):
    import vecbridge.integrations.ray as vbr

    align = _alignment()
    migrate(src, align, store("ref"), batch_size=250, checkpoint_path=tmp_path / "ref.ckpt")
    # ranges, scan batches and map batches that fall differently from the reference run's
    ds = vbr.read_collection(src, parallelism=4, batch_size=131).map_batches(align, batch_size=61)
    summary = vbr.write_collection(ds, store("ray"), batch_size=113)
    assert (summary.written, summary.held, summary.mode) == (N, N, "create")
    _assert_same(_records(store("ray")), _records(store("ref")))
    assert connect(store("ray")).info().metric == connect(store("ref")).info().metric


def test_writing_into_the_source_is_refused(ray_cluster, tmp_path):
    import vecbridge.integrations.ray as vbr

    src = _source(f"file://{tmp_path / 'src'}")
    before = _records(src)
    ds = vbr.read_collection(src, parallelism=2).map_batches(_alignment())
    same = f"file://{tmp_path / 'x' / '..' / 'src'}"   # another spelling of the same collection
    for kwargs in ({}, {"mode": "append"}, {"mode": "overwrite"}, {"mode": "overwrite", "into_source": True}):
        with pytest.raises(InputError, match="refusing to write into the dataset's own source") as err:
            vbr.write_collection(ds, same, **kwargs)
        assert "\n" not in str(err.value)
    _assert_same(_records(src), before)
    # asked for explicitly: the records are upserted over themselves, by id
    summary = vbr.write_collection(vbr.read_collection(src, parallelism=2), src, mode="append", into_source=True)
    assert (summary.written, summary.held) == (N, N)
    _assert_same(_records(src), before)


def test_an_existing_target_is_refused_and_kept(ray_cluster, tmp_path):
    """``mode="create"`` refuses a target that exists (checked by the driver when the first block is ready), in one
    line, and leaves it as it was; ``append`` upserts into it."""
    import vecbridge.integrations.ray as vbr

    src = _source(f"file://{tmp_path / 'src'}")
    other = f"file://{tmp_path / 'other'}"
    connect(other).create(dim=DIM_NEW).upsert(VectorBatch(["z"], np.ones((1, DIM_NEW), np.float32)))
    ds = vbr.read_collection(src, parallelism=2).map_batches(_alignment())
    with pytest.raises(StoreError, match="target already exists") as err:
        vbr.write_collection(ds, other)
    assert "\n" not in str(err.value)
    assert connect(other).info().count == 1
    summary = vbr.write_collection(ds, other, mode="append")
    assert (summary.written, summary.held) == (N, N + 1)
    with pytest.raises(CheckFailed, match="more than once"):   # every id twice: written 2N, held N
        vbr.write_collection(ds.union(ds), f"file://{tmp_path / 'twice'}")


class NoRanges(FileCollection):
    """A file store that cannot cut key ranges (what a store without a keyset scan looks like)."""

    capabilities = dataclasses.replace(FileCollection.capabilities, key_ranges=False)
    key_ranges = Collection.key_ranges


def test_stores_that_cannot_be_read_in_parallel_are_refused_in_one_line(ray_cluster, tmp_path):
    import vecbridge.integrations.ray as vbr

    src = _source(f"file://{tmp_path / 'src'}")
    with pytest.raises(InputError, match="key ranges") as err:
        vbr.read_collection(NoRanges(src))
    assert "\n" not in str(err.value)
    pytest.importorskip("milvus_lite")
    lite = f"milvus://{tmp_path}/m.db/src"
    connect(lite).create(dim=4).upsert(VectorBatch(["a", "b"], np.eye(2, 4, dtype=np.float32)))
    with pytest.raises(InputError, match="one process at a time") as err:
        vbr.read_collection(lite)
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="one process at a time") as err:
        vbr.write_collection(vbr.read_collection(src), f"milvus://{tmp_path}/m.db/dst")
    assert "\n" not in str(err.value)
    assert not connect(f"milvus://{tmp_path}/m.db/dst").exists()
