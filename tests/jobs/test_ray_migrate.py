"""``migrate --engine ray`` on a real two-node Ray cluster (``ray.cluster_utils.Cluster``, every address local):
the result equals a single-process migrate bit for bit, a worker node dying mid-run changes nothing, and an
interrupted driver resumes to the same result."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import collection_urls
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import InputError
from vecbridge.jobs import migrate
from vecbridge.runtime.ray_engine import RayEngine

# Ray turns 127.0.0.1 in an address into this machine's network address unless it is told that the cluster is a
# local one: keep every address on the loopback
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

N, DIM_OLD, DIM_NEW, BATCH = 5_000, 32, 48, 100


def test_ray_is_not_imported_without_the_engine_flag(tmp_path):
    """The CLI and a normal migrate never import ray (checked in a fresh interpreter)."""
    code = f"""
import sys
import numpy as np
import vecbridge.cli
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import InputError
from vecbridge.jobs import migrate
from vecbridge.runtime.ray_engine import RayEngine
rng = np.random.default_rng(0)
X, Y = rng.normal(size=(50, 4)).astype(np.float32), rng.normal(size=(50, 4)).astype(np.float32)
connect("file://{tmp_path}/src").create(dim=4).upsert(VectorBatch([str(i) for i in range(50)], X))
Alignment.from_estimator(OrthogonalProcrustes().fit(X, Y)).save("{tmp_path}/a.vb")
vecbridge.cli.main(["migrate", "file://{tmp_path}/src", "--alignment", "{tmp_path}/a.vb", "--to",
                    "file://{tmp_path}/cli", "--json"], standalone_mode=False)
migrate("file://{tmp_path}/src", "{tmp_path}/a.vb", "file://{tmp_path}/api")
print("RAY", "ray" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "RAY False"
    assert connect(f"file://{tmp_path}/cli").info().count == 50


def test_missing_ray_is_one_line_naming_the_extra(tmp_path):
    code = """
import sys
sys.modules["ray"] = None   # what an environment without the extra looks like
from vecbridge.cli import main
main(["migrate", "file:///nowhere/src", "--alignment", "/nowhere/a.vb", "--to", "file:///nowhere/t",
      "--engine", "ray"])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "vecbridge[ray]" in lines[0], out.stderr


def test_mapping_does_not_depend_on_how_batches_fall():
    """Ranges that cut batches elsewhere still give bit-identical vectors (every row is mapped independently of its
    batch, whatever the BLAS kernel: tests/numeric/test_rowwise.py)."""
    from vecbridge.jobs.rewrite import mapper

    rng = np.random.default_rng(3)
    X, Y = rng.normal(size=(300, 64)).astype(np.float32), rng.normal(size=(300, 64)).astype(np.float32)
    transform = mapper(Alignment.from_estimator(OrthogonalProcrustes().fit(X, Y)))
    whole = transform(VectorBatch(list(range(300)), X)).vectors
    for size in (1, 2, 7, 128, 1000):
        parts = np.concatenate([transform(VectorBatch(list(range(lo, min(lo + size, 300))), X[lo:lo + size])).vectors
                                for lo in range(0, 300, size)])
        assert parts.tobytes() == whole.tobytes(), size


# --- a real two-node cluster ------------------------------------------------------------------------------------------
@pytest.fixture
def cluster(ray_cluster):
    """The session's two-node Ray cluster (tests/conftest.py)."""
    return ray_cluster


def _engine(request, name: str):
    """The session's server of a store (None for the file store)."""
    return None if name == "file" else request.getfixturevalue("pg_engine" if name == "pgvector" else "milvus_engine")


@pytest.fixture(params=["file", "pgvector", pytest.param("milvus_server", marks=pytest.mark.slow)])
def store(request, tmp_path):
    """``url(name)`` of new collections on one engine."""
    return collection_urls(_engine(request, request.param), tmp_path)


#: the driver's recovery (a node lost, a driver interrupted) is the same for every store: on the file store and on
#: a server (PostgreSQL); the Milvus server (10-15 s a run) is in test_ray_migrate_equals_single_process, where its
#: ranges are read and written by the workers
RECOVERY_STORES = pytest.mark.parametrize("store", ["file", "pgvector"], indirect=True)


@pytest.fixture(scope="module")
def made_sources():
    """Per store, made on first use: ``_setup``'s source collection and its single-process migration."""
    return {}


@pytest.fixture
def source(request, store, tmp_path, tmp_path_factory, made_sources):
    """``_setup`` for the test's store, made once per store and shared by the tests of this module: each reads the
    source (a migrate never writes it) and writes targets of its own. The map is copied into the test's
    ``tmp_path``, where a migrate keeps its checkpoint beside it. (On a Milvus server this spares each test two new
    collections, each waiting for its load.)"""
    kind = request.node.callspec.params["store"]
    if kind not in made_sources:
        root = tmp_path_factory.mktemp(f"source_{kind}")
        made_sources[kind] = _setup(collection_urls(_engine(request, kind), root), root)
    src, align, reference = made_sources[kind]
    return src, Path(shutil.copy(align, tmp_path / "a.vb")), reference


def _setup(store, tmp_path):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N, DIM_OLD)).astype(np.float32)
    Y = rng.normal(size=(N, DIM_NEW)).astype(np.float32)
    ids = [f"doc-{(i * 7919) % N:05d}" for i in range(N)]   # not in key order
    payloads = [{"n": i, "text": f"document {i}", "tags": ["a", "b"][: i % 3]} for i in range(N)]
    src = connect(store("src"))
    src.create(dim=DIM_OLD)
    for lo in range(0, N, 1000):
        src.upsert(VectorBatch(ids[lo:lo + 1000], X[lo:lo + 1000], payloads[lo:lo + 1000]))
    align = Alignment.from_estimator(OrthogonalProcrustes().fit(X[:1000], Y[:1000])).save(tmp_path / "a.vb")
    reference = store("ref")
    migrate(src.url, align, reference, batch_size=BATCH)
    return src.url, align, _records(reference)


