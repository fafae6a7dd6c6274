"""Measures of a compatibility report on pairs already in hand (numpy in, result sections out):
the held-out split, the fitted maps' quality, the retention and top-1 curves carried to the collection's size,
the learning curve and the options that keep more quality. Finding the pairs is the report job's part.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import metrics
from ..align.procrustes import FewPairsWarning, OrthogonalProcrustes
from ..errors import InputError
from ..results import (
    CorrespondenceSummary,
    CostAssumptions,
    FitDiagnostics,
    HeldOutQuality,
    LearningCurve,
    QualityOptions,
    Recommendation,
    ReembedCurve,
    RerankPoint,
    Top1Curve,
    UnsupervisedRetrieval,
)
from ..validation import check_paired
from .at_size import recall_from_ranks, sampling_margin
from .options import ORTHO_OPTION
from .verdict import ruled_out

#: the fewest correspondences a report works on
MIN_PAIRS = 50
#: folds of the training rows each compared through a map fitted on the others (:func:`fold_maps`): many, so
#: that a fold's map is nearly as good as the judged one
OUT_OF_SAMPLE_FOLDS = 20


@dataclass
class Correspondences:
    mode: str
    reason: str
    X: np.ndarray          # old-space vectors
    Y: np.ndarray          # new-space vectors
    ids: list              # old ids (the held-out split is drawn over these)
    pseudo: bool = False   # True when Y are estimated partners (unsupervised), not the same items
    diagnostics: dict | None = None
    new_ids: list | None = None   # ids of the Y rows in the new collection (None: re-embedded, no record)
    refine: Callable | None = None   # rows -> the pairs a map of those pairs is fitted on (grown links: refined)
    sample_map: tuple | None = None  # pseudo-pairs: (the source sample, the map a fit saves from it)


def retention_curve(Qn, mapped, native, rel, k, rng, full_size, like_ranks=None, at_size=None) -> dict:
    """Retention@k over the whole held-out pool and over random sub-pools (measured), and predicted at
    ``full_size`` documents: Recall@k of the mapped and of the native vectors each carried to that size from the
    relevant documents' ranks in the whole pool (:func:`vecbridge.quality.at_size.recall_from_ranks`), their ratio.
    ``like_ranks``: the relevant documents' ranks among the pool's mapped documents compared as the unseen ones
    will be (:func:`out_of_sample_ranks`; default: among ``mapped``), which counts as it is. ``at_size``: the
    mapped and native Recall@k already predicted at ``full_size`` (:func:`retention_at_size`), used instead.

    A (sub-)pool whose native recall is below the floor of :func:`vecbridge.metrics.retention_ratio` gives no point;
    when the whole pool is one of them, or the native recall predicted at ``full_size`` is, ``measured`` and
    ``predicted`` are None and ``unreliable`` says why."""
    m = len(mapped)
    sizes = sorted({max(k * 5, int(m * f)) for f in (0.25, 0.5, 1.0) if int(m * f) >= k * 5})
    points, why = [], None
    for size in sizes:
        vals = []
        for _ in range(3 if size < m else 1):
            keep = np.sort(rng.choice(m, size, replace=False)) if size < m else np.arange(m)
            inpool = np.isin(rel, keep)
            where = {j: i for i, j in enumerate(keep)}
            r = np.array([where[j] for j in rel[inpool]])
            res = metrics.recall_retention(Qn[inpool], mapped[keep], native[keep], r, k=k)
            if res["retention"] is None:
                why = res["unreliable"]
                continue
            vals.append((res["retention"], res["recall_mapped"], res["recall_native"]))
        if vals:
            points.append((size, *np.mean(vals, axis=0)))
    out = {"pool_sizes": [float(p[0]) for p in points], "retention": [float(p[1]) for p in points],
           "recall_mapped": [float(p[2]) for p in points], "recall_native": [float(p[3]) for p in points],
           "full_size": int(full_size), "pool": int(m)}
    if not points or points[-1][0] != m:
        out.update(measured=None, predicted=None, unreliable=why)
        return out
    if at_size is None:
        seen = metrics.partner_ranks(Qn, mapped, rel)
        at_size = (recall_from_ranks(seen if like_ranks is None else like_ranks, m, full_size, k,
                                     seen_ranks=None if like_ranks is None else seen),
                   recall_from_ranks(metrics.partner_ranks(Qn, native, rel), m, full_size, k))
    predicted, why = metrics.retention_ratio(*at_size, k=k)
    if predicted is None:
        out.update(measured=None, predicted=None, unreliable=f"{why}, predicted among the collection's "
                                                             f"{int(full_size):,} documents")
        return out
    out.update(measured=out["retention"][-1], predicted=float(predicted))
    return out


def retention_at_size(sp: "PairSplit", Qn, rel, Q_train=None, train_rel=None, *, k: int, full_size: int
                      ) -> tuple[float, float]:
    """Recall@k of the mapped and of the native vectors predicted over the collection's ``full_size`` documents for
    all of its new-model queries, as the collection will hold them after migrating it with the judged map:
    ``(mapped, native)``. ``Qn``/``rel``: the held-out queries and their pool rows; ``Q_train``/``train_rel``: the
    queries of the training documents (pool rows >= the held-out count), if any.

    Native: every query's rank among the pool's new vectors (:func:`recall_from_ranks`). Mapped, two kinds of
    query, weighted as in the collection (the sample's share of training documents' queries times
    ``m / full_size``): those of the documents the map was fitted on, retrieved better (it lands close to
    them; 16-40% of the queries in bench/report_calibration.py, where all queries are measured), each one's
    in-sample rank with the unseen records stood for by the held-out rows and by each other fold's rows under that
    fold's map (:func:`fold_maps`); and those of the documents it never saw, from the held-out queries'
    out-of-sample ranks (:func:`out_of_sample_ranks`) -- only a few hundred, whose draw alone moves the figure by
    a few hundredths. So the training queries join them, each through its fold's map, which saw neither its
    document nor its fold: among fewer stand-ins (the held-out rows and the fold), so carried further and a
    little high; the held-out queries ranked the same way measure that shift, which is taken off (a control
    variate) for the unseen documents that are not held out."""
    from ..numeric.ranking import ranks_of
    from .at_size import fitted_prior, hit_probability

    m, n_held, N = len(sp.pool_order), len(sp.held), int(full_size)
    n_train = m - n_held
    Xp = sp.X[sp.pool_order]
    judged = sp.judged.transform(Xp)
    Qn, rel = np.asarray(Qn, np.float32), np.asarray(rel, np.int64)
    Qt = np.zeros((0, Qn.shape[1]), np.float32) if Q_train is None else np.asarray(Q_train, np.float32)
    tr = np.zeros(0, np.int64) if train_rel is None else np.asarray(train_rel, np.int64)
    native = recall_from_ranks(metrics.partner_ranks(np.concatenate([Qn, Qt]), sp.Y[sp.pool_order],
                                                     np.concatenate([rel, tr])), m, N, k)
    held = recall_from_ranks(out_of_sample_ranks(sp, Qn, rel), m, N, k,
                             seen_ranks=metrics.partner_ranks(Qn, judged, rel))
    if not len(tr):
        return held, native

    def unit(A):
        return metrics.prepare_vectors(A, "cosine")

    Qh_u, Qt_u, J_u = unit(Qn), unit(Qt), unit(judged)
    # training queries in sample: above among the held-out rows and, per fold, that fold's rows under its map
    true_t = np.einsum("ij,ij->i", Qt_u, J_u[tr])
    above_t = (Qt_u @ J_u[:n_held].T >= true_t[:, None]).sum(axis=1)
    n_t = np.full(len(tr), n_held)
    short = {"above": [], "n": [], "seen": [], "held": []}      # every query ranked through one fold map
    folds = sp.folds or []
    for f, (part, fitted) in enumerate(folds):
        F_u = unit(fitted.transform(Xp))
        rows = n_held + part
        mine = np.isin(tr, rows)
        other = ~mine
        st = np.einsum("ij,ij->i", Qt_u[other], F_u[tr[other]])
        above_t[other] += (Qt_u[other] @ F_u[rows].T >= st[:, None]).sum(axis=1)
        n_t[other] += len(part)
        hsel = np.arange(f, len(rel), len(folds))
        cand = np.concatenate([np.arange(n_held), rows])
        where = np.full(m, -1)
        where[cand] = np.arange(len(cand))
        S = np.concatenate([Qh_u[hsel], Qt_u[mine]]) @ F_u.T
        r = np.concatenate([rel[hsel], tr[mine]])
        short["seen"].append(ranks_of(S, r) - 1)
        short["above"].append(ranks_of(S[:, cand], where[r]) - 1)
        short["n"].append(np.full(len(r), len(cand) - 1))
        short["held"].append(np.arange(len(r)) < len(hsel))
    trained = float(np.mean(hit_probability(above_t, n_t, N, k, above_seen=metrics.partner_ranks(Qt, judged, tr) - 1,
                                            seen=m, prior=fitted_prior(above_t, n_t))))
    unseen = held
    if folds and N > m:
        a, n, seen, is_held = (np.concatenate(v) for v in short.values())
        b = hit_probability(a, n, N, k, above_seen=seen, seen=m, prior=fitted_prior(a, n))
        if is_held.any():
            unseen = held + (float(np.mean(b)) - float(np.mean(b[is_held]))) * (N - m) / max(N - n_train, 1)
    # the collection's queries of training documents: those of the sample, one in m / N of the collection's
    share = min(len(tr) / (len(tr) + len(rel)) * m / N, 1.0)
    return float(np.clip((1 - share) * unseen + share * trained, 0.0, 1.0)), native


def pool_top1_curve(mapped_held, Y_pool, top1_held: float, rng) -> dict:
    """Held-out top-1 as the candidate pool grows: among the held-out items alone (the reported figure), then with
    the other sampled items' new vectors added as distractors (``Y_pool`` holds the held-out rows first)."""
    n_held, n = len(mapped_held), len(Y_pool)
    points = [(n_held, float(top1_held))]
    for size in sorted({n // 2, n}):
        if size <= n_held:
            continue
        vals = []
        for _ in range(3 if size < n else 1):
            extra = np.arange(n_held, n) if size == n else \
                np.sort(rng.choice(np.arange(n_held, n), size - n_held, replace=False))
            cand = np.concatenate([np.arange(n_held), extra])
            ranks = metrics.partner_ranks(mapped_held, Y_pool[cand], np.arange(n_held))
            vals.append(float(np.mean(ranks == 1)))
        points.append((size, float(np.mean(vals))))
    return {"pool_sizes": [int(p[0]) for p in points], "top1": [p[1] for p in points]}


def unsupervised_retrieval(Qn, mapped, rel, *, k: int, full_size: int) -> UnsupervisedRetrieval:
    """Recall@k of new-model queries over a uniform sample of the collection under the map a fit saves (``rel``:
    each query's relevant row of ``mapped``), and carried to the collection's ``full_size`` records
    (:func:`recall_from_ranks`). The map was fitted on no pair of a query's document, so every rank counts as is:
    no held-out split, and the pool is the whole sample, not only the records that found a mutual partner (fewer
    distractors still)."""
    ranks = metrics.partner_ranks(Qn, mapped, rel)
    return UnsupervisedRetrieval(k=k, n_queries=len(rel), pool=len(mapped), recall_mapped=float(np.mean(ranks <= k)),
                                 predicted=recall_from_ranks(ranks, len(mapped), full_size, k),
                                 full_size=int(full_size))


def top1_at_size(sp: "PairSplit", full_size: int) -> float:
    """Held-out top-1 predicted among the collection's ``full_size`` items: each held-out item's rank among every
    sampled item's new vector carried to that size (:func:`vecbridge.quality.at_size.recall_from_ranks`, k=1), the
    training items compared as the unseen items will be (:func:`_out_of_sample`)."""
    X, Y, held = sp.X, sp.Y, sp.held
    n_held = np.arange(len(held))

    def rank(fitted, part):
        cand = Y[held] if part is None else np.concatenate([Y[held], Y[sp.train[part]]])
        return metrics.partner_ranks(fitted.transform(X[held]), cand, n_held)

    seen = metrics.partner_ranks(sp.mapped_held, Y[sp.pool_order], n_held)
    return recall_from_ranks(_out_of_sample(sp, rank), len(sp.pool_order), full_size, k=1, seen_ranks=seen)


def out_of_sample_ranks(sp: "PairSplit", Qn, rel) -> np.ndarray:
    """Each query's relevant document's 1-based rank among the pool's mapped documents (``rel``: its pool row, a
    held-out one) compared as the collection's unseen documents will be (:func:`_out_of_sample`)."""
    X, held = sp.X, sp.held

    def rank(fitted, part):
        rows = X[held] if part is None else np.concatenate([X[held], X[sp.train[part]]])
        return metrics.partner_ranks(Qn, fitted.transform(rows), rel)

    return _out_of_sample(sp, rank)


def _out_of_sample(sp: "PairSplit", rank) -> np.ndarray:
    """Ranks among the pool where no comparison involves a pair the map was fitted on: among the held-out rows
    under the judged map, plus, per fold of the training rows, those that outrank under the map fitted without
    that fold (:func:`fold_maps`), both sides mapped by it. ``rank(fitted, part)``: ranks among the held-out rows
    and the training rows ``part`` (None: the held-out rows alone) as ``fitted`` maps them.

    A map lands closer to the pairs it was fitted on, so the training rows (a large share of the pool, a small
    one of the collection) outrank more often than the unseen records they stand for; the records of the
    collection that are training rows count as they are, through the ranks among the pool as it is."""
    out = rank(sp.judged, None)
    for part, fitted in sp.folds or []:
        out = out + rank(fitted, part) - rank(fitted, None)
    return out


@dataclass
class PairSplit:
    """The correspondences as float32 (``X`` old, ``Y`` new), cut into held-out and training rows. The retrieval
    pool is every sampled pair (held-out first, so that row i of the pool is held-out item i), the closest stand-in
    for the whole collection: retention, top-1 beyond the held-out items and the options use it. ``rng`` drew the
    split and draws the sub-pools of the retention curve, in that order."""

    X: np.ndarray
    Y: np.ndarray
    held: np.ndarray
    train: np.ndarray
    pool_order: np.ndarray
    rng: np.random.Generator
    judged: object = None           # the user's method fitted on the training rows
    mapped_held: np.ndarray | None = None
    folds: list | None = None       # (rows of train, the user's method fitted on the others): fold_maps


def split_pairs(corr: Correspondences, holdout: float, seed: int) -> PairSplit:
    n = len(corr.X)
    if n < MIN_PAIRS:
        raise InputError(f"only {n} correspondences: at least {MIN_PAIRS} are needed for a report")
    # a NaN, inf or zero vector: name the record, not a row of this sample
    check_paired(corr.X, corr.Y, names=("old collection", "new collection" if corr.new_ids is not None else
                                        "re-embedded text of"), ids=(corr.ids, corr.new_ids or corr.ids))
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    n_held = max(int(round(n * holdout)), min(200, n // 2))
    held, train = perm[:n_held], perm[n_held:]
    return PairSplit(corr.X.astype(np.float32), corr.Y.astype(np.float32), held, train, np.concatenate([held, train]),
                  rng)


def held_out_sections(sp: PairSplit, corr: Correspondences, chosen, *, center: bool, seed: int,
                       full_size: int) -> dict:
    """Fit the user's method (and an orthogonal map, for the Procrustes diagnostics) on the training rows (grown
    links: on the pairs a fit refines them into, ``corr.refine``); the ``correspondences``, ``held_out`` and ``fit``
    sections. Keeps the fitted map and the mapped held-out rows in ``sp``."""
    X, Y, held, train = sp.X, sp.Y, sp.held, sp.train
    fit_x, fit_y, refinement = X[train], Y[train], None
    if corr.refine is not None:
        A, B, record = corr.refine(train)
        fit_x, fit_y = A.vectors.astype(np.float32), B.vectors.astype(np.float32)
        refinement = {k: record[k] for k in ("links", "pairs", "kept", "why") if k in record}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewPairsWarning)
        est = OrthogonalProcrustes(center=center).fit(fit_x, fit_y)
        sp.judged = est if chosen.name == "orthogonal" else chosen.build(center=center, seed=seed).fit(fit_x, fit_y)
        # orthogonal fold maps for every method: 20 SVDs, where 20 fits of a costlier method (clustered maps)
        # made a report 30x slower; they only count how often training rows outrank, as unseen records would
        sp.folds = fold_maps(sp, lambda: OrthogonalProcrustes(center=center))
    sp.mapped_held = mapped_held = sp.judged.transform(X[held])
    pq = metrics.pair_quality(mapped_held, Y[held])
    cos = np.einsum("ij,ij->i", metrics.prepare_vectors(mapped_held, "cosine"),
                    metrics.prepare_vectors(Y[held], "cosine"))
    held_resid = float(np.mean(np.sum((mapped_held - Y[held]) ** 2, axis=1)))
    top1_curve = pool_top1_curve(mapped_held, Y[sp.pool_order], pq.top1, np.random.default_rng(seed + 1))
    top1_predicted = top1_at_size(sp, full_size)
    return {
        "correspondences": CorrespondenceSummary(mode=corr.mode, reason=corr.reason, n=len(corr.X), train=len(train),
                                                 held_out=len(held), pseudo=corr.pseudo, refinement=refinement,
                                                 **(corr.diagnostics or {})),
        # top-1 and mean rank are among the held-out items only ("pool"); top1_predicted carries each one's rank
        # among every sampled item to the collection's size ("full_size"), as retention is
        "held_out": HeldOutQuality(**pq.as_dict(), pool=len(held), residual=held_resid,
                                   cosine_histogram=np.histogram(cos, bins=20, range=(-1, 1))[0].tolist(),
                                   top1_curve=Top1Curve(pool_sizes=top1_curve["pool_sizes"], top1=top1_curve["top1"]),
                                   top1_predicted=top1_predicted, full_size=int(full_size),
                                   top1_margin=sampling_margin(top1_predicted, len(held))),
        "fit": FitDiagnostics(residual=est.residual_, relative_residual=est.relative_residual_, delta=est.delta_,
                              bound=est.bound_, bound_vacuous=bool(est.bound_ >= 4 * np.mean(np.sum(Y ** 2, axis=1))),
                              singular_values=est.singular_values_.tolist(), center=center),
    }


def fold_maps(sp: PairSplit, build, folds: int = OUT_OF_SAMPLE_FOLDS) -> list:
    """``(part, map)`` per fold of the training rows: ``part`` indexes ``sp.train``, ``map`` is ``build()`` fitted on
    the other training rows, so that it maps and compares those rows as the judged map will the collection's
    unseen records."""
    out, n = [], len(sp.train)
    for part in np.array_split(np.arange(n), folds):
        rest = np.setdiff1d(np.arange(n), part)
        if len(part) and len(rest) >= 2:
            out.append((part, build().fit(sp.X[sp.train[rest]], sp.Y[sp.train[rest]])))
    return out


def learning_curve(sp: PairSplit, qb, rel, *, k: int, center: bool) -> LearningCurve:
    """Held-out quality over the number of anchors (one orthogonal fit per size)."""
    X, Y, held, train = sp.X, sp.Y, sp.held, sp.train
    sizes = [s for s in (25, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000) if s < len(train)] + [len(train)]
    curve = LearningCurve(n_anchors=[], top1=[], pool=len(held), retention=[] if qb is not None else None)
    for s in sizes:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FewPairsWarning)
            mapped_s = OrthogonalProcrustes(center=center).fit(X[train[:s]], Y[train[:s]]).transform(X[held])
        curve.n_anchors.append(int(s))
        curve.top1.append(metrics.pair_quality(mapped_s, Y[held]).top1)
        if qb is not None:   # None where the native recall is too low for the ratio to mean anything
            curve.retention.append(metrics.recall_retention(qb.vectors, mapped_s, Y[held], rel, k=k)["retention"])
    return curve


def _to_collection_size(r: float, r_ortho: float, predicted: float) -> float:
    """Carry an option's retention measured on the report's pool to the collection's size the way the headline was.

    The plain map's loss ``1 - r`` grows from ``1 - r_ortho`` (measured) to ``1 - predicted`` (at size); every
    option's loss is scaled by the same factor, so the plain map lands exactly on the headline and an option that
    loses nothing (a full re-embed) stays at 1. When the plain map loses nothing on the pool (or beats the native
    re-embed) no factor exists, and the headline's shift is added instead."""
    if r_ortho >= 1.0 - 1e-12:
        return max(0.0, r + (predicted - r_ortho))
    return max(0.0, 1.0 - (1.0 - r) * (1.0 - predicted) / (1.0 - r_ortho))


def options_section(report, X_fit, Y_fit, X_pool, Y_pool, qb, rel, Q_old, *, k, n_items, target, seed,
                     center) -> QualityOptions:
    """The options that keep more quality, measured on the same pool as the headline retention (every sampled item;
    queries of the held-out ones) with the same map, carried to the collection's size as the headline is, and the
    cheapest one that meets ``target`` -- never one the verdict rules out (:func:`ruled_out`).
    ``Q_old``: the old-model vectors of all of ``qb``'s queries (dual-query fusion), or None."""
    from dataclasses import replace

    from .options import CostModel, measure_options, recommend

    ret = report["retrieval"]
    m = measure_options(X_fit, Y_fit, X_pool, Y_pool, qb.vectors, rel, Q_old=Q_old, k=k, random_state=seed,
                        center=center)
    r_ortho = next(o.retention for o in m["options"] if o.name == ORTHO_OPTION)
    predicted = ret["predicted"]

    def carry(r):
        return _to_collection_size(r, r_ortho, predicted)

    opts = [o if o.reembed_fraction >= 1.0 else
            replace(o, retention=carry(o.retention), details={**o.details, "retention_measured": o.retention})
            for o in m["options"]]
    cost = CostModel(n_items=int(n_items))
    excluded = ruled_out(report, opts, k)
    rec = recommend(opts, target=target, model=cost, exclude=excluded)
    if excluded:
        v = report["verdict"]
        rec["verdict_note"] = (f"the verdict is {v['verdict']} for the plain orthogonal map, so it is not recommended; "
                               f"{len(excluded)} option(s) ruled out with it")
        rec["reason"] = (f"the plain orthogonal map is {v['verdict']} (see the verdict); instead, " + rec["reason"])
    rc = m["curves"]["reembed"]
    reembed = ReembedCurve(fractions=rc["fractions"], first_stage=rc["first_stage"],
                           retention={s: [carry(r) for r in ys] for s, ys in rc["retention"].items()},
                           retention_measured=rc["retention"])
    rerank = {str(K): RerankPoint(**{**v, "retention": carry(v["retention"]), "retention_measured": v["retention"]})
              for K, v in m["curves"]["rerank"].items()}
    return QualityOptions(
        target=target, native_recall=m["native_recall"], n_eval=m["n_eval"], pool=m["n_eval"],
        full_size=int(n_items), n_queries=m["n_queries"],
        size_note=(f"measured among the {m['n_eval']:,} sampled items (the headline's pool) and carried to the "
                   f"collection's {int(n_items):,} items as the headline is"
                   if n_items > m["n_eval"] else f"measured among all {m['n_eval']:,} items"),
        reembed_curve=reembed, rerank=rerank,
        cost_model=CostAssumptions(n_items=cost.n_items, n_queries=cost.n_queries, encode_item_s=cost.encode_item_s,
                                   encode_query_old_s=cost.encode_query_old_s),
        recommendation=Recommendation.from_dict(rec))

