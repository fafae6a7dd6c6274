"""Served Recall@10 along a `vecbridge upgrade`: the fraction re-embedded, the priority, with and without fusion.

What the product owner asked for: served Recall@10 as a function of the fraction re-embedded (0, 1, 5, 10, 25, 50,
100%) for each re-embedding priority, against staying on the old model and against a full re-embed, with and without
dual-query fusion; with fusion the curve must never fall below staying on the old model, and at 100% it must reach
the full re-embed. Plus the time and cost of each stage per 1M vectors.

Protocol (a simulation of the upgrade in numpy with the package's own pieces, no store): for each corpus
(../shared/data/wordnet, ../shared/data/foldoc; 10,000 items, query i relevant to doc i) and each sentence-encoder
pair old -> new,

* the map is ``OrthogonalProcrustes`` fitted on a uniform sample of 2,000 items (raw doc vectors, as
  ``vecbridge upgrade start`` fits on the stored vectors and their re-embedded texts); those 2,000 are the upgrade's
  re-embedded fit sample and count as native from the start;
* at fraction f, the served collection holds native new-model vectors for the fit sample plus ``round(f * 8000)``
  of the other 8,000 items, chosen by the priority, and mapped vectors ``T(x)`` for the rest;
* served Recall@10 is that of the 10,000 new-model queries over the served collection (cosine, ties against the
  relevant doc, as ``vecbridge.metrics.recall_at_k``); with fusion each doc scores
  ``(cos(q_new, v_new) + beta cos(q_old, v_old)) / (1 + beta)`` over the whole collection (``Upgrade.search`` fuses
  over the union of the two searches' top-100 candidates: the ``beta1_top100`` figures re-rank exactly that union);
* staying = old-model queries over the old docs; full re-embed = new-model queries over the new docs.

Priorities: ``random`` (the tool's default order: ``vecbridge.runtime.record_stamps.shuffle_rank`` of each id);
``residual`` (anchor residual: the similarity-weighted ``1 - cos(T(x_a), y_a)`` of the item's 10 nearest fit-sample anchors in the old
space, ``vecbridge.quality.options.reliability_scores``, the score ``upgrade reembed --priority residual`` orders by; it
needs nothing of the item beyond its old vector); ``hubs`` (the
mapped vector's mean cosine to its 10 nearest new-model queries of a query log); ``queries`` (how often the log's
queries retrieve the item in their top 10 over the everything-mapped collection: ``upgrade query-log``).
``hubs`` and ``queries`` need a log: the queries are split in two fixed halves; half A is the log, and every ``hubs``
and ``queries`` figure is measured on half B only (the other priorities are reported on all 10,000 queries and, for
comparison, on half B as well).

Serving options at the start (``serving`` in the JSON; everything mapped, the situation of a large collection): the
global and the clustered map (``ClusteredProcrustes`` on the same 2,000 pairs: ``upgrade start --method
clustered``), each served alone, with the hub penalty (``- w r(d)``, r from half A: ``upgrade query-log``), fused,
and fused with the penalty; beta and w chosen on half A from the grids ``upgrade tune`` uses (the old model alone
included), Recall@10 on half B. ``oracle`` (the true
``1 - cos(T(x), y)``, not knowable without re-embedding) is recorded as a bound, not a candidate.

beta: 1 (the default of earlier releases; untuned searches now serve the old model alone until cutover), and the best of ``BETAS`` chosen on held-out queries: for all 10,000 queries by 2-fold
cross-fitting (the beta that is best on half A scores half B and vice versa); on half B the beta best on half A.
No evaluated query ever picks its own beta. ``BETAS`` includes 0 (fusion off).

Times: the map's transform rate, the fit, and the fused re-scoring of ``Upgrade.search`` are measured here; the second
(old-model) search is timed as an exact numpy search and scaled to 1M vectors (an upper bound: a store's ANN index is
faster); re-embedding and old-model query encoding rates are the data sets' README figures (same 2-core machine kind).

The cascade at every stage (``cascade_stages`` in the JSON; ``random`` order, half B): the served ranking, fused with
the beta tuned on half A, has its top ``K_CAND`` re-scored with both models' own vectors of the candidates,
``cos(q_new, y) + c cos(q_old, x)``, c tuned on half A from the grid ``upgrade tune --rerank`` uses (the old model
alone included): ``upgrade search --rerank 100`` on a collection at that stage, before its write-back. And as
``upgrade tune --rerank auto`` sets it up (``cascade_auto``): the candidate count chosen on half A too, from
``RERANK_LADDER`` (a larger count tried where it holds more of half A's relevant docs; the smallest within
``RERANK_TIE`` of the best kept); the goals judge this one.

Every goal (``goals`` in the JSON, one table per corpus): this run's worst stage of the tuned fusion and of the
cascade, beside the worst cases that the benchmarks of :data:`GOAL_SOURCES` recorded (the cascade and fusion with a
query log's hub penalty, the continuous refit, migrations whose texts are gone, the plan's and the report's
predictions), read from their results in bench/results.

Run: ``python bench/upgrade_curve.py`` (one BLAS thread unless OPENBLAS_NUM_THREADS is set; ~20 minutes for the six
pairs on the shared 2-core machine); writes bench/results/upgrade_curve.json and prints the Markdown tables of
bench/make_readme.py. ``--cascade-only`` adds the cascade at every stage (~6 minutes) and the goals to the results
of a full run, which it keeps as they are; ``--goals`` gathers the goals again.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import json  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _corpora import CORPORA, DATA, SENTENCE_PAIRS, embeddings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vecbridge import metrics  # noqa: E402
from vecbridge.align import ClusteredProcrustes, OrthogonalProcrustes  # noqa: E402
from vecbridge.jobs.upgrade import FUSION_BETAS, HUB_WEIGHTS  # noqa: E402
from vecbridge.numeric.neighbors import knn  # noqa: E402
from vecbridge.numeric.ranking import best_first, ranks_of  # noqa: E402
from vecbridge.quality.options import anchor_residuals, reliability_scores  # noqa: E402
from vecbridge.runtime.record_stamps import shuffle_rank  # noqa: E402
from vecbridge.serving.weights import RERANK_LADDER, RERANK_TIE, choose_rerank  # noqa: E402
from vecbridge.vectors import l2_normalize  # noqa: E402

PAIRS = SENTENCE_PAIRS
N_FIT, K, K_CAND = 2000, 10, 100
FRACTIONS = (0.0, 0.01, 0.05, 0.10, 0.25, 0.50, 1.0)
PRIORITIES = ("random", "residual", "hubs", "queries", "oracle")
LOGGED = ("hubs", "queries")   # priorities that read a query log (half A): measured on half B
BETAS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
#: the cascade's old-model weights ``upgrade tune --rerank`` tries (inf: the old model alone over the candidates)
CASCADE_BETAS = FUSION_BETAS
HUB_K = 10
BLOCK = 500  # query rows per block of the score matrices

# Encoding times on the 2-core machine kind, seconds for all 10,000 rows (docs, queries), from each data set's
# README.md ("Models and encoding"): wordnet measured idle, foldoc "2 cores, busy" (and its docs are 2.3x longer).
README_ENCODE_S = {
    "wordnet": {"minilm3": (42.2, 19.6), "minilm6": (84.9, 33.3), "mpnet": (417.4, 143.7)},
    "foldoc": {"minilm3": (233.0, 24.0), "minilm6": (330.0, 28.0), "mpnet": (1532.0, 186.0)},
}
CORE_HOURS_PER_WALL_HOUR = 2  # the encoders ran with both cores of the machine


def machine() -> dict:
    try:
        load_avg = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load_avg = None
    return {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
            "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"), "load_avg_at_start": load_avg}


class Pair:
    """One corpus and model pair: the fitted map, the three score matrices, the priorities' orders."""

    def __init__(self, corpus: str, old: str, new: str, halves):
        self.name = f"{old}->{new}"
        X, Y = embeddings(DATA / corpus, old, "docs"), embeddings(DATA / corpus, new, "docs")
        self.Qn_raw, self.Qo_raw, self.X_raw, self.Y_raw = embeddings(DATA / corpus, new, "queries"), embeddings(DATA / corpus, old, "queries"), X, Y
        n = len(X)
        self.n = n
        self.fit = np.sort(np.random.default_rng(0).choice(n, N_FIT, replace=False))
        rest = np.setdiff1d(np.arange(n), self.fit)
        self.rest = rest
        t = time.perf_counter()
        self.est = OrthogonalProcrustes().fit(X[self.fit], Y[self.fit])
        self.fit_s = time.perf_counter() - t
        M = self.est.transform(X)
        self.M_raw = M
        Qn, Qo = l2_normalize(self.Qn_raw), l2_normalize(self.Qo_raw)
        Xu, Yu, Mu = l2_normalize(X), l2_normalize(Y), l2_normalize(M)
        self.S_nat, self.S_map, self.S_old = Qn @ Yu.T, Qn @ Mu.T, Qo @ Xu.T
        self.valid = self.Qn_raw.any(axis=1)   # a zero new-model query counts as a miss (metrics.recall_at_k)
        self.A, self.B = halves
        # priorities: a score per item of `rest`, higher = re-embed first
        scores = {"random": -np.array([shuffle_rank(int(i)) for i in rest], dtype=np.float64)}
        scores["residual"] = reliability_scores(
            X[rest], M[rest], X[self.fit], Y[self.fit], anchor_residuals(M[self.fit], Y[self.fit]),
            k=10)["anchor_residual"]
        _, sim = knn(M[rest], self.Qn_raw[self.A], HUB_K)
        scores["hubs"] = sim.mean(axis=1)
        top = np.argpartition(-self.S_map[self.A], K - 1, axis=1)[:, :K]
        scores["queries"] = np.bincount(top.ravel(), minlength=n)[rest].astype(np.float64)
        scores["oracle"] = 1.0 - np.einsum("ij,ij->i", Mu[rest], Yu[rest])
        self.order = {p: rest[best_first(s)] for p, s in scores.items()}

    def mask(self, priority: str | None, fraction: float) -> np.ndarray:
        """Native-vector mask of the served collection (None priority: everything mapped, the fit sample too)."""
        m = np.zeros(self.n, dtype=bool)
        if priority is None:
            return m
        m[self.fit] = True
        m[self.order[priority][:int(round(fraction * len(self.rest)))]] = True
        return m

    def ranks(self, native: np.ndarray, betas=BETAS, top100: bool = False) -> dict:
        """Rank of each query's relevant doc over the served collection, for every beta (0 = no fusion); with
        ``top100`` also the hit of beta 1 re-ranking only the union of the two searches' top-100 candidates."""
        n = self.n
        out = {b: np.empty(n, dtype=np.int64) for b in betas}
        hit100 = np.empty(n, dtype=bool) if top100 else None
        for lo in range(0, n, BLOCK):
            sl = slice(lo, min(lo + BLOCK, n))
            rel = np.arange(sl.start, sl.stop)   # query i is relevant to doc i
            served = np.where(native[None, :], self.S_nat[sl], self.S_map[sl])
            old = self.S_old[sl]
            fused = np.empty_like(served)
            for b in betas:
                if b == 0:
                    out[b][sl] = ranks_of(served, rel)
                    continue
                # (cos_new + b cos_old) / (1 + b): the division by 1 + b changes no order, so it is left out
                np.multiply(old, np.float32(b), out=fused)
                fused += served
                out[b][sl] = ranks_of(fused, rel)
            if top100:
                rows = np.arange(sl.stop - sl.start)[:, None]
                union = np.zeros(served.shape, dtype=bool)
                union[rows, np.argpartition(-served, K_CAND - 1, axis=1)[:, :K_CAND]] = True
                union[rows, np.argpartition(-old, K_CAND - 1, axis=1)[:, :K_CAND]] = True
                s = served + old
                true = s[rows[:, 0], rel]
                hit100[sl] = union[rows[:, 0], rel] & (((s >= true[:, None]) & union).sum(axis=1) <= K)
        hits = {b: (r <= K) & self.valid for b, r in out.items()}
        hits["native_rel"] = native   # query i's relevant doc i is native (for the split of the mapped-only recall)
        if top100:
            hits["beta1_top100"] = hit100 & self.valid
        return hits