def _records(url):
    got = VectorBatch.concat(list(connect(url).scan(batch_size=1000)))
    order = sorted(range(len(got)), key=lambda r: got.ids[r])
    return [got.ids[r] for r in order], got.vectors[order], [got.payloads[r] for r in order]


def _assert_same(url, reference):
    ids, vectors, payloads = _records(url)
    assert len(ids) == len(set(ids)) == N, "every record once"
    assert ids == reference[0]
    assert vectors.tobytes() == reference[1].tobytes(), "vectors bit for bit"
    assert payloads == reference[2]
    assert connect(url).info().count == N


def test_ray_migrate_equals_single_process(cluster, store, source, tmp_path):
    src, align, reference = source
    seen = []
    result = migrate(src, align, store("ray"), engine=RayEngine(workers=2), batch_size=BATCH, on_progress=seen.append)
    assert (result.count, result.read, result.written, result.resumed_from) == (N, N, N, 0)
    assert sum(seen) == N
    _assert_same(store("ray"), reference)
    assert not list(tmp_path.glob("a.vb.*.migrate.json")), "the checkpoint goes when the job is done"


@RECOVERY_STORES
def test_a_worker_node_removed_mid_run_ends_exact(cluster, store, source, tmp_path, monkeypatch):
    from vecbridge.jobs import rewrite

    src, align, reference = source
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    original = rewrite.copy_unit
    doomed = cluster["worker"].node_id

    def logged(unit, job):   # a local function: Ray ships it by value; it notes every attempt of every task
        import ray

        node = ray.get_runtime_context().get_node_id()
        (attempts / f"{unit.phase}-{node}-{time.time_ns()}").touch()
        for n, report in enumerate(original(unit, job)):
            yield report
            # a task on the node to be removed waits there after its first batch (a minute at most), so that it is
            # still running when the node goes, however far ahead of the driver streamed tasks run
            deadline = time.monotonic() + 60
            while node == doomed and n == 0 and time.monotonic() < deadline:
                time.sleep(0.05)

    monkeypatch.setattr(rewrite, "copy_unit", logged)
    c = cluster["cluster"]
    done = {"read": 0, "removed": False}

    def on_worker() -> bool:
        return any(worker.node_id in p.name for p in attempts.iterdir())

    def progress(n):
        done["read"] += n
        if done["read"] >= 500 and not done["removed"] and on_worker():   # a task runs there: kill it
            done["removed"] = True
            c.remove_node(worker)        # kills that node's workers: their tasks re-run elsewhere
            cluster["worker"] = c.add_node(num_cpus=1)

    worker = cluster["worker"]
    result = migrate(src, align, store("ray"), engine=RayEngine(workers=2), batch_size=BATCH // 4,
                     on_progress=progress)
    assert done["removed"]
    assert len(list(attempts.iterdir())) > 2 * 4, "the task of the removed node ran again"
    assert result.read == result.written == N and done["read"] == N
    _assert_same(store("ray"), reference)


