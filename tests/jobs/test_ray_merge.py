"""``merge --engine ray`` on the session's real two-node Ray cluster: for every policy a store supports and both
kinds of links, the merged collection equals the single-process merge's bit for bit (ids, vectors, payloads, the
second vector field of keep-both), with the same ``linked``/``renamed`` counts; an interrupted driver resumes to the
same result with every record once; the CLI runs it with ``--engine ray --json``."""
from __future__ import annotations

import importlib
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import collection_urls
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import InputError, StoreError
from vecbridge.jobs import merge
from vecbridge.jobs.merge import A_FIELD
from vecbridge.runtime.ray_engine import RayEngine

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")   # keep every Ray address on the loopback

N_A, N_B, SHARED, DIM_A, DIM_B, BATCH = 1_200, 1_000, 500, 24, 32, 64
POLICIES = {"file": ["keep-b", "keep-a"], "pgvector": ["keep-b", "keep-a", "keep-both"]}


@pytest.fixture(params=["file", "pgvector"])
def store(request, tmp_path):
    """``(engine name, url(name))`` for new collections on one engine."""
    engine = None if request.param == "file" else request.getfixturevalue("pg_engine")
    return request.param, collection_urls(engine, tmp_path)


def _inputs(url, tmp_path, links: str) -> dict:
    """A (old encoder) and B (new encoder), ``SHARED`` records in both, not in key order.

    ``links="ids"``: linked by equal ids. ``links="file"``: A has its own ids, a pairs file links ``SHARED`` of
    them, and 7 unlinked A records carry ids that B also holds (merged as ``a:<id>``)."""
    rng = np.random.default_rng(11)
    truth = rng.normal(size=(N_A + N_B - SHARED, DIM_B)).astype(np.float32)
    rot = np.linalg.qr(rng.normal(size=(DIM_B, DIM_B)))[0][:, :DIM_A].astype(np.float32)
    X = truth[:N_A] @ rot + 0.05 * rng.normal(size=(N_A, DIM_A)).astype(np.float32)
    Y = truth[N_A - SHARED:]
    b_ids = [f"doc-{(i * 7919) % 10_000:05d}" for i in range(N_A - SHARED, N_A + N_B - SHARED)]
    if links == "ids":
        a_ids = [f"doc-{(i * 7919) % 10_000:05d}" for i in range(N_A)]
        spec = "ids"
    else:
        a_ids = [f"a{(i * 31) % N_A:04d}" for i in range(N_A)]
        for k in range(7):                      # unlinked A records whose ids B also holds
            a_ids[3 + k * 50] = b_ids[600 + k * 40]
        pairs = tmp_path / "links.csv"
        pairs.write_text("".join(f"{a_ids[i]},{b_ids[i - (N_A - SHARED)]}\n" for i in range(N_A - SHARED, N_A)))
        spec = f"file:{pairs}"
    a_pay = [{"from": "a", "n": i, "text": f"old doc {i}"} for i in range(N_A)]
    b_pay = [{"from": "b", "pos": i, "tags": ["x", "y"][: i % 3]} for i in range(N_B)]
    A, B = connect(url("a")), connect(url("b"))
    A.create(dim=DIM_A)
    B.create(dim=DIM_B)
    for lo in range(0, N_A, 500):
        A.upsert(VectorBatch(a_ids[lo:lo + 500], X[lo:lo + 500], a_pay[lo:lo + 500]))
    for lo in range(0, N_B, 500):
        B.upsert(VectorBatch(b_ids[lo:lo + 500], Y[lo:lo + 500], b_pay[lo:lo + 500]))
    align = Alignment.from_estimator(OrthogonalProcrustes().fit(X[N_A - SHARED:], Y[:SHARED]))
    return {"a": A.url, "b": B.url, "links": spec, "align": align.save(tmp_path / f"ab-{links}.vb")}


def _records(url, field: str | None = None):
    coll = connect(url)
    coll = coll.with_vector_field(field) if field else coll
    got = VectorBatch.concat(list(coll.scan(batch_size=1000)))
    order = sorted(range(len(got)), key=lambda r: str(got.ids[r]))
    return [got.ids[r] for r in order], got.vectors[order], [got.payloads[r] for r in order]


def _assert_same(url, reference_url, policy):
    ids, vectors, payloads = _records(url)
    ref = _records(reference_url)
    assert len(ids) == len(set(ids)), "every record once"
    assert ids == ref[0]
    assert vectors.tobytes() == ref[1].tobytes(), "vectors bit for bit"
    assert payloads == ref[2]
    if policy == "keep-both":
        mine, theirs = _records(url, A_FIELD), _records(reference_url, A_FIELD)
        assert len(mine[0]) == SHARED and mine[0] == theirs[0]
        assert mine[1].tobytes() == theirs[1].tobytes(), "A's mapped vectors bit for bit"


