"""``fit``, ``verify``, ``evaluate`` and ``report`` with ``--engine ray`` on the session's real two-node Ray cluster
(tests/conftest.py), against the file store and a real PostgreSQL + pgvector: the fit equals the single-process fit
to float64 rounding, verify gives the single-process verdicts on good and broken targets while checking every
record, and the pair samples of evaluate and report are exact uniform samples of the pairs, whatever the split."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import collection_urls
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import InputError
from vecbridge.jobs import migrate, verify
from vecbridge.jobs.evaluate import evaluate_alignment
from vecbridge.jobs.fit import fit_alignment
from vecbridge.jobs.report import compatibility_report
from vecbridge.linking import PairSpec
from vecbridge.pairing.pairs import in_holdout
from vecbridge.pairing.sampling import sample_pairs
from vecbridge.pairing.table import pairing
from vecbridge.runtime.ray_engine import RayEngine

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")   # every address of the cluster on the loopback

N, D_OLD, D_NEW = 3_000, 24, 32
#: source records with no partner in the target (ids absent there; their payload key too)
UNPAIRED = 300


def _data(n: int = N):
    rng = np.random.default_rng(11)
    X = rng.normal(size=(n, D_OLD)).astype(np.float32)
    R = np.linalg.qr(rng.normal(size=(D_NEW, D_NEW)))[0][:D_OLD]
    Y = (X @ R + 0.05 * rng.normal(size=(n, D_NEW))).astype(np.float32)
    ids = [f"doc-{(i * 7919) % n:05d}" for i in range(n)]   # not in key order
    return X, Y, ids


@pytest.fixture(scope="module", params=["file", "pgvector"])
def stores(request, tmp_path_factory):
    """OLD (N records, a payload key) and NEW (the same items under the same ids, minus UNPAIRED, with the key), a
    NEWKEY copy of NEW under other ids (pairs only by payload key), a CSV of id pairs, an alignment fitted on a few
    pairs, and ``url(name)`` for more collections on the same engine."""
    root = tmp_path_factory.mktemp(f"reduce_{request.param}")
    url = collection_urls(None if request.param == "file" else request.getfixturevalue("pg_engine"), root)
    X, Y, ids = _data()
    payloads = [{"key": f"k{i}", "n": i} for i in range(N)]
    old = connect(url("old")).create(dim=D_OLD)
    new = connect(url("new")).create(dim=D_NEW)
    newkey = connect(url("newkey")).create(dim=D_NEW)
    for lo in range(0, N, 1000):
        sl = slice(lo, lo + 1000)
        old.upsert(VectorBatch(ids[sl], X[sl], payloads[sl]))
    keep = slice(UNPAIRED, N)
    new.upsert(VectorBatch(ids[keep], Y[keep], payloads[keep]))
    newkey.upsert(VectorBatch([f"t{i}" for i in range(UNPAIRED, N)], Y[keep], payloads[keep]))
    pairs_csv = root / "pairs.csv"
    with open(pairs_csv, "w", newline="") as f:
        csv.writer(f).writerows([("source_id", "target_id")] + [(ids[i], f"t{i}") for i in range(0, N, 2)])
    align = Alignment.from_estimator(OrthogonalProcrustes().fit(X[UNPAIRED:UNPAIRED + 500],
                                                                Y[UNPAIRED:UNPAIRED + 500]))
    return {"old": old.url, "new": new.url, "newkey": newkey.url, "csv": pairs_csv, "root": root, "url": url,
            "align": align.save(root / "a.vb"), "kind": request.param}


# --- fit ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pairs, target, options", [
    ("ids", "new", {"holdout": 0.2, "normalization": "l2"}),
    ("field:key", "newkey", {"center": True}),
    ("file:CSV", "newkey", {"method": "ridge", "center": True}),
])
def test_fit_equals_single_process(ray_cluster, stores, pairs, target, options):
    """Same pairs, same holdout, same sums up to the order in which they were added: the map agrees with the
    single-process one to float64 rounding (not bit for bit: each range adds its own partial sums)."""
    pairs = pairs.replace("CSV", str(stores["csv"]))
    local = fit_alignment(stores["old"], stores[target], pairs=pairs, batch_size=256, **options)
    seen = []
    ray = fit_alignment(stores["old"], stores[target], pairs=pairs, batch_size=256, engine=RayEngine(workers=2),
                        on_batch=seen.append, **options)
    a, b = local.metadata["anchors"], ray.metadata["anchors"]
    assert (b["n_examined"], b["n_paired"]) == (a["n_examined"], a["n_paired"])
    assert a["n_paired"] == (N // 2 - UNPAIRED // 2 if pairs.startswith("file") else N - UNPAIRED)
    assert local.metadata["fit"]["n_pairs"] == ray.metadata["fit"]["n_pairs"]
    assert sum(seen) == (N // 2 if pairs.startswith("file") else N), "progress: every record (or listed pair) once"
    probe = np.random.default_rng(0).normal(size=(50, D_OLD)).astype(np.float32)
    diff = np.abs(local.transform(probe).astype(np.float64) - ray.transform(probe).astype(np.float64)).max()
    assert diff < 1e-5   # float32 output of the two maps
    assert sorted(local.tensors) == sorted(ray.tensors)
    assert np.abs(local.tensors["matrix"] - ray.tensors["matrix"]).max() < 1e-9   # about 1e-15 here
    for name, value in local.tensors.items():   # singular values, means: the same relative to their size
        assert np.abs(value - ray.tensors[name]).max() <= 1e-12 * max(np.abs(value).max(), 1.0), name


def test_fit_refuses_what_is_not_a_full_streamed_fit(stores):
    """Samples and in-memory methods are refused in one line before any work (no cluster needed)."""
    for options, words in (({"max_pairs": 100}, "--max-pairs"), ({"pairs": "unsupervised"}, "unsupervised"),
                           ({"method": "clustered"}, "clustered")):
        with pytest.raises(InputError, match=words) as err:
            fit_alignment(stores["old"], stores["new"], engine=RayEngine(workers=2), **options)
        assert "\n" not in str(err.value) and "--engine local" in str(err.value)


# --- verify ------------------------------------------------------------------------------------------------------------
def _verdicts(result):
    return {c["name"]: c["ok"] for c in result["checks"]}


def test_verify_every_record_agrees_with_single_process(ray_cluster, stores):
    """A good target, then one broken in each way in turn (and repaired): the same verdict per check as the
    single-process verify sampling every record, from counts of every record."""
    target = stores["url"]("migrated")
    migrate(stores["old"], stores["align"], target, overwrite=True)
    tgt = connect(target)
    first = next(iter(tgt.scan(batch_size=1)))
    rid = first.ids[0]

    def both():
        ray = verify(stores["old"], target, stores["align"], engine=RayEngine(workers=2))
        local = verify(stores["old"], target, stores["align"], sample=N)
        assert _verdicts(ray) == _verdicts(local), (ray, local)
        return ray

    good = both()
    assert good["ok"] and all("full check" in c["detail"] for c in good["checks"][2:])
    assert f"all {N:,} matched records recomputed" in good["checks"][3]["detail"]

    tgt.delete([rid])                                   # a missing id
    bad = both()
    assert _verdicts(bad) == {"count": False, "dimension": True, "ids": False, "vectors": False, "payloads": True}
    assert "1 missing in target, 0 not in source" in bad["checks"][2]["detail"] and rid in bad["checks"][2]["detail"]
    tgt.upsert(first)

    tgt.upsert(first.with_vectors(-first.vectors))      # a changed vector
    bad = both()
    assert _verdicts(bad) == {"count": True, "dimension": True, "ids": True, "vectors": False, "payloads": True}
    assert "1 differ" in bad["checks"][3]["detail"] and rid in bad["checks"][3]["detail"]
    tgt.upsert(first)

    tgt.upsert(VectorBatch(first.ids, first.vectors, [{**first.payloads[0], "n": -1}]))   # a changed payload
    bad = both()
    assert _verdicts(bad) == {"count": True, "dimension": True, "ids": True, "vectors": True, "payloads": False}
    assert bad["checks"][4]["detail"].startswith("full check: 1 of") and rid in bad["checks"][4]["detail"]
    tgt.upsert(first)

    extra = "zz-extra"
    tgt.upsert(VectorBatch([extra], first.vectors, [{}]))   # an extra id
    bad = both()
    assert _verdicts(bad) == {"count": False, "dimension": True, "ids": False, "vectors": True, "payloads": True}
    assert "0 missing in target, 1 not in source" in bad["checks"][2]["detail"]
    tgt.delete([extra])
    assert both()["ok"]


# --- evaluate and report -----------------------------------------------------------------------------------------------
def test_evaluate_sample_is_uniform_over_held_out_pairs_and_split_free(ray_cluster, stores):
    """With room for every held-out pair, the Ray evaluation measures exactly the single-process pairs; with less,
    it measures ``max_pairs`` held-out pairs, the same ones however the source is cut into ranges."""
    def evaluate_on_ray(*args, workers, **options):
        return evaluate_alignment(*args, engine=RayEngine(workers=workers), **options)

    align = fit_alignment(stores["old"], stores["new"], holdout=0.3)
    path = align.save(stores["root"] / "held.vb")
    local = evaluate_alignment(path, stores["old"], stores["new"], max_pairs=N)
    ray_all = evaluate_on_ray(path, stores["old"], stores["new"], max_pairs=N, workers=2)
    assert ray_all.held_out and ray_all.n_pairs == local.n_pairs > 500
    assert ray_all.pairs.top1 == local.pairs.top1 and abs(ray_all.pairs.mean_rank - local.pairs.mean_rank) < 1e-9

    small = evaluate_on_ray(path, stores["old"], stores["new"], max_pairs=200, workers=2)
    assert small.n_pairs == 200 and small.pairs.top1 > 0.9

    listed = f"file:{stores['csv']}"   # chunks of the listed pairs instead of key ranges
    local = evaluate_alignment(path, stores["old"], stores["newkey"], pairs=listed, max_pairs=N)
    ray_all = evaluate_on_ray(path, stores["old"], stores["newkey"], pairs=listed, max_pairs=N, workers=2)
    assert ray_all.n_pairs == local.n_pairs > 300 and ray_all.pairs.top1 == local.pairs.top1
    assert evaluate_on_ray(path, stores["old"], stores["newkey"], pairs=listed, max_pairs=100, workers=2).n_pairs == 100

    src, tgt = connect(stores["old"]), connect(stores["new"])

    def sample_pairs_on_ray(workers, units_per_worker):
        engine = RayEngine(workers=workers, units_per_worker=units_per_worker)
        with engine.session():
            plan = pairing("ids").plan(src, tgt, PairSpec.parse("ids"), engine)
            return sample_pairs(plan, engine, k=200, seed=1, holdout=0.3)

    cuts = [sample_pairs_on_ray(w, r) for w, r in ((2, 4), (1, 1))]
    (s1, t1, read1), (s2, _, read2) = cuts
    assert read1 == read2 == N
    assert s1.ids == s2.ids and len(set(s1.ids)) == 200, "the same sample whatever the ranges"
    assert in_holdout(s1.ids, 0.3).all() and s1.ids == t1.ids
    ids = set(s1.ids)
    assert not ids & {f"doc-{(i * 7919) % N:05d}" for i in range(UNPAIRED)}, "only records that have a partner"


def test_report_gathers_its_pairs_on_ray(ray_cluster, stores):
    def report_on_ray(*args, workers, **options):
        return compatibility_report(*args, engine=RayEngine(workers=workers), **options)

    rep = report_on_ray(stores["old"], stores["newkey"], key="key", sample=400, options=False, workers=2)
    assert rep.correspondences.mode == "payload-key" and rep.correspondences.n == 400
    assert "Ray" in rep.correspondences.reason
    assert rep.held_out.top1 > 0.9 and rep.verdict.verdict in ("GO", "CAUTION")
    rep = report_on_ray(stores["old"], stores["new"], pairs="ids", sample=5000, options=False, workers=2)
    assert rep.correspondences.n == N - UNPAIRED, "every pair, when the sample has room for all"
    with pytest.raises(InputError, match="--engine local"):
        report_on_ray(stores["old"], stores["new"], pairs="unsupervised", workers=2)


# --- the CLI -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stores", ["file"], indirect=True)   # the CLI is the same for every store: once is enough
def test_cli_engine_ray_json(ray_cluster, stores):
    runner = CliRunner()
    root, old, new = stores["root"], stores["old"], stores["new"]
    ray = ["--engine", "ray", "--workers", "2", "--json"]

    r = runner.invoke(main, ["fit", "--source", old, "--target", new, "--holdout", "0.2", "-o", str(root / "c.vb"),
                             *ray])
    assert r.exit_code == 0, r.output
    fitted = json.loads(r.output)
    local = fit_alignment(old, new, holdout=0.2)
    assert fitted["alignment"].endswith("c.vb") and fitted["fit"]["n_pairs"] == local.metadata["fit"]["n_pairs"]

    target = stores["url"]("cli_migrated")
    migrate(old, stores["align"], target, overwrite=True)
    r = runner.invoke(main, ["verify", old, target, "--alignment", str(stores["align"]), *ray])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["ok"] and "full check" in r.output

    r = runner.invoke(main, ["evaluate", "--alignment", str(root / "c.vb"), "--source", old, "--target", new,
                             "--max-pairs", "300", *ray])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["n_pairs"] == 300

    r = runner.invoke(main, ["report", old, new, "--pairs", "ids", "--sample", "400", *ray])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["correspondences"]["n"] == 400

    r = runner.invoke(main, ["fit", "--source", old, "--target", new, "--max-pairs", "10", "-o",
                             str(root / "d.vb"), *ray])
    assert r.exit_code != 0 and "--max-pairs" in r.output and not (root / "d.vb").exists()


def test_missing_ray_is_one_line_naming_the_extra(tmp_path):
    code = """