def recall(hits: np.ndarray, rows=None) -> float:
    return float(hits.mean() if rows is None else hits[rows].mean())


def best_beta(hits: dict, rows) -> float:
    """The beta with the highest recall on ``rows`` (ties: the smallest beta)."""
    return max(BETAS, key=lambda b: (recall(hits[b], rows), -b))


def point(p: Pair, hits: dict, *, all_queries: bool) -> dict:
    """The figures of one stage: on all queries (betas cross-fitted over the halves) and on half B (beta from A)."""
    bA, bB = best_beta(hits, p.A), best_beta(hits, p.B)
    half_b = {"mapped": recall(hits[0.0], p.B), "beta1": recall(hits[1.0], p.B),
              "tuned": recall(hits[bA], p.B), "tuned_beta": bA}
    out = {"half_b": half_b}
    nat = hits["native_rel"]
    if all_queries:
        # mapped-only recall of the queries whose relevant doc is native / still mapped (None when there is none)
        out["split"] = {"relevant_native": recall(hits[0.0], nat) if nat.any() else None,
                        "relevant_mapped": recall(hits[0.0], ~nat) if (~nat).any() else None}
        cross = np.empty(p.n, dtype=bool)
        cross[p.B], cross[p.A] = hits[bA][p.B], hits[bB][p.A]
        out["all"] = {"mapped": recall(hits[0.0]), "beta1": recall(hits[1.0]), "tuned": recall(cross),
                      "tuned_betas": [bA, bB]}
        if "beta1_top100" in hits:
            out["all"]["beta1_top100"] = recall(hits["beta1_top100"])
    if "beta1_top100" in hits:
        half_b["beta1_top100"] = recall(hits["beta1_top100"], p.B)
    return out


