"""Does `vecbridge upgrade plan` predict the Recall@10 each stage serves at the collection's size?

Protocol: for each corpus (../shared/data/wordnet, ../shared/data/foldoc; 10,000 items, query i relevant to doc i)
and each model pair old -> new, a file-store collection holds the 10,000 old-model doc vectors with payload text =
the item's row number as a string; the "new model" is :func:`lookup`, which returns the new model's stored doc
vector of that row (what the real encoder returned for the doc's text). 500 query rows are sampled (seed 0); their
new- and old-model query vectors are two query collections, as the plan takes them.

* predicted: :func:`vecbridge.jobs.upgrade.planning.predict_stages` with the plan's defaults (pool: the 500 relevant
  records + 2,000 others; fit sample 2,000; orthogonal map; seed 0): Recall@10 within the pool (``pool``) and at the
  collection's size (``at_size``: the beta-binomial of :mod:`vecbridge.quality.at_size`, distractors = the pool's
  2,000 sampled others) and, for comparison, ``at_size_all`` (every other pool record counted as a distractor,
  the 499 other relevant records included);
* measured: the same stages over the whole collection: a map fitted on 2,000 other records (a fresh sample, not
  the 500 relevant ones), a random ``fraction`` of the 10,000 records native, the same 500 queries; new model alone,
  and fused with the beta the plan chose (staying on the old model where the plan chose it), plus staying; the mean
  of ``REPEATS`` draws of fit sample and native order (one draw varies by up to 0.04 at a partial stage: the plan
  predicts what a random order serves, not one order), with their min and max.

The goal: at-size within 0.03 of measured at every stage, on both corpora. Run: ``OPENBLAS_NUM_THREADS=1 python
bench/plan_calibration.py`` (a few minutes on the 2-core machine); writes bench/results/plan_calibration.json.
``--rerank auto``: the cascade with the count of candidates ``upgrade tune --rerank auto`` would keep, as ``upgrade
plan --rerank auto`` predicts it, measured at the count the plan chose per stage; writes
bench/results/plan_calibration_auto.json.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _corpora import CORPORA, DATA, SENTENCE_PAIRS, embeddings  # noqa: E402

from vecbridge.align.methods import method as method_of  # noqa: E402
from vecbridge.connectors import connect  # noqa: E402
from vecbridge.connectors.base import VectorBatch  # noqa: E402
from vecbridge.jobs.upgrade.planning import PLAN_FIT_SAMPLE, PLAN_FRACTIONS, PLAN_POOL, predict_stages  # noqa: E402
from vecbridge.quality.options import recall, relevant_ranks  # noqa: E402
from vecbridge.vectors import l2_normalize  # noqa: E402

PAIRS = SENTENCE_PAIRS
N_QUERIES, K, SEED, GOAL, REPEATS = 500, 10, 0, 0.03, 5
RESULTS = ROOT / "bench" / "results"

_NEW: np.ndarray | None = None   # the new model's doc vectors of the pair being measured


def lookup(texts):
    """The new model's stored vector of each record, by its text (the row number)."""
    return _NEW[np.asarray([int(t) for t in texts], dtype=np.int64)]


def _write(url: str, ids: list[str], vectors: np.ndarray, payloads=None):
    coll = connect(url).create(dim=vectors.shape[1], metric="cosine")
    coll.upsert(VectorBatch(ids, vectors, payloads))
    return coll


def _cos(A, B) -> np.ndarray:
    return l2_normalize(A) @ l2_normalize(B).T


def cascade_measured(Qn, Qo, served, X, Y, rows, beta, cascade_beta, rerank: int) -> float:
    """Recall@K of the cascade over the whole collection: the served ranking's top ``rerank`` (fused with ``beta``,
    or staying's where the plan chose the old model alone), re-scored with both models' own vectors of every
    candidate, ``cos(q_new, y) + cascade_beta cos(q_old, x)`` (ties against the relevant record)."""
    old = _cos(Qo, X)
    first = old if isinstance(beta, str) else _cos(Qn, served) + beta * old
    top = np.argpartition(-first, rerank - 1, axis=1)[:, :rerank]
    cb = np.inf if cascade_beta == "inf" else float(cascade_beta)
    again = old if np.isinf(cb) else _cos(Qn, Y) + cb * old
    hits = 0
    for j, r in enumerate(rows):
        if r in top[j]:
            s, rel = again[j, top[j]], again[j, r]
            hits += int((s > rel).sum() + (s == rel).sum() - 1 < K)
    return hits / len(rows)