def _counts(result) -> tuple:
    return result["written"], result["linked"], result["renamed"], result["count"]


@pytest.mark.parametrize("links", ["ids", "file"])
def test_ray_merge_equals_single_process(ray_cluster, store, tmp_path, links):
    """Every policy the store supports; keep-both where it has no second vector field is refused before any
    write, as the local merge refuses it."""
    engine, url = store
    inp = _inputs(url, tmp_path, links)
    renamed = 7 if links == "file" else 0
    for policy in POLICIES[engine]:
        local = merge(inp["a"], inp["b"], url(f"local_{policy}"), inp["align"], links=inp["links"], policy=policy,
                      batch_size=BATCH)
        seen = []
        ray = merge(inp["a"], inp["b"], url(f"ray_{policy}"), inp["align"], links=inp["links"], policy=policy,
                    engine=RayEngine(workers=2, units_per_worker=2), batch_size=BATCH, on_progress=seen.append)
        assert _counts(ray) == _counts(local) == (N_A + N_B - SHARED, SHARED, renamed, N_A + N_B - SHARED)
        assert sum(seen) == N_A + N_B, "every record of both inputs read once"
        _assert_same(url(f"ray_{policy}"), url(f"local_{policy}"), policy)
    assert not list(tmp_path.glob("*.merge.json")), "the checkpoints go when the jobs are done"
    if "keep-both" not in POLICIES[engine]:
        with pytest.raises(StoreError, match="not supported"):
            merge(inp["a"], inp["b"], url("both"), inp["align"], links=inp["links"], policy="keep-both",
                  engine=RayEngine(workers=2))
        assert not connect(url("both")).exists()


class Interrupt(Exception):
    pass


def test_an_interrupted_merge_resumes_exact(ray_cluster, store, tmp_path):
    """The driver dies part-way (B's slices partly written); a resume with one worker ends exact: every record once,
    the counts of the whole job, a checkpoint the local merge refuses to use."""
    engine, url = store
    inp = _inputs(url, tmp_path, "file")
    policy = POLICIES[engine][-1]
    local = merge(inp["a"], inp["b"], url("local"), inp["align"], links=inp["links"], policy=policy,
                  batch_size=BATCH)
    ckpt = tmp_path / "ray.ckpt.json"
    done = {"read": 0}

    def progress(n):
        done["read"] += n
        if done["read"] >= (N_A + N_B) // 3:
            raise Interrupt

    options = {"links": inp["links"], "policy": policy, "batch_size": BATCH, "checkpoint_path": ckpt}
    with pytest.raises(Interrupt):
        merge(inp["a"], inp["b"], url("ray"), inp["align"], engine=RayEngine(workers=2, units_per_worker=2),
              on_progress=progress, **options)
    state = json.loads(ckpt.read_text())
    assert sorted(state["ranges"]) == ["a", "b"]
    written = sum(p["written"] for p in state["phases"].values())
    assert 0 < written < N_A + N_B - SHARED
    assert sum(p.get("linked", 0) for p in state["phases"].values()) > 0, "the counts are kept with the batches"
    with pytest.raises(InputError, match="different kind"):
        merge(inp["a"], inp["b"], url("ray"), inp["align"], resume=True, **options)
    with pytest.raises(InputError, match="already started"):
        merge(inp["a"], inp["b"], url("ray"), inp["align"], engine=RayEngine(workers=1), **options)
    ray = merge(inp["a"], inp["b"], url("ray"), inp["align"], engine=RayEngine(workers=1), resume=True, **options)
    assert ray["written"] == N_A + N_B - SHARED - written
    assert (ray["linked"], ray["renamed"], ray["count"]) == (local["linked"], local["renamed"], local["count"])
    _assert_same(url("ray"), url("local"), policy)
    assert not ckpt.exists()