def run_pair(corpus: str, old: str, new: str, halves) -> dict:
    t0 = time.perf_counter()
    p = Pair(corpus, old, new, halves)
    # references, with vecbridge.metrics itself
    staying_ranks = metrics.partner_ranks(p.Qo_raw, p.X_raw)
    full_ranks = metrics.partner_ranks(p.Qn_raw, p.Y_raw)
    stay_hits = (staying_ranks <= K) & p.Qo_raw.any(axis=1)
    full_hits = (full_ranks <= K) & p.valid
    res = {"pair": p.name, "n_docs": p.n, "n_fit": N_FIT, "fit_s": p.fit_s,
           "staying": {"all": metrics.recall_at_k(p.Qo_raw, p.X_raw, k=K), "half_b": recall(stay_hits, p.B)},
           "full_reembed": {"all": metrics.recall_at_k(p.Qn_raw, p.Y_raw, k=K), "half_b": recall(full_hits, p.B)}}
    res["all_mapped"] = point(p, p.ranks(p.mask(None, 0)), all_queries=True)
    res["curves"] = {}
    cache = {}
    for prio in PRIORITIES:
        pts = []
        for f in FRACTIONS:
            key = f if f in (0.0, 1.0) else (prio, f)   # 0% and 100% are the same collection for every priority
            if key not in cache:
                cache[key] = p.ranks(p.mask(prio, f), top100=prio == "random")
            pt = point(p, cache[key], all_queries=prio not in LOGGED)
            pts.append({"fraction": f, "n_native": int(p.mask(prio, f).sum()), **pt})
        res["curves"][prio] = pts
    res["serving"] = serving_options(p)
    res["cascade_stages"] = cascade_stages(p, {f: cache[f if f in (0.0, 1.0) else ("random", f)] for f in FRACTIONS})
    # cross-checks of the fast path against vecbridge.metrics on explicit served collections
    served0 = np.where(p.mask("random", 0.0)[:, None], p.Y_raw, p.M_raw)
    served100 = np.where(p.mask("random", 1.0)[:, None], p.Y_raw, p.M_raw)
    m10 = p.mask("random", 0.10)
    served10 = l2_normalize(np.where(m10[:, None], p.Y_raw, p.M_raw))
    fused_q = np.hstack([l2_normalize(p.Qn_raw), l2_normalize(p.Qo_raw)])   # beta 1: [q_new, q_old] . [v_new, v_old]
    fused_d = np.hstack([served10, l2_normalize(p.X_raw)])
    cc = {"random_0pct_mapped": [metrics.recall_at_k(p.Qn_raw, served0, k=K), res["curves"]["random"][0]["all"]["mapped"]],
          "random_10pct_beta1": [metrics.recall_at_k(fused_q, fused_d, k=K, metric="dot"),
                                 res["curves"]["random"][3]["all"]["beta1"]],
          "random_100pct_mapped": [metrics.recall_at_k(p.Qn_raw, served100, k=K),
                                   res["curves"]["random"][-1]["all"]["mapped"]],
          "staying_fast_path": [res["staying"]["all"], float(np.mean(ranks_of_old(p) <= K))]}
    res["crosscheck"] = {k: {"metrics": a, "fast_path": b, "abs_diff": abs(a - b)} for k, (a, b) in cc.items()}
    res["checks"] = checks(res)
    res["seconds"] = time.perf_counter() - t0
    return res