def measured(X, Y, Qn, Qo, rows, plan: dict, seed: int) -> dict:
    """The plan's stages over the whole collection: a fresh fit sample of the plan's size among the records that
    are not the queries' relevant ones, a random native order, the beta the plan chose per stage."""
    rng = np.random.default_rng(seed)
    fit = rng.choice(np.setdiff1d(np.arange(len(X)), rows), plan["fit_sample"], replace=False)
    M = method_of(plan["method"]).build(seed=SEED).fit(X[fit], Y[fit]).transform(X)
    order = rng.permutation(len(X))
    staying = recall(relevant_ranks(Qo, X, rows), K)
    stages = []
    for st in plan["stages"]:
        served = M.copy()
        native = order[:int(round(st["native_fraction"] * len(X)))]
        served[native] = Y[native]
        alone = recall(relevant_ranks(Qn, served, rows), K)
        b = st["beta"]
        fused = staying if isinstance(b, str) else recall(
            relevant_ranks(Qn, served, rows, Q_old=Qo, old_docs=X, beta=b), K)
        stages.append({"native_fraction": st["native_fraction"], "recall": alone, "recall_fused": fused,
                       "recall_cascade": cascade_measured(Qn, Qo, served, X, Y, rows, b, st["cascade_beta"],
                                                          st.get("cascade_rerank", plan["rerank"]))})
    return {"staying": staying, "stages": stages}


def one_pair(corpus: str, old: str, new: str, tmp: Path, rerank=100) -> dict:
    global _NEW
    folder = DATA / corpus
    X, Y = embeddings(folder, old, "docs"), embeddings(folder, new, "docs")
    QN, QO = embeddings(folder, new, "queries"), embeddings(folder, old, "queries")
    _NEW = Y
    rows = np.sort(np.random.default_rng(SEED).choice(len(X), N_QUERIES, replace=False))
    ids = [str(i) for i in range(len(X))]
    base = f"file://{tmp}/{corpus}-{old}-{new}"
    src = _write(f"{base}-src", ids, X, [{"text": i} for i in ids])
    qn = _write(f"{base}-qn", [ids[r] for r in rows], QN[rows])
    qo = _write(f"{base}-qo", [ids[r] for r in rows], QO[rows])
    t0 = time.perf_counter()
    plans = {flag: predict_stages(src, lookup, text_field="text", queries=qn.url, old_queries=qo.url,
                                  pool=PLAN_POOL, fit_sample=PLAN_FIT_SAMPLE, seed=SEED, k=K,
                                  fractions=PLAN_FRACTIONS, others_only=flag, rerank=rerank)
             for flag in (True, False)}
    plan_s = time.perf_counter() - t0
    p, p_all = plans[True], plans[False]
    runs = [measured(X, Y, QN[rows], QO[rows], rows, p, SEED + 7 + r) for r in range(REPEATS)]
    m = {"staying": runs[0]["staying"],
         "stages": [{key: float(np.mean([run["stages"][i][key] for run in runs])) for key in runs[0]["stages"][i]}
                    for i in range(len(p["stages"]))]}
    spread = [(m["staying"], m["staying"])] + [tuple(float(g([run["stages"][i][key] for run in runs])) for g in (np.min, np.max))
                             for i in range(len(p["stages"])) for key in ("recall", "recall_fused", "recall_cascade")]
    rows_out = [{"stage": "staying", "beta": None, "pool": p["staying"], "at_size": p["staying_at_size"],
                 "at_size_all": p_all["staying_at_size"], "measured": m["staying"]}]
    for st, sa, ms in zip(p["stages"], p_all["stages"], m["stages"]):
        f = st["native_fraction"]
        rows_out.append({"stage": f"{f:.0%} alone", "beta": None, "pool": st["recall"], "at_size": st["recall_at_size"],
                         "at_size_all": sa["recall_at_size"], "measured": ms["recall"]})
        rows_out.append({"stage": f"{f:.0%} fused", "beta": st["beta"], "pool": st["recall_fused"],
                         "at_size": st["recall_fused_at_size"], "at_size_all": sa["recall_fused_at_size"],
                         "measured": ms["recall_fused"]})
        rows_out.append({"stage": f"{f:.0%} cascade", "beta": st["cascade_beta"], "pool": float("nan"),
                         "rerank": st["cascade_rerank"], "rerank_all": sa["cascade_rerank"],
                         "at_size": st["recall_cascade_at_size"], "at_size_all": sa["recall_cascade_at_size"],
                         "measured": ms["recall_cascade"]})
    for r, (lo, hi) in zip(rows_out, spread):
        r["measured_min"], r["measured_max"] = lo, hi
        r["error"] = r["at_size"] - r["measured"]
        r["error_all"] = r["at_size_all"] - r["measured"]
        r["error_pool"] = r["pool"] - r["measured"]
    return {"corpus": corpus, "pair": f"{old}->{new}", "collection_size": p["collection_size"], "pool": p["pool"],
            "fit_sample": p["fit_sample"], "queries": p["queries"], "plan_seconds": plan_s, "rows": rows_out}


