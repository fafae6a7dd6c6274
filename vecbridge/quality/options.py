"""Which option keeps enough retrieval quality, at what cost: measured curves and a recommendation.

A user who upgrades their embedding model can (from cheapest to dearest, roughly):

* map every old vector with one orthogonal Q, or with local maps (:class:`~vecbridge.align.ClusteredProcrustes`);
* add the hub penalty (a per-document score correction from a sample of new-model queries, see
  :mod:`vecbridge.quality.scoring`);
* keep encoding queries with the old model too and fuse both scores (dual-query fusion: no re-embedding, one extra
  query encoding);
* re-embed a fraction of the items, chosen where the map is least reliable (**selective re-embedding**);
* re-rank the top K candidates of each query with the new model's vectors of their texts;
* re-embed everything.

:func:`measure_options` measures each on the user's own pairs (fit on one part, evaluate on another, queries whose
relevant item is in the evaluated part) and :func:`recommend` picks the cheapest that meets a target retention
under a :class:`CostModel` (what one encoder call costs, how many items and queries).

Selective re-embedding ranks items by how unreliable their mapping looks, from what is known *without*
re-embedding them (:func:`reliability_scores`):

* ``anchor_residual``: the residual ``1 - cos(T(x_a), y_a)`` of the nearest anchors (in the old space), weighted by
  similarity: where the map is bad on known pairs, it is probably bad on their neighbours;
* ``inconsistency``: ``1 - |kNN_old(x) ∩ kNN_new(T(x))| / k`` over the anchors: the item's neighbourhood among the
  anchors is not the same before and after mapping (the local-consistency premise of "Vector Linking via
  Cross-Model Local Isometric Consistency", SIGMOD 2025, used as a per-item test);
* ``frequency``: how often the mapped item is in the top 10 of a query log (most often retrieved first);
* ``link_confidence``: ``1 - confidence`` when the pairs came from GEH links (the caller passes the scores);
* ``random``: the baseline every strategy must beat.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import InputError
from ..numeric.neighbors import knn
from ..numeric.ranking import best_first, ranks_of, shared_count, top_k_indices
from ..vectors import l2_normalize
from .scoring import fuse

STRATEGIES = ("random", "anchor_residual", "inconsistency", "combined", "frequency")
DEFAULT_FRACTIONS = (0.01, 0.05, 0.10, 0.25)
DEFAULT_RERANK_K = (20, 50, 100)
#: the plain map's name among the options
ORTHO_OPTION = "orthogonal (one global Q)"


# --- reliability of each item's mapping ------------------------------------------------------------------------------
def anchor_residuals(mapped_anchors, Y_anchors) -> np.ndarray:
    """``1 - cos(T(x_a), y_a)`` for every anchor pair (computed on pairs the map was fitted on, or held out)."""
    return (1.0 - np.einsum("ij,ij->i", l2_normalize(mapped_anchors), l2_normalize(Y_anchors))).astype(np.float32)


def anchor_residual(X_items, X_anchors, residuals, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """The ``anchor_residual`` score of each item (the residuals of its ``k`` nearest fit anchors in the old space,
    weighted by similarity to the fourth power), and those anchors' indices: one nearest-neighbour search, what
    ``upgrade start`` computes for every record it maps."""
    idx, sim = knn(X_items, X_anchors, k)
    w = np.maximum(sim, 0) ** 4 + 1e-12
    return (w * np.asarray(residuals)[idx]).sum(axis=1) / w.sum(axis=1), idx


def reliability_scores(X_items, mapped_items, X_anchors, Y_anchors, residuals, *, k: int = 10,
                       query_log=None, random_state=0) -> dict[str, np.ndarray]:
    """Per-item unreliability under each strategy (higher = re-embed first). ``frequency`` only with a query log."""
    n = np.asarray(X_items).shape[0]
    out = {"random": np.random.default_rng(random_state).random(n)}
    out["anchor_residual"], idx = anchor_residual(X_items, X_anchors, residuals, k)
    i_new, _ = knn(mapped_items, Y_anchors, k)
    out["inconsistency"] = 1.0 - shared_count(idx, i_new) / k  # rows of each hold distinct anchors
    z = [(v - v.mean()) / (v.std() + 1e-12) for v in (out["anchor_residual"], out["inconsistency"])]
    out["combined"] = z[0] + z[1]
    if query_log is not None:
        top, _ = knn(query_log, mapped_items, 10)
        out["frequency"] = np.bincount(top.ravel(), minlength=n) + 1e-3 * out["anchor_residual"]
    return out


def select(scores: np.ndarray, fraction: float) -> np.ndarray:
    """Indices of the ``fraction`` of items with the highest scores (stable: ties keep item order)."""
    m = int(round(float(fraction) * len(scores)))
    return best_first(scores, m)


# --- ranking with the extra score terms ------------------------------------------------------------------------------
def _first_stage(Q_new, docs, Q_old=None, old_docs=None, beta: float = 0.0, penalty=None, weight: float = 0.0):
    """``(Qn, Qo, X, scores)``: the normalised new-model queries, old-model queries and old documents (None without
    the old-model term) and ``scores(sl)``, the scores ``cos(q, d) + beta cos(q_old, x) - weight r(d)`` of the
    queries ``sl`` against every document (the old-model term only with ``beta`` and ``Q_old``, the penalty only
    with a ``weight``)."""
    Qn, D = l2_normalize(Q_new), l2_normalize(docs)
    use_old = beta != 0 and Q_old is not None
    Qo, X = (l2_normalize(Q_old), l2_normalize(old_docs)) if use_old else (None, None)
    pen = None if penalty is None else np.asarray(penalty, dtype=np.float32)

    def scores(sl: slice) -> np.ndarray:
        return fuse(Qn[sl] @ D.T, Qo[sl] @ X.T if use_old else None, beta, pen, weight)

    return Qn, Qo, X, scores


def relevant_ranks(Q_new, docs, relevant, *, Q_old=None, old_docs=None, beta: float = 0.0, penalty=None,
                   weight: float = 0.0, block: int = 1024) -> np.ndarray:
    """1-based rank of each query's relevant document under ``cos(q, d) + beta cos(q_old, x) - weight r(d)``
    (ties count against it: :func:`vecbridge.numeric.ranking.ranks_of`, as in :mod:`vecbridge.metrics`)."""
    Qn, _, _, scores = _first_stage(Q_new, docs, Q_old, old_docs, beta, penalty, weight)
    rel = np.asarray(relevant, dtype=np.int64)
    ranks = np.empty(len(Qn), dtype=np.int64)
    for lo in range(0, len(Qn), block):
        sl = slice(lo, min(lo + block, len(Qn)))
        ranks[sl] = ranks_of(scores(sl), rel[sl])
    return ranks


def recall(ranks, k: int = 10) -> float:
    return float(np.mean(np.asarray(ranks) <= k))


def rerank_recall(Q_new, first_docs, native_docs, relevant, K: int, k: int = 10, **first_kw) -> tuple[float, float]:
    """Recall@k after re-scoring each query's top ``K`` (by the first-stage score, ``first_kw`` as in
    :func:`relevant_ranks`) with the native new-model vectors, and the fraction of distinct items that were
    candidates (what a cache of re-embedded candidates would hold after these queries).

    With dual-query fusion in the first stage (``beta`` and ``Q_old``), the re-score keeps the old-model term:
    ``cos(q_new, y) + beta cos(q_old, x)`` (dropping it would throw away what fusion gains)."""
    beta = first_kw.get("beta", 0.0)
    Qn, Qo, X, first_stage = _first_stage(Q_new, first_docs, first_kw["Q_old"] if beta else None,
                                          first_kw["old_docs"] if beta else None, beta, first_kw.get("penalty"),
                                          first_kw.get("weight", 0.0))
    N = l2_normalize(native_docs)
    rel = np.asarray(relevant, dtype=np.int64)
    hits, seen = 0, np.zeros(len(first_docs), bool)
    block = int(max(16, min(1024, 2**25 // (max(K, 1) * max(N.shape[1], 1)))))  # gathered candidates <= 128 MB
    for lo in range(0, len(Qn), block):
        sl = slice(lo, min(lo + block, len(Qn)))
        top = top_k_indices(first_stage(sl), K)
        seen[np.unique(top)] = True
        native = np.einsum("qd,qkd->qk", Qn[sl], N[top])
        if Qo is not None:
            native += beta * np.einsum("qd,qkd->qk", Qo[sl], X[top])
        in_c = top == rel[sl][:, None]
        rank = ranks_of(native, in_c.argmax(axis=1))
        hits += int(np.sum(in_c.any(axis=1) & (rank <= k)))
    return hits / len(Qn), float(seen.mean())


# --- options and costs -----------------------------------------------------------------------------------------------
@dataclass
class CostModel:
    """What the options cost for one user: collection size, queries over the horizon considered, encoder times.

    ``encode_item_s``: seconds of new-model encoding per stored item (re-embedding, query-time re-ranking);
    ``encode_query_old_s``: seconds of old-model encoding per query (dual-query fusion). Measured on this project's
    machine (2 shared cores, batch 32-64, wordnet glosses of ~13 words): all-mpnet-base-v2 0.042 s/item,
    all-MiniLM-L6-v2 0.0085 s/item, paraphrase-MiniLM-L3-v2 0.0042 s/item (../shared/data/wordnet/README.md).
    """

    n_items: int = 1_000_000
    n_queries: int = 1_000_000
    encode_item_s: float = 0.042
    encode_query_old_s: float = 0.0085


@dataclass
class Option:
    """One way to serve new-model queries, its measured retention and what it needs."""

    name: str
    retention: float
    recall: float
    reembed_fraction: float = 0.0
    rerank_k: int = 0
    needs_old_model: bool = False
    needs_query_log: bool = False
    needs_texts: bool = False
    one_off_s_per_item: float = 0.0       # mapping and per-item extras, measured (excludes re-embedding)
    query_s: float = 0.0                  # measured extra scoring time per query (excludes encoding)
    extra_bytes_per_item: float = 0.0
    extra_bytes_fixed: float = 0.0
    details: dict = field(default_factory=dict)

    def cost(self, model: CostModel) -> dict:
        """Seconds of compute over the horizon: one-off (map + re-embed) and per query (encode/re-score)."""
        reembed = self.reembed_fraction * model.n_items * model.encode_item_s
        one_off = self.one_off_s_per_item * model.n_items + reembed
        # query-time re-embedding is cached: at most every item once, never more than a full re-embed
        rerank_items = min(self.rerank_k * model.n_queries, model.n_items) if self.rerank_k else 0
        per_query = self.query_s + (model.encode_query_old_s if self.needs_old_model else 0.0)
        query_total = per_query * model.n_queries + rerank_items * model.encode_item_s
        latency = self.query_s + (model.encode_query_old_s if self.needs_old_model else 0.0) + \
            self.rerank_k * model.encode_item_s
        return {"one_off_s": one_off, "reembed_s": reembed, "query_total_s": query_total, "total_s": one_off +
                query_total, "added_latency_s_uncached": latency,
                "extra_storage_bytes": self.extra_bytes_per_item * model.n_items + self.extra_bytes_fixed}

    def as_dict(self, model: CostModel | None = None) -> dict:
        d = asdict(self)
        if model is not None:
            d["cost"] = self.cost(model)
        return d


def recommend(options: list[Option], target: float = 0.95, model: CostModel | None = None, *,
              allow_old_model: bool = True, have_texts: bool = True, have_query_log: bool = True,
              exclude: dict | None = None) -> dict:
    """The cheapest option (total seconds under ``model``, then storage) whose measured retention meets ``target``.

    Options whose needs the user cannot meet (old model at query time, stored texts, a query log) are skipped.
    ``exclude`` maps option names to why they are ruled out (a report's NO-GO, say): they stay in the table with
    that reason under ``"excluded"`` but are never chosen. Without any option meeting the target, the best-retaining
    one is returned with ``meets_target = False`` and the shortfall.
    """
    model = model or CostModel()
    exclude = exclude or {}
    possible = [o for o in options if (allow_old_model or not o.needs_old_model)
                and (have_texts or not o.needs_texts) and (have_query_log or not o.needs_query_log)]
    usable = [o for o in possible if o.name not in exclude]
    if not usable:
        raise InputError("no option is usable under these constraints")
    ok = [o for o in usable if o.retention >= target]

    def row(o):
        r = {"name": o.name, "retention": o.retention, **o.cost(model)}
        if "retention_measured" in o.details:
            r["retention_measured"] = o.details["retention_measured"]
        if o.name in exclude:
            r["excluded"] = exclude[o.name]
        return r

    table = sorted((row(o) for o in possible), key=lambda r: (r["total_s"], r["extra_storage_bytes"]))
    if ok:
        best = min(ok, key=lambda o: (o.cost(model)["total_s"], o.cost(model)["extra_storage_bytes"], -o.retention))
        reason = (f"cheapest option with retention >= {target:.2f}: {best.name} ({best.retention:.3f}), "
                  f"{_fmt_s(best.cost(model)['total_s'])} of compute for {model.n_items:,} items and "
                  f"{model.n_queries:,} queries")
        return {"choice": best.name, "meets_target": True, "retention": best.retention, "target": target,
                "cost": best.cost(model), "reason": reason, "options": table}
    best = max(usable, key=lambda o: o.retention)
    return {"choice": best.name, "meets_target": False, "retention": best.retention, "target": target,
            "shortfall": target - best.retention, "cost": best.cost(model),
            "reason": f"no option reaches {target:.2f}; the best is {best.name} at {best.retention:.3f} "
                      f"({target - best.retention:.3f} short)", "options": table}


def _fmt_s(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


# --- measuring every option on the user's pairs ----------------------------------------------------------------------
def measure_options(X_fit, Y_fit, X_eval, Y_eval, Q_new, relevant, *, Q_old=None, query_log=None, k: int = 10,
                    fractions=DEFAULT_FRACTIONS, rerank_k=DEFAULT_RERANK_K, hub_k: int = 10, hub_weight: float = 0.5,
                    beta: float = 1.0, clustered_kw: dict | None = None, strategies=STRATEGIES,
                    random_state=0, center: bool = False, on_step=lambda s: None) -> dict:
    """Fit on ``(X_fit, Y_fit)``, evaluate on the pool ``(X_eval, Y_eval)`` with new-model queries ``Q_new``
    (``relevant[i]`` = row of ``X_eval`` relevant to query i).

    ``Q_old`` (the same queries through the old model) enables dual-query fusion; ``query_log`` (new-model vectors
    of other queries, e.g. a log sample) is the hub penalty's reference (without it, the new-model vectors of the
    anchors are). ``center``: the global orthogonal map centres both sides (as the report's map does).
    Returns ``{"native_recall", "options": [Option], "curves": {...}}``; retention is refused (InputError) when the
    native recall is below the floor of :func:`vecbridge.metrics.retention_ratio`.
    """
    from ..metrics import retention_ratio

    m = _Measurement(X_fit, Y_fit, X_eval, Y_eval, Q_new, relevant, query_log=query_log, k=k, hub_k=hub_k,
                     hub_weight=hub_weight, random_state=random_state)
    _, why = retention_ratio(1.0, m.native, len(m.rel), k=k)
    if why is not None:
        raise InputError(f"retention cannot be measured: {why}")
    on_step("fitting the global and the clustered maps")
    m.maps(center, clustered_kw)
    on_step("hub penalty")
    m.hub_penalty()
    if Q_old is not None:
        m.fusion(Q_old, beta)
    on_step("selective re-embedding")
    best_strat = m.selective(strategies, fractions)
    on_step("re-ranking")
    m.rerank(rerank_k)
    m.options.append(Option(name="full re-embed", retention=1.0, recall=m.native, reembed_fraction=1.0,
                            needs_texts=True))
    return {"native_recall": m.native, "n_eval": m.n_eval, "n_queries": len(m.rel), "n_fit": len(m.X_fit),
            "options": m.options, "curves": m.curves, "best_strategy": best_strat}


class _Measurement:
    """The steps of :func:`measure_options`, each adding its options (in the order the report lists them) and
    curves; the best first stage (clustered + hub penalty) is what re-embedding and re-ranking build on."""

    BEST = "clustered + hub penalty"

    def __init__(self, X_fit, Y_fit, X_eval, Y_eval, Q_new, relevant, *, query_log, k, hub_k, hub_weight,
                 random_state):
        self.X_fit, self.Y_fit = np.asarray(X_fit, np.float32), np.asarray(Y_fit, np.float32)
        self.X_eval, self.Y_eval = np.asarray(X_eval, np.float32), np.asarray(Y_eval, np.float32)
        self.rel = np.asarray(relevant, dtype=np.int64)
        if len(Q_new) != len(self.rel):
            raise InputError(f"{len(Q_new)} queries but {len(self.rel)} relevant rows")
        self.Q_new, self.query_log, self.k, self.hub_k, self.hub_weight = Q_new, query_log, k, hub_k, hub_weight
        self.random_state = random_state
        self.n_eval = len(self.X_eval)
        self.native = recall(relevant_ranks(Q_new, self.Y_eval, self.rel), k)
        self.options: list[Option] = []
        self.curves: dict = {}

    def add(self, name, ranks, **kw) -> float:
        r = recall(ranks, self.k)
        self.options.append(Option(name=name, retention=r / self.native, recall=r, **kw))
        return r / self.native

    def _timed_transform(self, est):
        t0 = time.perf_counter()
        out = est.transform(self.X_eval)
        return out, (time.perf_counter() - t0) / self.n_eval

    def maps(self, center: bool, clustered_kw: dict | None) -> None:
        """The global orthogonal map and the clustered one, each as an option."""
        from ..align.clustered import ClusteredProcrustes
        from ..align.procrustes import FewPairsWarning, OrthogonalProcrustes

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FewPairsWarning)
            ortho = OrthogonalProcrustes(center=center).fit(self.X_fit, self.Y_fit)
        self.clustered = ClusteredProcrustes(random_state=self.random_state, **(clustered_kw or {})).fit(
            self.X_fit, self.Y_fit)
        M_o, t_o = self._timed_transform(ortho)
        self.M_c, self.t_c = self._timed_transform(self.clustered)
        self.art_bytes = self.clustered.rotations_.size * 8 + self.clustered.centroids_.size * 8
        self.add(ORTHO_OPTION, relevant_ranks(self.Q_new, M_o, self.rel), one_off_s_per_item=t_o)
        self.add("clustered Procrustes", relevant_ranks(self.Q_new, self.M_c, self.rel), one_off_s_per_item=self.t_c,
                 extra_bytes_fixed=self.art_bytes)

    def hub_penalty(self) -> None:
        """The clustered map with the hub penalty against the query log (or the anchors' new-model vectors)."""
        from .scoring import hub_penalty

        self.ref = np.asarray(self.query_log, np.float32) if self.query_log is not None else self.Y_fit
        t0 = time.perf_counter()
        self.pen_c = hub_penalty(self.M_c, self.ref, self.hub_k)
        self.t_hub = (time.perf_counter() - t0) / self.n_eval
        self.hub_kw = dict(needs_query_log=self.query_log is not None, extra_bytes_per_item=4.0,
                           extra_bytes_fixed=self.art_bytes)
        self.add(self.BEST, relevant_ranks(self.Q_new, self.M_c, self.rel, penalty=self.pen_c, weight=self.hub_weight),
                 one_off_s_per_item=self.t_c + self.t_hub, **self.hub_kw)

    def fusion(self, Q_old, beta: float) -> None:
        """Dual-query fusion, without and with the hub penalty."""
        fuse = dict(Q_old=Q_old, old_docs=self.X_eval, beta=beta)
        self.add("dual-query fusion (clustered + old-model query)", relevant_ranks(self.Q_new, self.M_c, self.rel,
                                                                                   **fuse),
                 one_off_s_per_item=self.t_c, needs_old_model=True, extra_bytes_fixed=self.art_bytes)
        self.add("dual-query fusion + hub penalty",
                 relevant_ranks(self.Q_new, self.M_c, self.rel, **fuse, penalty=self.pen_c, weight=self.hub_weight),
                 one_off_s_per_item=self.t_c + self.t_hub, needs_old_model=True, **self.hub_kw)

    def selective(self, strategies, fractions) -> str:
        """Retention curves of re-embedding a fraction of the items chosen by each strategy; the best strategy's
        points as options. Returns that strategy."""
        from ..align.procrustes import FewPairsWarning
        from .scoring import hub_penalty

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FewPairsWarning)
            mapped_fit = self.clustered.transform(self.X_fit)
        scores = reliability_scores(self.X_eval, self.M_c, self.X_fit, self.Y_fit,
                                    anchor_residuals(mapped_fit, self.Y_fit), query_log=self.query_log,
                                    random_state=self.random_state)
        pen_native = hub_penalty(self.Y_eval, self.ref, self.hub_k)
        curve = {}
        for strat in [s for s in strategies if s in scores]:
            pts = []
            for f in fractions:
                sel = select(scores[strat], f)
                D = self.M_c.copy()
                D[sel] = self.Y_eval[sel]
                pen = self.pen_c.copy()
                pen[sel] = pen_native[sel]
                pts.append(recall(relevant_ranks(self.Q_new, D, self.rel, penalty=pen, weight=self.hub_weight),
                                  self.k) / self.native)
            curve[strat] = pts
        self.curves["reembed"] = {"fractions": list(fractions), "first_stage": self.BEST, "retention": curve}
        best = max((s for s in curve if s != "random"), key=lambda s: np.mean(curve[s]), default="random")
        for f, r in zip(fractions, curve[best]):
            self.options.append(Option(name=f"{self.BEST} + re-embed {f:.0%} ({best})", retention=r,
                                       recall=r * self.native, reembed_fraction=f, needs_texts=True,
                                       one_off_s_per_item=self.t_c + self.t_hub, **self.hub_kw,
                                       details={"strategy": best}))
        return best

    def rerank(self, rerank_k) -> None:
        """Re-ranking the best first stage's top K candidates with the new model's vectors, for each K."""
        rr = {}
        for K in rerank_k:
            t0 = time.perf_counter()
            r, cover = rerank_recall(self.Q_new, self.M_c, self.Y_eval, self.rel, K, self.k, penalty=self.pen_c,
                                     weight=self.hub_weight)
            dt = (time.perf_counter() - t0) / len(self.rel)
            rr[K] = {"retention": r / self.native, "candidates_covered": cover}
            self.options.append(Option(name=f"{self.BEST} + re-rank top {K}", retention=r / self.native, recall=r,
                                       rerank_k=K, needs_texts=True, one_off_s_per_item=self.t_c + self.t_hub,
                                       query_s=dt, **self.hub_kw, details={"candidates_covered": cover}))
        self.curves["rerank"] = rr


def measure_options_split(X, Y, Q_new, relevant, *, eval_fraction: float = 0.5, random_state=0, **kw) -> dict:
    """:func:`measure_options` on one collection's pairs: a seeded split into fit and evaluation parts; queries
    count only when their relevant item is in the evaluation part (``relevant`` indexes rows of X)."""
    X, Y = np.asarray(X), np.asarray(Y)
    n = len(X)
    if n < 100:
        raise InputError(f"only {n} pairs: at least 100 are needed to measure options")
    perm = np.random.default_rng(random_state).permutation(n)
    n_eval = int(math.ceil(n * eval_fraction))
    ev, fit = np.sort(perm[:n_eval]), np.sort(perm[n_eval:])
    where = np.full(n, -1)
    where[ev] = np.arange(len(ev))
    rel = where[np.asarray(relevant, dtype=np.int64)]
    keep = rel >= 0
    if keep.sum() < 10:
        raise InputError("fewer than 10 queries have their relevant item in the evaluation part")
    Q_old = kw.pop("Q_old", None)
    return measure_options(X[fit], Y[fit], X[ev], Y[ev], np.asarray(Q_new)[keep], rel[keep],
                           Q_old=None if Q_old is None else np.asarray(Q_old)[keep], random_state=random_state, **kw)