def cascade_hits(p: Pair, native: np.ndarray, beta: float, k_cand: int = K_CAND) -> tuple[dict, np.ndarray]:
    """Per cascade weight of ``CASCADE_BETAS``: whether each query's relevant doc is in the top K after the served
    ranking's top ``k_cand`` (fused at ``beta``) are re-scored with both models' own vectors,
    ``cos(q_new, y) + c cos(q_old, x)`` (``c = inf``: the old model alone), as ``upgrade search --rerank`` does;
    and whether those candidates held it."""
    out = {c: np.empty(p.n, dtype=bool) for c in CASCADE_BETAS}
    held = np.empty(p.n, dtype=bool)
    for lo in range(0, p.n, BLOCK):
        sl = slice(lo, min(lo + BLOCK, p.n))
        rel = np.arange(sl.start, sl.stop)
        served = np.where(native[None, :], p.S_nat[sl], p.S_map[sl]) + np.float32(beta) * p.S_old[sl]
        cand = np.argpartition(-served, k_cand - 1, axis=1)[:, :k_cand]
        sn, so = np.take_along_axis(p.S_nat[sl], cand, 1), np.take_along_axis(p.S_old[sl], cand, 1)
        is_rel = cand == rel[:, None]
        found = is_rel.any(axis=1)
        held[sl] = found
        for c in CASCADE_BETAS:
            s = so if np.isinf(c) else sn + np.float32(c) * so
            true = np.where(found, (s * is_rel).sum(axis=1), -np.inf)
            out[c][sl] = found & ((s >= true[:, None]).sum(axis=1) <= K)
    return {c: h & p.valid for c, h in out.items()}, held & p.valid


def auto_cascade(p: Pair, native: np.ndarray, beta: float, known: dict) -> tuple[int, float, np.ndarray]:
    """The cascade as ``upgrade tune --rerank auto`` sets it up on half A: each count of ``RERANK_LADDER`` tried
    where its candidates hold more of half A's relevant docs than the smallest's, the smallest within
    ``RERANK_TIE`` of the best Recall@10 kept, with its weight (``known``: counts computed already). Returns
    ``(count, weight, hits)``."""
    runs = {n: known[n] if n in known else cascade_hits(p, native, beta, n) for n in RERANK_LADDER}
    first = RERANK_LADDER[0]
    tried = [n for n in RERANK_LADDER
             if n == first or recall(runs[n][1], p.A) - recall(runs[first][1], p.A) > RERANK_TIE]
    weight = {n: max(CASCADE_BETAS, key=lambda b: (recall(runs[n][0][b], p.A), -b)) for n in tried}
    n = choose_rerank({n: recall(runs[n][0][weight[n]], p.A) for n in tried})
    return n, weight[n], runs[n][0][weight[n]]