import sys
sys.modules["ray"] = None   # what an environment without the extra looks like
from vecbridge.cli import main
for args in (["fit", "--source", "file:///nowhere/a", "--target", "file:///nowhere/b", "-o", "%s/a.vb"],
             ["verify", "file:///nowhere/a", "file:///nowhere/b", "--alignment", "/nowhere/a.vb"],
             ["evaluate", "--alignment", "/nowhere/a.vb", "--source", "file:///nowhere/a", "--target", "file:///b"],
             ["report", "file:///nowhere/a", "file:///nowhere/b"]):
    try:
        main(args + ["--engine", "ray"])
    except SystemExit as exc:
        print(args[0], exc.code, flush=True)
        print("@@", file=sys.stderr, flush=True)
""" % tmp_path
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert [line.split()[0] for line in out.stdout.splitlines()] == ["fit", "verify", "evaluate", "report"]
    assert all(line.split()[1] != "0" for line in out.stdout.splitlines())
    messages = out.stderr.strip().split("@@")
    assert len(messages) == 5 and messages[-1].strip() == "", out.stderr
    for message in messages[:4]:
        lines = message.strip().splitlines()
        assert len(lines) == 1 and "vecbridge[ray]" in lines[0], out.stderr


def test_ray_is_not_imported_without_the_engine_flag(tmp_path):
    """fit, verify, evaluate and report on the default engine (CLI and API) never import ray."""
    code = f"""
