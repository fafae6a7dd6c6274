"""The cascade while upgrading: served Recall@10 of `upgrade search --rerank K` on day one, and how fast the
documents users retrieve become native when every re-ranked candidate is written back.

Protocol (a simulation in numpy with the package's pieces, no store), for each corpus (../shared/data/wordnet,
../shared/data/foldoc; 10,000 items, query i asks for doc i) and each sentence-encoder pair old -> new:

* the map is ``OrthogonalProcrustes`` fitted on 2,000 random items (the upgrade's re-embedded fit sample, native from
  the start); every other item is mapped;
* **staying**: old-model queries over the old docs; **full re-embed**: new-model queries over the new docs;
* **served, tuned**: dual-query fusion ``(cos(q_new, v) + beta cos(q_old, x)) / (1 + beta)`` with beta picked on half A
  of the queries from the grid ``upgrade tune`` uses (the old model alone included), Recall@10 on half B (no query
  picks its own beta); ``v`` is the native vector where the item is native, else the mapped one;
* **cascade K**: the served ranking's top K re-scored by ``cos(q_new, y)``, y the new model's own vector of the
  item's text (what ``--rerank K`` embeds and writes back), Recall@10 on half B, day one; **cascade fused**: re-scored
  by ``(cos(q_new, y) + beta cos(q_old, x)) / (1 + beta)``, the cascade's own beta picked on half A (the old model
  alone included), and at beta 1 (what ``--rerank`` uses with old-model queries);
* **both models, every item**: both models' own vectors of every item, fused with a beta picked on half A, over the
  whole collection (a cascade whose candidates held everything); and the same with the beta best on half B itself,
  an oracle: what scoring by the two models' cosines can reach on these queries at all;
* **other fusions** of both models' own vectors of every item: each model's scores standardised or scaled to [0, 1]
  by the statistics of the query's best 100, or reciprocal rank fusion (k = 60), beta picked on half A as above:
  whether a way of fusing the two models other than their cosines' weighted mean raises that bound;
* **write-back** (with the fused cascade): a query log of ``--log`` queries drawn from half A with Zipf popularity (exponent ``--zipf``, over a
  fixed random order of the queries: real logs repeat popular queries) served one after another with the cascade;
  every candidate embedded is written back native, so later rankings use its native vector. Reported after 100,
  1,000 and all logged queries: the share of the top-10 results served that were already native (the retrieved
  documents' native share), the documents embedded per query (the cascade's cost: texts the new model encodes), the
  collection's native fraction, and the served (cascade) Recall@10 on half B then.

Cost in seconds: texts embedded per query times the new model's encoding time per text on this 2-core machine kind
(the data sets' READMEs; the cascade's texts are documents).

Run: ``python bench/cascade.py [--k 100 50 200] [--log 10000] [--zipf 1.1]`` (one BLAS thread unless
OPENBLAS_NUM_THREADS is set; ~3-6 minutes); writes bench/results/cascade.json.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _corpora import CORPORA, DATA, UPGRADE_PAIRS, embeddings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vecbridge.align import OrthogonalProcrustes  # noqa: E402
from vecbridge.jobs.upgrade import FUSION_BETAS  # noqa: E402
from vecbridge.quality.scoring import fuse  # noqa: E402
from vecbridge.vectors import l2_normalize  # noqa: E402

PAIRS = UPGRADE_PAIRS
N_FIT, K = 2000, 10
CHECKPOINTS = (100, 1000)
#: score fusions compared with the cosine sum for the bound; the pool their statistics come from; RRF's constant
FUSIONS = ("z-score", "min-max", "reciprocal rank")
FUSION_POOL, RRF_K = 100, 60
#: the new model's encoding time per document, seconds (data sets' READMEs: all 10,000 docs on 2 cores)
DOC_ENCODE_S = {"wordnet": {"minilm3": 42.2, "minilm6": 84.9, "mpnet": 417.4},
                "foldoc": {"minilm3": 233.0, "minilm6": 330.0, "mpnet": 1532.0}}


def recall(top: np.ndarray, rows: np.ndarray) -> float:
    """Share of the query rows whose own doc is in their top-K row."""
    return float(np.mean([r in top[j] for j, r in enumerate(rows)]))


def top_k(S: np.ndarray, k: int) -> np.ndarray:
    part = np.argpartition(-S, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(S, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def normalised(S: np.ndarray, how: str) -> np.ndarray:
    """Each query's scores made comparable across models before fusing: standardised (``z-score``) or scaled to
    [0, 1] (``min-max``) by the statistics of its best ``FUSION_POOL``, or ``1 / (RRF_K + rank)`` (reciprocal rank
    fusion, "Reciprocal Rank Fusion outperforms Condorcet and individual Rank Learning Methods", Cormack et al.,
    SIGIR 2009)."""
    if how == "reciprocal rank":
        ranks = np.argsort(np.argsort(-S, axis=1, kind="stable"), axis=1, kind="stable")
        return (1.0 / (RRF_K + 1 + ranks)).astype(np.float32)
    top = np.partition(S, -FUSION_POOL, axis=1)[:, -FUSION_POOL:]
    if how == "z-score":
        return ((S - top.mean(1, keepdims=True)) / top.std(1, keepdims=True)).astype(np.float32)
    lo, hi = top.min(1, keepdims=True), top.max(1, keepdims=True)
    return ((S - lo) / (hi - lo)).astype(np.float32)


def run_pair(corpus: str, old: str, new: str, ks: list[int], n_log: int, zipf: float) -> dict:
    t0 = time.perf_counter()
    X, Y = embeddings(DATA / corpus, old, "docs"), embeddings(DATA / corpus, new, "docs")
    Qo, Qn = l2_normalize(embeddings(DATA / corpus, old, "queries")), l2_normalize(embeddings(DATA / corpus, new,
                                                                                           "queries"))
    n = len(X)
    rng = np.random.default_rng(0)
    fit = np.sort(rng.choice(n, N_FIT, replace=False))
    M = OrthogonalProcrustes().fit(X[fit], Y[fit]).transform(X)
    Xu, Yu, Mu = l2_normalize(X), l2_normalize(Y), l2_normalize(M)
    perm = np.random.default_rng(1).permutation(n)
    half_a, half_b = np.sort(perm[: n // 2]), np.sort(perm[n // 2:])
    S_old, S_nat, S_map = Qo @ Xu.T, Qn @ Yu.T, Qn @ Mu.T
    native = np.zeros(n, dtype=bool)
    native[fit] = True

    def served(rows, beta):
        S_new = np.where(native[None, :], S_nat[rows], S_map[rows])
        return fuse(S_new, S_old[rows], beta, mean=True)

    def r_at(rows, beta):
        return recall(top_k(served(rows, beta), K), rows)

    tuned = max(FUSION_BETAS, key=lambda b: r_at(half_a, b))   # picked on half A
    out = {"pair": f"{old}->{new}", "tuned_beta": "inf" if np.isinf(tuned) else tuned,
           "staying": recall(top_k(S_old[half_b], K), half_b), "full_reembed": recall(top_k(S_nat[half_b], K), half_b),
           "served_tuned": r_at(half_b, tuned)}

    def cascade(rows, k_c, beta=0.0):
        """Top K of the served ranking re-scored with the native vectors: by the new model alone (beta 0), or
        fused with the old model's cosine (the cascade's own beta)."""
        cand = top_k(served(rows, tuned), k_c)
        rescored = fuse(np.take_along_axis(S_nat[rows], cand, axis=1), np.take_along_axis(S_old[rows], cand, axis=1),
                        beta, mean=True)
        order = np.argsort(-rescored, axis=1, kind="stable")[:, :K]
        return np.take_along_axis(cand, order, axis=1), cand

    # the bound of every cascade scored by the two models: both models' own vectors of every item, fused with a beta
    # picked on half A, over the whole collection (a cascade whose candidates held every relevant item)
    both = max(FUSION_BETAS, key=lambda b: recall(top_k(fuse(S_nat[half_a], S_old[half_a], b, mean=True), K), half_a))
    out["both_native_beta"] = "inf" if np.isinf(both) else both
    out["both_native"] = recall(top_k(fuse(S_nat[half_b], S_old[half_b], both, mean=True), K), half_b)
    # the same with the beta best on half B itself (an oracle: no tuning can pick better on these queries)
    out["both_native_oracle"] = max(recall(top_k(fuse(S_nat[half_b], S_old[half_b], b, mean=True), K), half_b)
                                    for b in FUSION_BETAS)
    # other ways of fusing the two models' scores, each with its beta picked on half A: does any raise that bound?
    out["both_native_fusions"] = {}
    for how in FUSIONS:
        on_a, on_b = ((normalised(S_nat[h], how), normalised(S_old[h], how)) for h in (half_a, half_b))
        b_how = max(FUSION_BETAS, key=lambda b, on_a=on_a: recall(top_k(fuse(*on_a, b, mean=True), K), half_a))
        out["both_native_fusions"][how] = {"beta": "inf" if np.isinf(b_how) else b_how,
                                           "recall": recall(top_k(fuse(*on_b, b_how, mean=True), K), half_b)}
    out["cascade"] = {str(k_c): recall(cascade(half_b, k_c)[0], half_b) for k_c in ks}
    cbeta = max(FUSION_BETAS, key=lambda b: recall(cascade(half_a, ks[0], b)[0], half_a))   # picked on half A
    out["cascade_fused_beta"] = "inf" if np.isinf(cbeta) else cbeta
    out["cascade_fused"] = {str(k_c): recall(cascade(half_b, k_c, cbeta)[0], half_b) for k_c in ks}
    out["cascade_fused_beta1"] = {str(k_c): recall(cascade(half_b, k_c, 1.0)[0], half_b) for k_c in ks}

    # the log: Zipf popularity over a fixed order of half A's queries; served one after another with write-back
    k_c = ks[0]
    ranks = np.arange(1, len(half_a) + 1, dtype=np.float64)
    p = ranks ** -zipf
    log = np.random.default_rng(2).permutation(half_a)[np.random.default_rng(3).choice(len(half_a), n_log, p=p / p.sum())]
    growth, embedded, native_hits, shown = [], 0, 0, 0
    marks = sorted({m for m in CHECKPOINTS if m < n_log} | {n_log})
    done = 0
    for mark in marks:
        for lo in range(done, mark, 50):   # 50 queries at a time see the same collection (a server's batch)
            rows = log[lo:min(lo + 50, mark)]
            top, cand = cascade(rows, k_c, cbeta)
            native_hits += int(native[top].sum())
            shown += top.size
            new_ids = np.unique(cand[~native[cand]])
            embedded += len(new_ids)
            native[new_ids] = True
        done = mark
        growth.append({"queries": mark, "retrieved_native_share": native_hits / shown,
                       "embedded_per_query": embedded / mark, "native_fraction": float(native.mean()),
                       "cascade_recall_half_b": recall(cascade(half_b, k_c, cbeta)[0], half_b),
                       "seconds_per_query": embedded / mark * DOC_ENCODE_S[corpus][new] / n})
    out["write_back"] = {"k": k_c, "log": n_log, "zipf": zipf, "distinct_queries": int(len(np.unique(log))),
                         "growth": growth}
    out["seconds"] = time.perf_counter() - t0
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, nargs="+", default=[100, 50, 200],
                    help="candidates re-ranked (the first: write-back)")
    ap.add_argument("--log", type=int, default=10_000, help="logged queries served with write-back")
    ap.add_argument("--zipf", type=float, default=1.1, help="the log's popularity exponent")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "cascade.json")
    args = ap.parse_args(argv)
    result = {"command": "python bench/cascade.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]},
              "corpora": {}}
    for corpus in CORPORA:
        for old, new in PAIRS:
            r = run_pair(corpus, old, new, args.k, args.log, args.zipf)
            result["corpora"].setdefault(corpus, []).append(r)
            best = max(r["staying"], r["full_reembed"])
            print(f"{corpus:8s} {r['pair']:16s} staying {r['staying']:.4f} full {r['full_reembed']:.4f} "
                  f"tuned {r['served_tuned']:.4f} cascade " + " ".join(
                      f"K={k} {v:.4f} ({v - best:+.4f})" for k, v in r["cascade"].items()) + " fused " + " ".join(
                      f"K={k} {v:.4f} ({v - best:+.4f})" for k, v in r["cascade_fused"].items()) + " beta1 " + " ".join(
                      f"K={k} {v:.4f} ({v - best:+.4f})" for k, v in r["cascade_fused_beta1"].items())
                  + f" | both models, every item {r['both_native']:.4f} ({r['both_native'] - best:+.4f}), oracle "
                  f"{r['both_native_oracle'] - best:+.4f}"
                  + f" | after {args.log:,} logged: retrieved native "
                  f"{r['write_back']['growth'][-1]['retrieved_native_share']:.2f}, "
                  f"{r['write_back']['growth'][-1]['embedded_per_query']:.1f} texts/query", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