class Interrupt(Exception):
    pass


@RECOVERY_STORES
def test_an_interrupted_driver_resumes_exact(cluster, store, source, tmp_path):
    """The driver dies part-way (some ranges done, others half written); a resume with another worker count skips
    the finished ranges, continues the others from their last key, and ends exact."""
    src, align, reference = source
    ckpt = tmp_path / "ray.ckpt.json"
    done = {"read": 0}

    def progress(n):
        done["read"] += n
        if done["read"] >= N // 2:
            raise Interrupt

    with pytest.raises(Interrupt):
        migrate(src, align, store("ray"), engine=RayEngine(workers=2, units_per_worker=3), batch_size=BATCH,
                checkpoint_path=ckpt, on_progress=progress)
    state = json.loads(ckpt.read_text())
    assert len(state["ranges"]) == 6
    phases = state["phases"].values()
    assert any(p["done"] for p in phases) and 0 < sum(p["written"] for p in phases) < N
    with pytest.raises(InputError, match="different kind"):   # not a checkpoint the single-process job can use
        migrate(src, align, store("ray"), batch_size=BATCH, checkpoint_path=ckpt, resume=True)
    result = migrate(src, align, store("ray"), engine=RayEngine(workers=1), batch_size=BATCH, checkpoint_path=ckpt,
                     resume=True)
    assert result.resumed_from > 0 and result.resumed_from + result.written == N
    _assert_same(store("ray"), reference)
    assert not ckpt.exists()