def cascade_stages(p: Pair, ranked: dict | None = None) -> list[dict]:
    """The cascade at every stage of the ``random`` order, on half B: the served ranking fused with the beta tuned
    on half A, its top ``K_CAND`` re-scored with the cascade weight tuned on half A (``upgrade tune --rerank``).
    ``ranked``: each fraction's :meth:`Pair.ranks` where the curves computed them already."""
    out = []
    for f in FRACTIONS:
        native = p.mask("random", f)
        hits = ranked[f] if ranked else p.ranks(native)
        beta = best_beta(hits, p.A)
        ch, held = cascade_hits(p, native, beta)
        c = max(CASCADE_BETAS, key=lambda b: (recall(ch[b], p.A), -b))
        k_auto, c_auto, auto = auto_cascade(p, native, beta, {K_CAND: (ch, held)})
        out.append({"fraction": f, "tuned": recall(hits[beta], p.B), "tuned_beta": beta,
                    "cascade": recall(ch[c], p.B), "cascade_beta": "inf" if np.isinf(c) else c,
                    "cascade_auto": recall(auto, p.B), "cascade_auto_k": k_auto,
                    "cascade_auto_beta": "inf" if np.isinf(c_auto) else c_auto})
    return out


def serving_options(p: Pair) -> dict:
    """Everything mapped (a large collection at the start): Recall@10 on half B of each serving option of
    ``upgrade search``, its weights chosen on half A from ``upgrade tune``'s grids (``inf``: the old model alone)."""
    maps = {"global": p.M_raw,
            "clustered": ClusteredProcrustes(random_state=0).fit(p.X_raw[p.fit], p.Y_raw[p.fit]).transform(p.X_raw)}
    Qn = l2_normalize(p.Qn_raw)
    out = {"staying": recall((ranks_of_old(p) <= K) & p.Qo_raw.any(axis=1), p.B),
           "full_reembed": recall((metrics.partner_ranks(p.Qn_raw, p.Y_raw) <= K) & p.valid, p.B)}
    for name, M in maps.items():
        S = p.S_map if name == "global" else Qn @ l2_normalize(M).T
        pen = knn(M, p.Qn_raw[p.A], HUB_K)[1].mean(axis=1).astype(np.float32)   # = quality.scoring.hub_penalty
        memo = {}

        def hits(beta, w):
            if (beta, w) not in memo:
                h = np.empty(p.n, dtype=bool)
                for lo in range(0, p.n, BLOCK):
                    sl = slice(lo, min(lo + BLOCK, p.n))
                    # (cos_new + beta cos_old) / (1 + beta) - w r  orders as  cos_new + beta cos_old - (1 + beta) w r
                    sc = p.S_old[sl] if np.isinf(beta) else S[sl] + np.float32(beta) * p.S_old[sl] - \
                        np.float32((1 + beta) * w) * pen[None, :]
                    h[sl] = ranks_of(sc, np.arange(sl.start, sl.stop)) <= K
                memo[beta, w] = h & (p.Qo_raw.any(axis=1) if np.isinf(beta) else p.valid)
            return memo[beta, w]

        def choose(betas, weights):
            grid = [(b, w) for b in betas for w in (weights if np.isfinite(b) else (0.0,))]
            b, w = max(grid, key=lambda bw: (recall(hits(*bw), p.A), -bw[1], -bw[0] if np.isfinite(bw[0]) else -1e9))
            return {"recall": recall(hits(b, w), p.B), "beta": "old model alone" if np.isinf(b) else b, "hub_weight": w}

        out[name] = {"mapped": choose((0.0,), (0.0,)), "hub": choose((0.0,), HUB_WEIGHTS),
                     "fused": choose(FUSION_BETAS, (0.0,)), "fused_hub": choose(FUSION_BETAS, HUB_WEIGHTS)}
    return out


def ranks_of_old(p: Pair) -> np.ndarray:
    """Staying through the fast path's own score matrix (checks S_old against metrics.recall_at_k)."""
    out = np.empty(p.n, dtype=np.int64)
    for lo in range(0, p.n, BLOCK):
        sl = slice(lo, min(lo + BLOCK, p.n))
        out[sl] = ranks_of(p.S_old[sl], np.arange(sl.start, sl.stop))
    return out


def checks(res: dict) -> dict:
    """The owner's criteria, explicitly, on the same queries each figure was measured on."""
    out = {"fusion_never_below_staying": {}, "at_100": {}, "first_fraction_mapped_reaches_staying": {}}
    full, stay = res["full_reembed"], res["staying"]
    for prio, pts in res["curves"].items():
        if prio == "oracle":
            continue
        where = "half_b" if prio in LOGGED else "all"
        for kind in ("beta1", "tuned"):
            margins = [pt[where][kind] - stay[where] for pt in pts]
            worst = int(np.argmin(margins))
            out["fusion_never_below_staying"][f"{prio}/{kind}"] = {
                "ok": bool(min(margins) >= 0), "worst_margin": float(margins[worst]),
                "at_fraction": pts[worst]["fraction"], "queries": where}
        last = pts[-1][where]
        out["at_100"][prio] = {"queries": where, "mapped_equals_full": last["mapped"] == full[where],
                               "mapped": last["mapped"], "full": full[where],
                               "beta1_minus_full": last["beta1"] - full[where],
                               "tuned_minus_full": last["tuned"] - full[where],
                               "tuned_beta": last.get("tuned_betas", last.get("tuned_beta"))}
        first = next((pt["fraction"] for pt in pts if pt[where]["mapped"] >= stay[where]), None)
        out["first_fraction_mapped_reaches_staying"][prio] = first
    return out


