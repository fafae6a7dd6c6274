"""Calibration of the compatibility report: its top-1 and retention@10 predicted at the collection's size vs what is
measured after migrating the whole collection with the map it fitted.

Protocol: for each corpus (../shared/data/wordnet, ../shared/data/foldoc; 10,000 items, query i relevant to doc i)
and each ordered pair of the sentence encoders (minilm3, minilm6, mpnet: 6 pairs), ``vecbridge report`` samples
2,000 items of the two collections (shared ids, seed 0, as a user would sample; the goal is judged there) and again
5,000 (its default), fits an orthogonal map on 80% of them and, from the 20% held out (400 / 1,000 items and their
new-model queries), predicts for the whole collection's 10,000 items:

* top-1 of the held-out items (``held_out.top1_predicted``): now each held-out item's rank among every sampled new
  vector carried to 10,000 by the beta-binomial of :mod:`vecbridge.quality.at_size` (k=1), the training items
  compared through maps fitted without them; before, a log-linear fit ``a + b log(pool size)`` over the pools of
  the report's top-1 curve (``old`` below, recomputed from that curve);
  ``held_out.top1_margin`` is the 95% margin the report gives it (binomial, from the number of held-out items):
  ``within_margin`` says whether the measured top-1 fell inside it;
* recall retention@10 (``retrieval.predicted``) of all the collection's queries: now Recall@10 of the mapped and of
  the native vectors each carried to 10,000 the same way, their ratio (``vecbridge.quality.compatibility.
  retention_at_size``): the queries of the documents the map was fitted on (16% / 40% of them here) from their
  in-sample ranks, those of the others from the held-out queries' out-of-sample ranks and, through the fold maps,
  the training queries' (their shift from being ranked among fewer stand-ins measured on the held-out queries and
  taken off); before, the log-linear fit over the retention sub-pools (``old``).

Measured: the same map (same sample, same split) migrates all 10,000 old vectors (a file:// rewrite through
``vecbridge.jobs.migrate``). Top-1 is each item's true new vector's rank among all 10,000 new vectors, for the
report's held-out items (the honest comparison: the map never saw them) and for all 10,000 items (training items
included). Retention@10 is measured with all 10,000 new-model queries over the migrated collection vs the native one,
and also over the queries of the documents the map was not fitted on (``unseen``) and over the report's own
held-out queries (``report's``), and over the queries of the training documents (``train``): the prediction is
for all queries, these two show how far a prediction for the held-out queries alone would be. The report runs
without its options section (it does not change these predictions).

Goal (sample of 2,000): |predicted - measured| <= 0.03, top-1 of the held-out items and retention over all queries.
Run: ``OPENBLAS_NUM_THREADS=1 python bench/report_calibration.py [corpus ...]`` (about 7 minutes on 2 cores);
writes bench/results/report_calibration.json (a corpus not run keeps its rows from the previous file).
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from itertools import permutations  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _corpora import DATA, embeddings  # noqa: E402

from vecbridge import metrics  # noqa: E402
from vecbridge.align import Alignment, OrthogonalProcrustes  # noqa: E402
from vecbridge.connectors import connect  # noqa: E402
from vecbridge.jobs import migrate  # noqa: E402
from vecbridge.jobs.report import compatibility_report, find_correspondences  # noqa: E402
from vecbridge.quality.compatibility import split_pairs  # noqa: E402

CORPORA = ("wordnet", "foldoc")
PAIRS = list(permutations(("minilm3", "minilm6", "mpnet"), 2))
SAMPLES, HOLDOUT, SEED, K, GOAL = (2000, 5000), 0.2, 0, 10, 0.03
OUT = ROOT / "bench" / "results" / "report_calibration.json"


def log_linear(sizes, values, full_size: int, hi: float = 1.0) -> float:
    """The report's former prediction: ``a + b log(pool size)`` fitted over its pools, at ``full_size``, in [0, hi]."""
    sizes, values = np.asarray(sizes, float), np.asarray(values, float)
    if len(sizes) >= 2 and full_size > sizes[-1]:
        b, a = np.polyfit(np.log(sizes), values, 1)
        return float(np.clip(a + b * math.log(full_size), 0.0, hi))
    return float(values[-1])