def test_cli_driver_killed_then_resumed(cluster, tmp_path):
    """``vecbridge migrate --engine ray`` killed with SIGKILL after its first committed batches, then ``--resume``."""
    store = lambda name: f"file://{tmp_path / name}"
    src, align, reference = _setup(store, tmp_path)
    ckpt = tmp_path / "cli.ckpt.json"
    env = {**os.environ, "RAY_ADDRESS": cluster["cluster"].address, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    cmd = [sys.executable, "-m", "vecbridge.cli", "migrate", src, "--alignment", str(align), "--to", store("ray"),
           "--engine", "ray", "--workers", "2", "--batch-size", "20", "--checkpoint", str(ckpt), "--json"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    written = 0
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            written = sum(p["written"] for p in json.loads(ckpt.read_text())["phases"].values())
        except (OSError, ValueError, KeyError):
            written = 0
        if written >= 500:
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert 0 < written < N
    out = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["resumed_from"] >= written and result["read"] == N
    _assert_same(store("ray"), reference)


#: stores that one process at a time may open, as URLs under a directory
SINGLE_PROCESS = {
    "milvus_lite": lambda d, name: f"milvus://{d}/{name}.db/{name}",
    "qdrant_local": lambda d, name: f"qdrant://{d}/{name}/{name}",
    "qdrant_memory": lambda d, name: f"qdrant://:memory:/{name}_{d.name[-10:]}",
    "qdrant_edge": lambda d, name: f"qdrant-edge://{d}/{name}",
    "chroma_persistent": lambda d, name: f"chroma://{d}/{name}/{name}",
}
SINGLE_PROCESS_CLIENTS = {"milvus_lite": "milvus_lite", "qdrant_local": "qdrant_client", "qdrant_memory": "qdrant_client",
                          "qdrant_edge": "qdrant_edge", "chroma_persistent": "chromadb"}


@pytest.mark.parametrize("kind", sorted(SINGLE_PROCESS))
def test_single_process_stores_are_refused_in_one_line(kind, tmp_path):
    """As source or as target, before anything is written: every Ray task would open the store itself."""
    pytest.importorskip("ray")
    pytest.importorskip(SINGLE_PROCESS_CLIENTS[kind])
    url = SINGLE_PROCESS[kind]
    src = url(tmp_path, "src")
    connect(src).create(dim=4).upsert(VectorBatch(["a", "b"], np.eye(2, 4, dtype=np.float32)))
    align = Alignment.from_estimator(OrthogonalProcrustes().fit(np.eye(4), np.eye(4))).save(tmp_path / "a.vb")
    with pytest.raises(InputError, match="one process at a time") as refused:
        migrate(src, align, f"file://{tmp_path}/t", engine=RayEngine(workers=2))
    assert "\n" not in str(refused.value) and "the source " + connect(src).display_url in str(refused.value)
    assert not (tmp_path / "t").exists()
    connect(f"file://{tmp_path}/f").create(dim=4).upsert(VectorBatch(["a"], np.eye(1, 4, dtype=np.float32)))
    target = url(tmp_path / "out", "tgt")
    with pytest.raises(InputError, match="the target .* one process at a time"):
        migrate(f"file://{tmp_path}/f", align, target, engine=RayEngine(workers=2))
    assert not (tmp_path / "out").exists() and not connect(target).exists()


def test_cli_refuses_a_single_process_store_in_one_line(tmp_path):
    from click.testing import CliRunner

    from vecbridge.cli import main

    pytest.importorskip("ray")
    pytest.importorskip("qdrant_edge")
    src = f"qdrant-edge://{tmp_path}/shard"
    connect(src).create(dim=4).upsert(VectorBatch([1, 2], np.eye(2, 4, dtype=np.float32)))
    Alignment.from_estimator(OrthogonalProcrustes().fit(np.eye(4), np.eye(4))).save(tmp_path / "a.vb")
    result = CliRunner().invoke(main, ["migrate", src, "--alignment", str(tmp_path / "a.vb"), "--to",
                                       f"file://{tmp_path}/t", "--engine", "ray"])
    err = result.stderr if hasattr(result, "stderr") else result.output
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert len(lines) == 1 and "one process at a time" in lines[0] and "--engine ray" in lines[0], err


@pytest.fixture(scope="module", params=["chroma_server"])
def server_engine(request):
    """Other servers with key ranges that this machine can start (Milvus is one of ``store``'s engines; a Qdrant
    server cannot be installed here: Qdrant's ranges are the same client code as its local mode's, tested in
    tests/connectors/test_key_ranges.py). The session's server of each (tests/conftest.py)."""
    return request.getfixturevalue({"chroma_server": "chroma_engine"}[request.param])


def test_ray_migrate_on_a_server(cluster, server_engine, tmp_path):
    """A store on a server (its embedded forms are refused: one process at a time): the same result as a
    single-process migrate, bit for bit."""
    store = lambda name: server_engine.url(f"{name}_{tmp_path.name[-12:].replace('-', '_').lower()}")
    src, align, reference = _setup(store, tmp_path)
    result = migrate(src, align, store("ray"), engine=RayEngine(workers=2), batch_size=BATCH * 5)
    assert (result.read, result.written) == (N, N)
    _assert_same(store("ray"), reference)