# --------------------------------------------------------------------------------------------------------- speed

def median_time(fn, repeats: int = 3) -> float:
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def fused_rescore(q_new, q_old, ids_n, ids_o, new_vecs, old_vecs, beta=1.0, k=K):
    """``Upgrade.search``'s re-scoring loop for one query, on in-memory vectors instead of store ``get`` calls."""
    cand = list(dict.fromkeys(list(ids_n) + list(ids_o)))
    vn = dict(zip(cand, l2_normalize(new_vecs[cand])))
    vo = dict(zip(cand, l2_normalize(old_vecs[cand])))
    scores = np.array([(vn[i] @ q_new + beta * (vo[i] @ q_old)) / (1 + beta) for i in cand])
    order = np.argsort(-scores, kind="stable")[:k]
    return [cand[j] for j in order], scores[order]


def speed() -> dict:
    out = {"transform": {}, "fit": {}}
    rng = np.random.default_rng(0)
    n_t = 100_000
    for old, new in PAIRS:
        X = embeddings(DATA / "wordnet", old, "docs")
        Y = embeddings(DATA / "wordnet", new, "docs")
        est = OrthogonalProcrustes().fit(X[:N_FIT], Y[:N_FIT])
        big = np.tile(X, (n_t // len(X), 1))
        t = median_time(lambda: est.transform(big))
        out["transform"][f"{old}->{new}"] = {"n": n_t, "s": t, "s_per_1M": t * 1e6 / n_t}
        out["fit"][f"{old}->{new}"] = {"n": N_FIT, "s": median_time(lambda: OrthogonalProcrustes().fit(X[:N_FIT], Y[:N_FIT]))}
    # dual-query fusion: the second (old-model) search, exact, over 10,000 docs, scaled to 1M; the re-scoring loop
    search = {}
    for model in ("minilm6", "mpnet", "minilm3"):
        D = l2_normalize(embeddings(DATA / "wordnet", model, "docs"))
        Q = l2_normalize(embeddings(DATA / "wordnet", model, "queries")[:1000])
        t = median_time(lambda: np.argpartition(-(Q @ D.T), K_CAND - 1, axis=1)[:, :K_CAND])
        # t seconds for 1,000 queries = t ms per query (throughput of a batched exact search, not one query's latency)
        search[model] = {"queries": 1000, "docs": len(D), "ms_per_query": t, "ms_per_query_per_1M": t * 1e6 / len(D)}
    out["exact_search"] = search
    Xn, Xo = embeddings(DATA / "wordnet", "mpnet", "docs"), embeddings(DATA / "wordnet", "minilm6", "docs")
    qn, qo = l2_normalize(embeddings(DATA / "wordnet", "mpnet", "queries")[:200]), l2_normalize(embeddings(DATA / "wordnet", "minilm6", "queries")[:200])
    ids = [(rng.choice(len(Xn), K_CAND, replace=False), rng.choice(len(Xn), K_CAND, replace=False)) for _ in range(200)]
    t = median_time(lambda: [fused_rescore(qn[i], qo[i], *ids[i], Xn, Xo) for i in range(200)])
    out["rescore_ms_per_query"] = t / 200 * 1000
    out["rescore_note"] = ("Upgrade.search's per-query loop over the union of two top-100 lists (mpnet new, minilm6 "
                           "old), vectors in memory; a store adds two get() round trips")
    return out


def costs(sp: dict) -> list[dict]:
    """Per 1M vectors, per stage, per pair and corpus (hours of wall time on the 2-core machine kind)."""
    rows = []
    for corpus in CORPORA:
        for old, new in PAIRS:
            pair = f"{old}->{new}"
            doc_s = README_ENCODE_S[corpus][new][0] / 10_000
            q_old_s = README_ENCODE_S[corpus][old][1] / 10_000
            start_s = N_FIT * doc_s + sp["fit"][pair]["s"] + sp["transform"][pair]["s_per_1M"]
            reembed_h = {str(f): f * (1e6 - N_FIT) * doc_s / 3600 for f in FRACTIONS if f > 0}
            fusion_ms = (q_old_s * 1000 + sp["exact_search"][old]["ms_per_query_per_1M"] + sp["rescore_ms_per_query"])
            rows.append({"corpus": corpus, "pair": pair, "doc_encode_ms": doc_s * 1000,
                         "start": {"reembed_fit_sample_s": N_FIT * doc_s, "fit_s": sp["fit"][pair]["s"],
                                   "map_1M_s": sp["transform"][pair]["s_per_1M"], "total_s": start_s},
                         "reembed_hours": reembed_h,
                         "reembed_core_hours_100pct": reembed_h["1.0"] * CORE_HOURS_PER_WALL_HOUR,
                         "fusion_per_query_ms": {"old_query_encode": q_old_s * 1000,
                                                 "second_search_exact_1M": sp["exact_search"][old]["ms_per_query_per_1M"],
                                                 "rescore": sp["rescore_ms_per_query"], "total": fusion_ms}})
    return rows


#: the benchmarks whose results :func:`goals` gathers, and the commands that produce them
GOAL_SOURCES = {
    "cascade_hubs": "python bench/cascade_hubs.py",
    "cascade_hubs_auto": "python bench/cascade_hubs.py --k auto --out bench/results/cascade_hubs_auto.json",
    "continuous_refit": "python bench/continuous_refit.py",
    "text_gone": "OPENBLAS_NUM_THREADS=1 python bench/text_gone.py (--overlap 2308 for the collection's own documents)",
    "plan_calibration": "OPENBLAS_NUM_THREADS=1 python bench/plan_calibration.py",
    "plan_calibration_auto": "OPENBLAS_NUM_THREADS=1 python bench/plan_calibration.py --rerank auto",
    "report_calibration": "OPENBLAS_NUM_THREADS=1 python bench/report_calibration.py",
    "text_gone_report": "OPENBLAS_NUM_THREADS=1 python bench/text_gone_report.py --unsupervised",
}


def _worst(values):
    values = [v for v in values if v is not None]
    return min(values) if values else None


def goals(result: dict) -> dict:
    """Every goal of quality while upgrading, per corpus and model pair, from this run's stages and the results of
    the benchmarks in :data:`GOAL_SOURCES` (read as they stand in bench/results; a pair a result lacks is None)."""
    res = {name: json.loads((ROOT / "bench" / "results" / f"{name}.json").read_text()) for name in GOAL_SOURCES}
    out = {}
    for corpus, pairs in result["corpora"].items():
        hubs = {r["pair"]: r["new_queries"] for r in res["cascade_hubs"]["corpora"].get(corpus, [])}
        hubs_auto = {r["pair"]: r["new_queries"] for r in res["cascade_hubs_auto"]["corpora"].get(corpus, [])}
        refit = {f"{r['old']}->{r['new']}": r for r in res["continuous_refit"]["results"] if r["corpus"] == corpus}
        plan = {r["pair"]: r for r in res["plan_calibration"]["results"] if r["corpus"] == corpus}
        plan_auto = {r["pair"]: r for r in res["plan_calibration_auto"]["results"] if r["corpus"] == corpus}
        report = {r["pair"]: r for r in res["report_calibration"]["rows"]
                  if r["corpus"] == corpus and r["sample"] == max(res["report_calibration"]["protocol"]["samples"])}
        gone = [r for r in res["text_gone"]["rows"] if r["corpus"] == corpus]
        gone_report_all = [r for r in res["text_gone_report"]["rows"] if r["corpus"] == corpus]
        gone_report = [r for r in gone_report_all
                       if r["report"] in ("geh", "unsupervised") and r.get("measured", {}).get("accepted", True)]
        out[corpus] = {}
        for pair, r in pairs.items():
            best = max(r["staying"]["half_b"], r["full_reembed"]["half_b"])
            st = r.get("cascade_stages", [])
            h, ha = hubs.get(pair), hubs_auto.get(pair)
            hbest = max(h["staying"], h["full_reembed"]) if h else None

            def text_gone(mode, key="gap_to_supervised"):
                rows = [g for g in gone if g["pair"] == pair and g["mode"] == mode]
                return {"fits": len(rows), "accepted": sum(bool(g["accepted"]) for g in rows),
                        "worst_gap": max((g[key] for g in rows if g["accepted"]), default=None)}

            at25 = [s for s in refit[pair]["stages"] if s["fraction"] == 0.25] if pair in refit else []
            out[corpus][pair] = {
                "staying": r["staying"]["half_b"], "full_reembed": r["full_reembed"]["half_b"],
                "fusion_worst": _worst([x["tuned"] - best for x in st]),
                "cascade_worst": _worst([x.get("cascade_auto", x["cascade"]) - best for x in st]),
                "log_fusion_worst": _worst([x["served"] - hbest for x in h["stages"]]) if h else None,
                "log_cascade_worst": _worst([x["cascade"] - hbest for x in (ha or h)["stages"]]) if h else None,
                "refit_gain_25": at25[0]["mapped_only_gain"] if at25 else None,
                "unsupervised": text_gone("unsupervised"), "unsupervised_own": text_gone("overlap 2308"),
                "geh": text_gone("geh", "refined_gap_to_supervised"),
                "plan_error": max(abs(x["error"]) for x in plan[pair]["rows"] + plan_auto.get(pair, {"rows": []})["rows"])
                if pair in plan else None,
                "report_error": (max(abs(report[pair]["top1"]["error_new"]), abs(report[pair]["retention"]["error_new"]))
                                 if pair in report else None),
                # the report where the text is gone: GEH's refined map (top-1, retention), unsupervised (Recall@10)
                # ("refused": the report and the fit refused every map of the pair, so there is nothing to predict)
                "text_gone_report_error": max((abs(r[e]) for r in gone_report if r["pair"] == pair
                                               for e in ("top1_error", "retention_error", "recall10_error") if e in r),
                                              default="refused" if any(r["pair"] == pair for r in gone_report_all)
                                              else None)}
    return {"sources": GOAL_SOURCES, "report_sample": max(res["report_calibration"]["protocol"]["samples"]),
            "corpora": out}


def goals_only() -> int:
    """``--goals``: gather :func:`goals` again into the results of a full run (kept as they are) and print them."""
    out = ROOT / "bench" / "results" / "upgrade_curve.json"
    result = json.loads(out.read_text())
    result["goals"] = goals(result)
    out.write_text(json.dumps(result, indent=1) + "\n")
    sys.path.insert(0, str(ROOT / "bench"))
    from make_readme import upgrade_curve  # noqa: E402  (the README's own tables)
    for name, text in upgrade_curve(result).items():
        if name.startswith("goals"):
            print(f"### {name}\n\n{text}\n")
    return 0


def main() -> int:
    t0 = time.perf_counter()
    perm = np.random.default_rng(1).permutation(10_000)
    halves = (np.sort(perm[:5000]), np.sort(perm[5000:]))
    if "--cascade-only" in sys.argv[1:]:
        return cascade_only(halves)
    if "--goals" in sys.argv[1:]:
        return goals_only()
    result = {"command": "python bench/upgrade_curve.py", "argv": " ".join(shlex.quote(a) for a in sys.argv),
              "machine": machine(),
              "protocol": {"n_fit": N_FIT, "k": K, "fractions": list(FRACTIONS), "priorities": list(PRIORITIES),
                           "betas": list(BETAS), "hub_k": HUB_K, "k_candidates": K_CAND,
                           "fit_sample": "numpy.random.default_rng(0).choice(10000, 2000, replace=False)",
                           "query_halves": "numpy.random.default_rng(1).permutation(10000): first 5,000 = A (log, "
                                           "tuning), last 5,000 = B",
                           "encode_source": "../shared/data/{wordnet,foldoc}/README.md, 'Models and encoding'"},
              "corpora": {}}
    for corpus in CORPORA:
        result["corpora"][corpus] = {}
        for old, new in PAIRS:
            r = run_pair(corpus, old, new, halves)
            result["corpora"][corpus][r["pair"]] = r
            c = r["checks"]
            bad = [k for k, v in c["fusion_never_below_staying"].items() if not v["ok"]]
            print(f"{corpus:8s} {r['pair']:16s} stay {r['staying']['all']:.3f} full {r['full_reembed']['all']:.3f} "
                  f"0%: mapped {r['curves']['random'][0]['all']['mapped']:.3f} "
                  f"beta1 {r['curves']['random'][0]['all']['beta1']:.3f} "
                  f"| fusion >= staying everywhere: {'yes' if not bad else 'NO ' + ','.join(bad)} "
                  f"| 100% mapped == full: {all(v['mapped_equals_full'] for v in c['at_100'].values())} "
                  f"| crosscheck max diff {max(v['abs_diff'] for v in r['crosscheck'].values()):.5f} "
                  f"| {r['seconds']:.0f} s", flush=True)
    sp = speed()
    result["speed"] = sp
    result["costs"] = costs(sp)
    result["runtime_s"] = time.perf_counter() - t0
    result["machine"]["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out = ROOT / "bench" / "results" / "upgrade_curve.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out} ({result['runtime_s']:.0f} s)\n")
    sys.path.insert(0, str(ROOT / "bench"))
    from make_readme import upgrade_curve  # noqa: E402  (the README's own tables)
    for name, text in upgrade_curve(result).items():
        print(f"### {name}\n\n{text}\n")
    return 0


def cascade_only(halves) -> int:
    """``--cascade-only``: the cascade at every stage (:func:`cascade_stages`) added to the results of a full run,
    which are kept as they are."""
    out = ROOT / "bench" / "results" / "upgrade_curve.json"
    result = json.loads(out.read_text())
    for corpus in CORPORA:
        for old, new in PAIRS:
            r = result["corpora"][corpus][f"{old}->{new}"]
            r["cascade_stages"] = cascade_stages(Pair(corpus, old, new, halves))
            best = max(r["staying"]["half_b"], r["full_reembed"]["half_b"])
            print(corpus, r["pair"], " ".join(f"{x['fraction']:.0%}: {x['tuned'] - best:+.4f}/{x['cascade'] - best:+.4f}"
                                             for x in r["cascade_stages"]), flush=True)
    result["cascade_stages_command"] = "python bench/upgrade_curve.py --cascade-only"
    result["goals"] = goals(result)
    out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