import sys
import numpy as np
from vecbridge.cli import main
from vecbridge.connectors import VectorBatch, connect
import vecbridge.jobs
rng = np.random.default_rng(0)
X = rng.normal(size=(300, 4)).astype(np.float32)
for name in ("a", "b"):
    connect("file://{tmp_path}/" + name).create(dim=4).upsert(VectorBatch([str(i) for i in range(300)], X))
a, b = "file://{tmp_path}/a", "file://{tmp_path}/b"
for args in (["fit", "--source", a, "--target", b, "-o", "{tmp_path}/m.vb", "--holdout", "0.2"],
             ["verify", a, b, "--alignment", "{tmp_path}/m.vb"],
             ["evaluate", "--alignment", "{tmp_path}/m.vb", "--source", a, "--target", b],
             ["report", a, b, "--pairs", "ids", "--sample", "300"]):
    try:
        main(args + ["--json"])
    except SystemExit as exc:
        assert exc.code in (0, None), (args, exc.code)
vecbridge.jobs.fit_on_ray   # the entry points resolve without Ray
print("RAY", "ray" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "RAY False"


# --- Milvus --------------------------------------------------------------------------------------------------------
def test_milvus_lite_is_refused_before_ray_starts(tmp_path):
    """One process at a time may open a Lite database: refused in one line, before any Ray task."""
    pytest.importorskip("milvus_lite")
    src = f"milvus://{tmp_path}/m.db/src"
    connect(src).create(dim=4).upsert(VectorBatch(["a", "b"], np.eye(2, 4, dtype=np.float32)))
    align = Alignment.from_estimator(OrthogonalProcrustes().fit(np.eye(4), np.eye(4))).save(tmp_path / "a.vb")
    engine = RayEngine(workers=2)
    for run in (lambda: fit_alignment(src, src, engine=engine), lambda: verify(src, src, align, engine=engine)):
        with pytest.raises(InputError, match="one process at a time") as err:
            run()
        assert "\n" not in str(err.value)


@pytest.mark.slow
def test_on_a_milvus_server(ray_cluster, milvus_engine, tmp_path):
    """Key ranges of a Milvus server: the fit equals the single-process one, verify checks every record and finds a
    changed vector, evaluate samples the held-out pairs (one range per worker: a Milvus connection is slow to open)."""
    engine = RayEngine(workers=2, units_per_worker=1)
    tag = tmp_path.name[-12:].replace("-", "_").lower()
    n = 1000
    X, Y, ids = _data(n)
    old, new = (connect(milvus_engine.url(f"{name}_{tag}")).create(dim=d) for name, d in (("old", D_OLD),
                                                                                          ("new", D_NEW)))
    old.upsert(VectorBatch(ids, X, [{"n": i} for i in range(n)]))
    new.upsert(VectorBatch(ids[UNPAIRED:], Y[UNPAIRED:]))
    local = fit_alignment(old.url, new.url, holdout=0.2)
    ray = fit_alignment(old.url, new.url, holdout=0.2, engine=engine)
    assert ray.metadata["anchors"]["n_paired"] == local.metadata["anchors"]["n_paired"] == n - UNPAIRED
    assert np.abs(local.tensors["matrix"] - ray.tensors["matrix"]).max() < 1e-9
    path = ray.save(tmp_path / "m.vb")
    assert evaluate_alignment(path, old.url, new.url, max_pairs=100, engine=engine).n_pairs == 100

    target = milvus_engine.url(f"migrated_{tag}")
    migrate(old.url, path, target)
    assert verify(old.url, target, path, engine=engine)["ok"]
    first = connect(target).get([ids[0]])
    connect(target).upsert(first.with_vectors(-first.vectors))
    bad = verify(old.url, target, path, engine=engine)
    assert _verdicts(bad) == _verdicts(verify(old.url, target, path, sample=n))
    assert not _verdicts(bad)["vectors"] and ids[0] in bad["checks"][3]["detail"]