def rerank_arg(text: str):
    """``--rerank``: a count of candidates, or ``auto`` (the count ``upgrade tune --rerank auto`` keeps)."""
    if text == "auto":
        return text
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not a number of candidates or 'auto'")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rerank", type=rerank_arg, default=100,
                    help="the cascade's count of candidates, or auto (default 100; auto writes "
                         "plan_calibration_auto.json, another count plan_calibration_kK.json)")
    rerank = ap.parse_args().rerank
    out_path = RESULTS / {100: "plan_calibration.json", "auto": "plan_calibration_auto.json"}.get(
        rerank, f"plan_calibration_k{rerank}.json")
    t0 = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for corpus in CORPORA:
            for old, new in PAIRS:
                res = one_pair(corpus, old, new, Path(tmp), rerank)
                results.append(res)
                print(f"\n{corpus} {res['pair']} (N={res['collection_size']:,}, pool {res['pool']:,}, "
                      f"{res['queries']} queries)")
                print(f"  {'stage':<12} {'beta':>6} {'pool':>6} {'at size':>8} {'(all)':>6} {'measured':>9} {'(min-max)':>12} {'err':>7}")
                for r in res["rows"]:
                    b = "" if r["beta"] is None else ("old" if isinstance(r["beta"], str) else f"{r['beta']:g}")
                    print(f"  {r['stage']:<12} {b:>6} {r['pool']:6.3f} {r['at_size']:8.3f} {r['at_size_all']:6.3f} "
                          f"{r['measured']:9.3f} {r['measured_min']:.3f}-{r['measured_max']:.3f} {r['error']:+7.3f}")
    summary = {}
    for corpus in CORPORA:
        every = [r for res in results if res["corpus"] == corpus for r in res["rows"]]
        rows = [r for r in every if not r["stage"].endswith("cascade")]
        casc = [r for r in every if r["stage"].endswith("cascade")]
        summary[corpus] = {key: float(max(abs(r[key]) for r in rows)) for key in ("error", "error_all", "error_pool")}
        summary[corpus]["cascade_error"] = float(max(abs(r["error"]) for r in casc))
        summary[corpus]["cascade_mean_abs_error"] = float(np.mean([abs(r["error"]) for r in casc]))
        summary[corpus]["mean_abs_error"] = float(np.mean([abs(r["error"]) for r in rows]))
        summary[corpus]["mean_abs_error_all"] = float(np.mean([abs(r["error_all"]) for r in rows]))
    ok = all(s["error"] <= GOAL and s["cascade_error"] <= GOAL for s in summary.values())
    print("\nmax |at size - measured| per corpus (others as distractors / every other pool record / pool figure):")
    for corpus, s in summary.items():
        print(f"  {corpus}: {s['error']:.3f} / {s['error_all']:.3f} / {s['error_pool']:.3f}; the cascade "
              f"{s['cascade_error']:.3f}")
    print(f"goal (<= {GOAL}) met on both corpora: {ok}")
    out = {"goal": GOAL, "goal_met": ok, "max_abs_error": summary, "results": results,
           "protocol": {"queries": N_QUERIES, "k": K, "seed": SEED, "pool_others": PLAN_POOL,
                        "rerank": rerank,
                        "fit_sample": PLAN_FIT_SAMPLE, "fractions": list(PLAN_FRACTIONS)},
           "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
                       "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS")},
           "seconds": time.perf_counter() - t0}
    out_path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {out_path.relative_to(ROOT)} in {out['seconds']:.0f} s")


if __name__ == "__main__":
    main()