def test_a_task_whose_worker_dies_is_rerun_and_counted_once(ray_cluster, tmp_path, monkeypatch):
    """The worker process of B's first slice and of A's first slice dies after a few committed batches: Ray re-runs
    each from the slice's start, and the driver counts the replayed batches, their linked and renamed records
    included, only once."""
    merge_job = importlib.import_module("vecbridge.jobs.merge")   # the module (vecbridge.jobs.merge is the job)

    url = lambda name: f"file://{tmp_path / name}"
    inp = _inputs(url, tmp_path, "file")
    local = merge(inp["a"], inp["b"], url("local"), inp["align"], links=inp["links"], batch_size=BATCH)
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    original = merge_job.copy_unit

    def dies_once(unit, job):   # a local function: Ray ships it by value
        import os

        first = not list(attempts.glob(f"{unit.phase}-*"))
        (attempts / f"{unit.phase}-{os.getpid()}").touch()
        for n, report in enumerate(original(unit, job)):
            yield report
            if first and unit.phase in ("b-range-0000", "a-range-0000") and n == 2:
                os._exit(1)   # the worker process dies, as on a lost node

    monkeypatch.setattr(merge_job, "copy_unit", dies_once)
    ray = merge(inp["a"], inp["b"], url("ray"), inp["align"], links=inp["links"],
                engine=RayEngine(workers=2, units_per_worker=1), batch_size=BATCH)
    assert len(list(attempts.glob("b-range-0000-*"))) == len(list(attempts.glob("a-range-0000-*"))) == 2, \
        "each died once, ran again"
    assert _counts(ray) == _counts(local)
    _assert_same(url("ray"), url("local"), "keep-b")


def test_keep_both_waits_for_every_slice_of_b(ray_cluster, pg_engine, tmp_path, monkeypatch):
    """keep-both sets A's mapped vector on the merged records phase B wrote (in place: only rows that exist), so A's
    slices start once every slice of B is written: here B's last slice is slow (it waits up to a few seconds for A's
    slices to end) and still every linked record gets A's mapped vector, as in the local merge."""
    merge_job = importlib.import_module("vecbridge.jobs.merge")   # the module (vecbridge.jobs.merge is the job)

    url = collection_urls(pg_engine, tmp_path)
    inp = _inputs(url, tmp_path, "ids")
    local = merge(inp["a"], inp["b"], url("local"), inp["align"], policy="keep-both", batch_size=BATCH)
    marks = tmp_path / "marks"
    marks.mkdir()
    original = merge_job.copy_unit

    def slow_last_b(unit, job):   # a local function: Ray ships it by value
        import time

        if unit.phase == "b-range-0003":
            deadline = time.monotonic() + 6
            while len(list(marks.glob("a-*"))) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
        yield from original(unit, job)
        (marks / unit.phase).touch()

    monkeypatch.setattr(merge_job, "copy_unit", slow_last_b)
    ray = merge(inp["a"], inp["b"], url("ray"), inp["align"], policy="keep-both", batch_size=BATCH,
                engine=RayEngine(workers=2, units_per_worker=2))
    assert (marks / "b-range-0003").exists(), "B was cut into four slices"
    assert _counts(ray) == _counts(local)
    _assert_same(url("ray"), url("local"), "keep-both")


def test_cli_merge_on_ray(ray_cluster, tmp_path):
    url = lambda name: f"file://{tmp_path / name}"
    inp = _inputs(url, tmp_path, "file")
    local = merge(inp["a"], inp["b"], url("local"), inp["align"], links=inp["links"], policy="keep-a",
                  batch_size=BATCH)
    r = CliRunner().invoke(main, ["merge", inp["a"], inp["b"], "--into", url("ray"), "--alignment", str(inp["align"]),
                                  "--links", inp["links"], "--policy", "keep-a", "--batch-size", str(BATCH),
                                  "--engine", "ray", "--workers", "2", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert _counts(out) == _counts(local)
    _assert_same(url("ray"), url("local"), "keep-a")


@pytest.mark.slow
def test_ray_merge_on_a_milvus_server(ray_cluster, milvus_engine, tmp_path):
    """A Milvus server, linked by a pairs file, keep-a (A's vectors mapped in both phases): as the local merge.
    (Milvus has no second vector field for keep-both; keep-b adds nothing the file and pgvector runs do not check.)"""
    tag = tmp_path.name[-12:].replace("-", "_").lower()
    url = lambda name: milvus_engine.url(f"{name}_{tag}")
    inp = _inputs(url, tmp_path, "file")
    for policy in ["keep-a"]:
        name = policy.replace("-", "_")   # Milvus names: letters, digits, underscores
        local = merge(inp["a"], inp["b"], url(f"local_{name}"), inp["align"], links=inp["links"], policy=policy,
                      batch_size=BATCH * 4)
        ray = merge(inp["a"], inp["b"], url(f"ray_{name}"), inp["align"], links=inp["links"], policy=policy,
                    engine=RayEngine(workers=2, units_per_worker=2), batch_size=BATCH * 4)
        assert _counts(ray) == _counts(local) == (N_A + N_B - SHARED, SHARED, 7, N_A + N_B - SHARED)
        _assert_same(url(f"ray_{name}"), url(f"local_{name}"), policy)