def migrated_vectors(old: str, est, tmp: Path, n: int) -> np.ndarray:
    """All ``n`` old vectors migrated through the fitted map by ``vecbridge.jobs.migrate``, in id order."""
    path = Alignment.from_estimator(est).save(tmp / "a.vb")
    migrate(old, path, f"file://{tmp}/migrated")
    got = {int(i): v for batch in connect(f"file://{tmp}/migrated").scan(5000) for i, v in zip(batch.ids, batch.vectors)}
    return np.stack([got[i] for i in range(n)]).astype(np.float32)


def one_pair(corpus: str, a: str, b: str, sample: int, tmp: Path, native_recall: dict) -> dict:
    folder = DATA / corpus
    old, new = f"file://{folder}/{a}_docs.npy", f"file://{folder}/{b}_docs.npy"
    t0 = time.perf_counter()
    rep = compatibility_report(old, new, queries_new=f"file://{folder}/{b}_queries.npy",
                               queries_old=f"file://{folder}/{a}_queries.npy", sample=sample, seed=SEED,
                               holdout=HOLDOUT, k=K, options=False)
    report_s = time.perf_counter() - t0
    # the map the report fitted: same sample, same split
    corr = find_correspondences(connect(old), connect(new), sample=sample, seed=SEED)
    sp = split_pairs(corr, HOLDOUT, SEED)
    assert len(sp.held) == rep["correspondences"]["held_out"]
    est = OrthogonalProcrustes().fit(sp.X[sp.train], sp.Y[sp.train])
    Y, Q = embeddings(folder, b, "docs"), embeddings(folder, b, "queries")
    n = len(Y)
    M = migrated_vectors(old, est, tmp, n)
    ranks = metrics.partner_ranks(M, Y)
    held = np.asarray([int(corr.ids[i]) for i in sp.held])
    train = np.asarray([int(corr.ids[i]) for i in sp.train])
    unseen = np.setdiff1d(np.arange(n), train)   # the map never saw these
    if b not in native_recall:
        native_recall[b] = metrics.partner_ranks(Q, Y) <= K
    hit_native, hit_mapped = native_recall[b], metrics.partner_ranks(Q, M) <= K
    mapped_recall = float(np.mean(hit_mapped))
    ret_measured = mapped_recall / float(np.mean(hit_native))
    ho, rr = rep["held_out"], rep["retrieval"]
    top1 = {"pool_held": ho["top1"], "pool_sample": ho["top1_curve"]["top1"][-1],
            "old": log_linear(ho["top1_curve"]["pool_sizes"], ho["top1_curve"]["top1"], n,
                              hi=ho["top1_curve"]["top1"][-1]),
            "new": ho["top1_predicted"], "measured_held": float(np.mean(ranks[held] == 1)),
            "measured_all": float(np.mean(ranks == 1))}
    ret = {"pool": rr["measured"], "old": log_linear(rr["pool_sizes"], rr["retention"], n), "new": rr["predicted"],
           "measured": ret_measured, "recall_mapped": mapped_recall, "recall_native": float(np.mean(hit_native)),
           "measured_unseen": float(np.mean(hit_mapped[unseen]) / np.mean(hit_native[unseen])),
           "measured_held": float(np.mean(hit_mapped[held]) / np.mean(hit_native[held])),
           "measured_train": float(np.mean(hit_mapped[train]) / np.mean(hit_native[train]))}
    for d, ref in ((top1, "measured_held"), (ret, "measured")):
        d["error_old"], d["error_new"] = d["old"] - d[ref], d["new"] - d[ref]
    top1["error_new_all"] = top1["new"] - top1["measured_all"]
    top1["margin"] = ho.get("top1_margin")   # the 95% margin the report gives its prediction
    top1["within_margin"] = top1["margin"] is not None and abs(top1["error_new"]) <= top1["margin"]
    ret["error_new_unseen"] = ret["new"] - ret["measured_unseen"]
    ret["error_new_held"] = ret["new"] - ret["measured_held"]
    return {"corpus": corpus, "pair": f"{a}->{b}", "collection_size": n, "sample": sample,
            "held_out": len(sp.held), "n_queries": rr["n_queries"], "top1": top1, "retention": ret,
            "verdict": rep["verdict"]["verdict"], "report_s": report_s, "seconds": time.perf_counter() - t0}


def print_rows(rows: list) -> None:
    print("\n| corpus | sample | pair | top-1 old / new / measured held-out (all) | err old / new | "
          "retention@10 old / new / measured (unseen; report's queries) | err old / new (unseen; report's) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        t, q = r["top1"], r["retention"]
        print(f"| {r['corpus']} | {r['sample']} | {r['pair']} | {t['old']:.3f} / {t['new']:.3f} / "
              f"{t['measured_held']:.3f} ({t['measured_all']:.3f}) | {t['error_old']:+.3f} / {t['error_new']:+.3f} | "
              f"{q['old']:.3f} / {q['new']:.3f} / {q['measured']:.3f} ({q['measured_unseen']:.3f}; "
              f"{q['measured_held']:.3f}) | {q['error_old']:+.3f} / {q['error_new']:+.3f} "
              f"({q['error_new_unseen']:+.3f}; {q['error_new_held']:+.3f}) |", flush=True)


def summary(rows: list) -> list:
    """The largest |error| per corpus and sample, old and new prediction."""
    out = []
    for corpus in CORPORA:
        for sample in SAMPLES:
            mine = [r for r in rows if r["corpus"] == corpus and r["sample"] == sample]
            if mine:
                out.append({"corpus": corpus, "sample": sample, **{
                    f"{what}_{err}": max(abs(r[what][err]) for r in mine)
                    for what, errs in (("top1", ("error_old", "error_new", "error_new_all")),
                                       ("retention", ("error_old", "error_new", "error_new_unseen", "error_new_held")))
                    for err in errs},
                    "top1_within_margin": sum(bool(r["top1"].get("within_margin")) for r in mine), "pairs": len(mine)})
    return out


def main(corpora) -> None:
    t0 = time.perf_counter()
    previous = json.loads(OUT.read_text()) if OUT.exists() else {}
    rows = [r for r in previous.get("rows", []) if r.get("corpus") not in corpora] if isinstance(previous, dict) else []
    with tempfile.TemporaryDirectory() as tmp:
        for corpus in corpora:
            native_recall: dict = {}
            for sample in SAMPLES:
                for a, b in PAIRS:
                    pair_tmp = Path(tmp) / f"{corpus}-{sample}-{a}-{b}"
                    pair_tmp.mkdir()
                    row = one_pair(corpus, a, b, sample, pair_tmp, native_recall)
                    rows.append(row)
                    print_rows([row])
    rows.sort(key=lambda r: (CORPORA.index(r["corpus"]), r["sample"], PAIRS.index(tuple(r["pair"].split("->")))))
    print_rows(rows)
    s = summary(rows)
    goal = [v for v in s if v["sample"] == SAMPLES[0]]
    ok = bool(goal) and all(v["top1_error_new"] <= GOAL and v["retention_error_new"] <= GOAL for v in goal)
    print("\nmax |predicted - measured|, top-1 (held-out) old / new, retention@10 all queries old / new "
          "(unseen documents' queries; the report's queries):")
    for v in s:
        print(f"  {v['corpus']} sample {v['sample']}: {v['top1_error_old']:.3f} / {v['top1_error_new']:.3f}, "
              f"{v['retention_error_old']:.3f} / {v['retention_error_new']:.3f} "
              f"({v['retention_error_new_unseen']:.3f}; {v['retention_error_new_held']:.3f})")
    print(f"goal (<= {GOAL} at a sample of {SAMPLES[0]:,}, top-1 held-out and retention over all queries) met: {ok}")
    out = {"goal": GOAL, "goal_met": ok, "max_abs_error": s, "rows": rows,
           "protocol": {"samples": list(SAMPLES), "holdout": HOLDOUT, "seed": SEED, "k": K, "options": False},
           "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
                       "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS")},
           "seconds": time.perf_counter() - t0}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} in {out['seconds']:.0f} s")


if __name__ == "__main__":
    main(tuple(sys.argv[1:]) or CORPORA)
