"""Dry-run compatibility report: will this upgrade work, and how much retrieval quality is kept?

Nothing is written to any store. The report

1. samples both collections and finds correspondences with the best mode available, saying which and why:
   a payload key (``key``), shared ids, a re-embedded sample of stored texts (``model`` + ``text_field``), seed pairs
   grown by GEH (``seeds``), or none at all (unsupervised mini-vec2vec: its pseudo-pairs are the map's own mutual
   nearest neighbours, so "held-out" agreement with them is not evidence of quality; the report then measures only
   what needs no true pairs -- Recall@k of new-model queries over the mapped old vectors, and against staying on
   the old model -- and never says GO);
2. fits orthogonal Procrustes on a training split and measures the held-out split: top-1 and mean rank of the true
   partner among the held-out items (the pool is stated with every figure, and top-1 is also extrapolated to the
   collection's size the way retention is, below), mean cosine, held-out residual, the residual against the
   Procrustes bound ("When Embedding Models Meet: Procrustes Bounds and Applications", 2025) and the singular-value
   spectrum, and how quality grows with the number of anchors;
3. with new-model queries (vectors whose id is their relevant document's id) measures recall retention@k of the
   held-out documents within the pool of every sampled item, extrapolated to the size of the whole collection
   (Recall@k falls as a collection grows; the ratio much less, but the report fits ``retention = a + b log(pool
   size)`` over sub-pools and predicts the full size); with old-model queries too, the three-way comparison: stay on
   A, mapped upgrade, full re-embed. A ratio over a native recall below :data:`vecbridge.metrics.MIN_NATIVE_RECALL`
   is reported as unreliable, not as a figure;
4. gives a verdict (GO / CAUTION / NO-GO) from :data:`THRESHOLDS`, with the reason in one sentence;
5. measures the options that keep more quality (:mod:`vecbridge.quality.options`) on the same pool as the headline and
   carries them to the collection's size the same way, so the plain orthogonal option *is* the headline figure; it
   recommends the cheapest that meets the target, never one the verdict has ruled out, and says so when the verdict
   is NO-GO.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import metrics
from ..align.methods import method as method_of
from ..align.procrustes import FewPairsWarning, OrthogonalProcrustes
from ..connectors.base import Collection
from ..errors import InputError
from ..linking.pairspec import PairSpec
from ..pairing.pairs import pairs_by_field
from ..results import (
    CorrespondenceSummary,
    CostAssumptions,
    FitDiagnostics,
    HeldOutQuality,
    LearningCurve,
    NeighbourhoodOverlap,
    QualityOptions,
    Recommendation,
    ReembedCurve,
    Report,
    ReportRetrieval,
    RerankPoint,
    ThreeWay,
    Thresholds,
    Top1Curve,
    UnsupervisedRetrieval,
    Verdict,
)
from ..runtime.engine import engine_of
from ..runtime.open import open_collection
from ..validation import check_paired

#: verdict thresholds (documented in the README): GO needs all of the "go" ones; NO-GO any of the "no_go" ones.
#: Top-1 is the measured one, among the held-out items (``held_out["pool"]``); its extrapolation to the collection's
#: size is reported beside it but does not move the verdict.
THRESHOLDS = {
    "go_top1": 0.95,            # held-out top-1 of the true partner (among the held-out items)
    "go_retention": 0.90,       # predicted recall retention@k
    "no_go_top1": 0.50,
    "no_go_retention": 0.70,
    "worse_than_staying": 0.0,  # mapped recall below staying on A by more than this -> NO-GO
}
MIN_PAIRS = 50
#: the plain map's name among the options (:func:`vecbridge.quality.options.measure_options`)
ORTHO_OPTION = "orthogonal (one global Q)"


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


def _by_ids(old: Collection, new: Collection, sample: int, seed: int):
    s = old.sample(sample, seed=seed)
    t = new.get(list(s.ids))
    pos = {i: j for j, i in enumerate(t.ids)}
    rows = [j for j, i in enumerate(s.ids) if i in pos]
    return s, t, rows, pos


#: the pairings a report can use (see :class:`~vecbridge.linking.PairSpec`)
REPORT_PAIRS = ("ids", "field", "reembed", "geh", "unsupervised")


def _field_correspondences(old, new, key, sample, seed) -> Correspondences | None:
    parts = list(pairs_by_field(old, new, key, limit=sample, seed=seed))
    if not parts:
        return None
    X = np.concatenate([a.vectors for a, _ in parts])
    Y = np.concatenate([b.vectors for _, b in parts])
    return Correspondences("payload-key", f"{len(X):,} sampled records share payload field {key!r}", X, Y,
                           [i for a, _ in parts for i in a.ids], new_ids=[i for _, b in parts for i in b.ids])


def _id_correspondences(old, new, sample, seed) -> Correspondences | None:
    s, t, rows, pos = _by_ids(old, new, sample, seed)
    if len(rows) < MIN_PAIRS:
        return None
    return Correspondences("shared-ids", f"{len(rows):,} of {len(s):,} sampled old ids also exist in the new "
                           f"collection", s.vectors[rows], t.vectors[[pos[s.ids[j]] for j in rows]],
                           [s.ids[j] for j in rows], new_ids=[s.ids[j] for j in rows])


def _reembedded_correspondences(old, model, text_field, sample, seed) -> Correspondences:
    from ..pairing.reembed import reembed_pairs
    from ..runtime.models import load_model

    olds, news = reembed_pairs(old, load_model(model), text_field=text_field, n=sample, seed=seed)
    return Correspondences("re-embedded-sample", f"{len(olds):,} stored texts ({text_field!r}) re-embedded with "
                           f"{model}", olds.vectors, news, list(olds.ids))


def find_correspondences(old: Collection, new: Collection | None, *, sample: int = 5000, seed: int = 0,
                         pairs: "str | PairSpec | None" = None, key: str | None = None, model: str | None = None,
                         text_field: str | None = None, seeds: str | None = None, unsupervised: bool = True,
                         unsupervised_params: dict | None = None) -> Correspondences:
    """Pairs as ``pairs`` says (one of :data:`REPORT_PAIRS`); without it, the best available source of pairs in
    order of reliability: a payload ``key``, shared ids, a re-embedded sample with ``model``, GEH from ``seeds``,
    and unsupervised mini-vec2vec last (unless ``unsupervised`` is False)."""
    params = unsupervised_params or {}
    if pairs is not None:
        spec = PairSpec.parse(pairs, allowed=REPORT_PAIRS)
        if spec.kind == "reembed":
            if not (model and text_field):
                raise InputError("re-embedding needs the new model and the payload field that holds the text")
            return _reembedded_correspondences(old, model, text_field, sample, seed)
        if new is None:
            raise InputError(f"the pairing {str(spec)!r} needs the new collection")
        if spec.kind == "geh":
            return _geh_correspondences(old, new, spec.value, sample, seed)
        if spec.kind == "unsupervised":
            return _unsupervised_correspondences(old, new, sample, seed, params)
        found = (_field_correspondences(old, new, spec.value, sample, seed) if spec.kind == "field"
                 else _id_correspondences(old, new, sample, seed))
        if found is None:
            raise InputError(f"no correspondences by {spec.label} among {sample:,} sampled records")
        return found
    found = _field_correspondences(old, new, key, sample, seed) if key and new is not None else None
    if found is None and new is not None:
        found = _id_correspondences(old, new, sample, seed)
    if found is not None:
        return found
    return fallback_correspondences(old, new, sample=sample, seed=seed, model=model, text_field=text_field,
                                    seeds=seeds, unsupervised=unsupervised, unsupervised_params=params)


def fallback_correspondences(old: Collection, new: Collection | None, *, sample: int, seed: int,
                             model: str | None = None, text_field: str | None = None, seeds: str | None = None,
                             unsupervised: bool = True, unsupervised_params: dict | None = None) -> Correspondences:
    """The pairings :func:`find_correspondences` tries when the collections share no stored key (payload key, ids):
    a re-embedded sample, GEH from seeds, unsupervised mini-vec2vec; else a one-line error saying what to give."""
    params = unsupervised_params or {}
    if model and text_field:
        return _reembedded_correspondences(old, model, text_field, sample, seed)
    if seeds and new is not None:
        return _geh_correspondences(old, new, seeds, sample, seed)
    if unsupervised and new is not None:
        warnings.warn("the collections share no ids or payload key and no re-embedding model or seed pairs were "
                      "given: matching them without labels (mini-vec2vec), which takes minutes and may not succeed; "
                      "pass --pairs to say how records correspond", UserWarning, stacklevel=2)
        return _unsupervised_correspondences(old, new, sample, seed, params)
    raise InputError("no correspondences: the collections share no ids; say how records correspond "
                     "(field:NAME, reembed with a model and a text field, or geh:FILE of seed pairs)")


def _unsupervised_correspondences(old, new, sample, seed, params) -> Correspondences:
    """mini-vec2vec ("mini-vec2vec: Scaling Universal Geometry Alignment with Linear Transformations", Dar 2025) on
    a sample of each side, then the mutual nearest neighbours under its map."""
    from .link import ADVICE_UNSUPERVISED, check_map, pseudo_pairs, unsupervised_fit

    a, b, est = unsupervised_fit(old, new, sample=sample, seed=seed, params=params)
    # label-free validation (vecbridge.align.validation); a failure is the verdict's to report (NO-GO), not an error
    validation = check_map(est, old, new, a, b, seed=seed, force=True, what="the unsupervised alignment",
                           advice=ADVICE_UNSUPERVISED)
    pairs, scores = pseudo_pairs(est, a, b)
    frac = len(pairs) / max(min(len(a), len(b)), 1)
    diag = {"mutual_pairs": int(len(pairs)), "mutual_fraction": float(frac),
            "mean_csls": float(np.mean(scores)) if len(scores) else 0.0, "validation": validation}
    return Correspondences("unsupervised", f"no shared ids, texts or seeds; mini-vec2vec aligned {len(a):,} and "
                           f"{len(b):,} unpaired vectors and {len(pairs):,} mutual nearest neighbours "
                           f"({frac:.0%}) serve as pseudo-pairs", a.vectors[pairs[:, 0]], b.vectors[pairs[:, 1]],
                           [a.ids[i] for i in pairs[:, 0]], pseudo=True, diagnostics=diag,
                           new_ids=[b.ids[i] for i in pairs[:, 1]])


def _geh_correspondences(old, new, seeds, sample, seed) -> Correspondences:
    from .link import ADVICE_GEH, check_map, geh_fit, geh_map

    a, b, geh = geh_fit(old, new, seeds, sample=sample, seed=seed, force=True)   # judged below: NO-GO, not a crash
    links, n_seeds = geh.links_, int(geh.is_seed_.sum())
    if len(links) < MIN_PAIRS:
        raise InputError(f"GEH grew only {len(links)} links from {n_seeds} seeds: too few to fit a map")
    validation = check_map(geh_map(a, b, geh), old, new, a, b, seed=seed, force=True,
                           what="the map of the GEH links", advice=ADVICE_GEH)
    precision = getattr(geh, "estimated_precision_", None)
    how = (f"estimated precision {precision:.2f}" if precision is not None
           else f"mean confidence {float(np.mean(geh.confidence_)):.2f}")
    return Correspondences("geh", f"no shared ids; GEH grew {len(links):,} links from {n_seeds} seed pairs "
                           f"({how})", a.vectors[links[:, 0]],
                           b.vectors[links[:, 1]], [a.ids[i] for i in links[:, 0]],
                           new_ids=[b.ids[i] for i in links[:, 1]], diagnostics={"validation": validation})


def _log_pool_fit(sizes, values, full_size: int, hi: float = 1.0) -> float:
    """``a + b log(pool size)`` fitted over the measured pools, evaluated at ``full_size`` and clamped to [0, hi];
    the largest pool's value when there is nothing to extrapolate to."""
    sizes, values = np.asarray(sizes, float), np.asarray(values, float)
    if len(sizes) >= 2 and full_size > sizes[-1]:
        b, a = np.polyfit(np.log(sizes), values, 1)
        return float(np.clip(a + b * math.log(full_size), 0.0, hi))
    return float(values[-1])


def _retention_curve(Qn, mapped, native, rel, k, rng, full_size) -> dict:
    """Retention@k over the whole held-out pool and over random sub-pools; a log-linear fit predicts the
    retention at ``full_size`` documents (clamped to [0, 1]).

    A (sub-)pool whose native recall is below the floor of :func:`vecbridge.metrics.retention_ratio` gives no point;
    when the whole pool is one of them, ``measured`` and ``predicted`` are None and ``unreliable`` says why."""
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
    out.update(measured=out["retention"][-1],
               predicted=_log_pool_fit(out["pool_sizes"], out["retention"], full_size))
    return out


def _top1_curve(mapped_held, Y_pool, top1_held: float, rng, full_size: int) -> dict:
    """Held-out top-1 as the candidate pool grows: among the held-out items alone (the reported figure), then with
    the other sampled items' new vectors added as distractors (``Y_pool`` holds the held-out rows first); the same
    ``a + b log(pool size)`` fit as retention predicts it for ``full_size`` items (never above the largest pool's)."""
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
    sizes, vals = [p[0] for p in points], [p[1] for p in points]
    return {"pool_sizes": [int(x) for x in sizes], "top1": vals,
            "predicted": _log_pool_fit(sizes, vals, full_size, hi=vals[-1]), "full_size": int(full_size)}


def compatibility_report(old, new=None, *, sample: int = 5000, seed: int = 0, holdout: float = 0.2,
                         pairs: "str | PairSpec | None" = None, method: str = "orthogonal",
                         key: str | None = None, model: str | None = None, text_field: str | None = None,
                         seeds: str | None = None, queries_new=None, queries_old=None, k: int = 10,
                         center: bool = False, unsupervised: bool = True, unsupervised_params: dict | None = None,
                         options: bool = True, target_retention: float = 0.95, old_model_retired: bool = False,
                         on_step=lambda s: None, find_pairs: Callable | None = None, engine=None) -> Report:
    """Everything a user needs to decide on an upgrade, as a :class:`~vecbridge.results.Report` (see the module
    docstring); ``report.as_dict()`` is the JSON.

    ``pairs`` says how records correspond (see :func:`find_correspondences`); ``method`` is the alignment method the
    user will fit (:data:`vecbridge.align.methods.METHODS`): held-out quality and retrieval are measured with it,
    while the Procrustes diagnostics (residual, bound) and the learning curve come from an orthogonal fit.
    ``find_pairs`` gathers the correspondences: :func:`find_correspondences` (the default) or a function with its
    signature (:func:`vecbridge.jobs.distributed_reduce.report_on_ray` passes one that samples stored pairs on a Ray
    cluster)."""
    engine = engine_of(engine)
    if engine.name == "ray":  # temporary: the Ray twin, until this job runs its body through the engine seam
        from .distributed_reduce import report_on_ray

        return report_on_ray(old, new, workers=engine.workers, ray_address=engine.address,
                             ranges_per_worker=engine.units_per_worker, sample=sample, seed=seed, holdout=holdout,
                             pairs=pairs, method=method, key=key, model=model, text_field=text_field, seeds=seeds,
                             queries_new=queries_new, queries_old=queries_old, k=k, center=center,
                             unsupervised=unsupervised, unsupervised_params=unsupervised_params, options=options,
                             target_retention=target_retention, old_model_retired=old_model_retired, on_step=on_step)
    chosen = method_of(method)

    old_c = open_collection(old)
    new_c = open_collection(new) if new is not None else None
    old_info = old_c.info()
    if old_info.count == 0:
        raise InputError(f"collection is empty: {old_c.display_url}")
    on_step("finding correspondences")
    corr = (find_pairs or find_correspondences)(old_c, new_c, sample=sample, seed=seed, pairs=pairs, key=key,
                                                model=model, text_field=text_field, seeds=seeds,
                                                unsupervised=unsupervised, unsupervised_params=unsupervised_params)
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
    X, Y = corr.X.astype(np.float32), corr.Y.astype(np.float32)
    # the retrieval pool is every sampled pair (held-out first, so that row i of the pool is held-out item i), the
    # closest stand-in for the whole collection: retention, top-1 beyond the held-out items and the options use it
    pool_order = np.concatenate([held, train])

    on_step(f"fitting on {len(train):,} pairs, measuring on {len(held):,} held out")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewPairsWarning)
        est = OrthogonalProcrustes(center=center).fit(X[train], Y[train])
        judged = est if chosen.name == "orthogonal" else \
            chosen.build(center=center, seed=seed).fit(X[train], Y[train])
    mapped_held = judged.transform(X[held])
    pq = metrics.pair_quality(mapped_held, Y[held])
    cos = np.einsum("ij,ij->i", metrics.prepare_vectors(mapped_held, "cosine"),
                    metrics.prepare_vectors(Y[held], "cosine"))
    held_resid = float(np.mean(np.sum((mapped_held - Y[held]) ** 2, axis=1)))
    top1_curve = _top1_curve(mapped_held, Y[pool_order], pq.top1, np.random.default_rng(seed + 1), old_info.count)

    # the sections so far, by key: verdict() and advice() read them as they read a report; Report(**report) at the end
    report = {
        "old": old_c.display_url, "new": new_c.display_url if new_c else None, "method": chosen.name,
        "old_info": old_info.as_dict(), "new_info": new_c.info().as_dict() if new_c else None,
        "correspondences": CorrespondenceSummary(mode=corr.mode, reason=corr.reason, n=n, train=len(train),
                                                 held_out=len(held), pseudo=corr.pseudo, **(corr.diagnostics or {})),
        # top-1 and mean rank are among the held-out items only ("pool"); top1_predicted carries top-1 to the
        # collection's size ("full_size") with the same log-linear fit as retention
        "held_out": HeldOutQuality(**pq.as_dict(), pool=len(held), residual=held_resid,
                                   cosine_histogram=np.histogram(cos, bins=20, range=(-1, 1))[0].tolist(),
                                   top1_curve=Top1Curve(pool_sizes=top1_curve["pool_sizes"], top1=top1_curve["top1"]),
                                   top1_predicted=top1_curve["predicted"], full_size=top1_curve["full_size"]),
        "fit": FitDiagnostics(residual=est.residual_, relative_residual=est.relative_residual_, delta=est.delta_,
                              bound=est.bound_, bound_vacuous=bool(est.bound_ >= 4 * np.mean(np.sum(Y ** 2, axis=1))),
                              singular_values=est.singular_values_.tolist(), center=center),
        "thresholds": Thresholds(**THRESHOLDS),
    }

    # retrieval with queries: only queries whose relevant document is held out count
    held_ids = [corr.ids[i] for i in held]
    qb = rel = None
    if queries_new is not None:
        qn_c = open_collection(queries_new)
        qb = qn_c.get(held_ids)
        if len(qb) < 10:
            raise InputError(_too_few_queries(qn_c, qb, corr, held_ids))
        pos = {i: j for j, i in enumerate(held_ids)}
        rel = np.array([pos[i] for i in qb.ids])

    # learning curve over the number of anchors (one fit per size)
    on_step("learning curve")
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
    report["learning_curve"] = curve

    measure = None
    if qb is not None:
        pool_x = X[pool_order]
        mapped_pool = judged.transform(pool_x)
        both, Q_old = _old_queries(queries_old, qb)     # fetched once: three-way comparison and options
        if corr.pseudo:
            # pseudo-pairs: the partners are estimates, so no "native" pool exists; measure what needs no true pairs
            on_step("retrieval with new-model queries (mapped old vectors only)")
            report["retrieval_unsupervised"] = UnsupervisedRetrieval(
                k=k, n_queries=len(qb), pool=len(pool_order),
                recall_mapped=metrics.recall_at_k(qb.vectors, mapped_pool, rel, k))
        else:
            on_step("retrieval with new-model queries")
            report["retrieval"] = ReportRetrieval(**_retention_curve(qb.vectors, mapped_pool, Y[pool_order], rel, k,
                                                                     rng, old_info.count), k=k, n_queries=len(qb))
        if Q_old is not None:
            rel_b = rel[both]
            report["three_way"] = ThreeWay(
                stay_on_old_model=metrics.recall_at_k(Q_old, pool_x, rel_b, k),
                mapped_upgrade=metrics.recall_at_k(qb.vectors[both], mapped_pool, rel_b, k),
                full_re_embed=None if corr.pseudo else metrics.recall_at_k(qb.vectors[both], Y[pool_order], rel_b,
                                                                           k),
                n_queries=len(both), pool=len(pool_order), k=k)
        if options and not corr.pseudo and report["retrieval"].measured is not None:
            all_old = Q_old if Q_old is not None and len(both) == len(qb) else None
            measure = (X[train], Y[train], pool_x, Y[pool_order], qb, rel, all_old)
    else:
        # no queries: neighbourhood overlap, each held-out item's new vector as the query (itself excluded)
        ov = metrics.topk_overlap(Y[held], mapped_held, Y[held], k=k + 1)
        report["neighbourhood_overlap"] = NeighbourhoodOverlap(k=k, overlap=ov, pool=len(held))
    if old_model_retired:
        report["old_model_retired"] = True
    report["verdict"] = verdict(report)
    if measure is not None:   # after the verdict: the recommendation must not contradict it
        on_step("measuring the options that keep more quality (local maps, re-embedding, re-ranking)")
        report["options"] = _options_section(report, *measure, k=k, n_items=old_info.count,
                                             target=target_retention, seed=seed, center=center)
    report["advice"] = advice(report)
    return Report(**report)


def _too_few_queries(qn_c, qb, corr, held_ids) -> str:
    """Why fewer than 10 queries count, and what the queries need to be."""
    n_given = qn_c.info().count
    n_paired = len(qn_c.get(list(corr.ids)))
    shared = {"shared-ids": "items present in both collections (the same id in each)",
              "payload-key": "old-collection items whose payload key is found in the new collection",
              "re-embedded-sample": "the sampled old-collection items whose texts were re-embedded",
              "geh": "old-collection items linked by GEH to the new collection"}.get(corr.mode, "linked items")
    return (f"only {len(qb)} of the {n_given:,} queries in {qn_c.display_url} have a held-out relevant document "
            f"(at least 10 are needed): a query's id must be the id of its relevant document in the old "
            f"collection, and that document must be one of the {len(corr.ids):,} sampled pairs, i.e. {shared}; "
            f"{n_paired:,} of the queries name one of those pairs and {len(qb)} one of the {len(held_ids):,} held "
            f"out. Give queries whose ids name documents present in both collections (the linked pairs), or sample "
            f"more (--sample)")


def _old_queries(queries_old, qb):
    """The old-model vectors of the queries in ``qb`` (same order): ``(rows of qb that have one, vectors)``, or
    ``(None, None)`` without old-model queries."""
    if queries_old is None:
        return None, None
    qa = open_collection(queries_old).get(list(qb.ids))
    pos = {i: j for j, i in enumerate(qa.ids)}
    both = np.array([j for j, i in enumerate(qb.ids) if i in pos], dtype=np.int64)
    return both, qa.vectors[[pos[qb.ids[j]] for j in both]]


def _to_collection_size(r: float, r_ortho: float, predicted: float) -> float:
    """Carry an option's retention measured on the report's pool to the collection's size the way the headline was.

    The plain map's loss ``1 - r`` grows from ``1 - r_ortho`` (measured) to ``1 - predicted`` (extrapolated); every
    option's loss is scaled by the same factor, so the plain map lands exactly on the headline and an option that
    loses nothing (a full re-embed) stays at 1. When the plain map loses nothing on the pool (or beats the native
    re-embed) no factor exists, and the headline's shift is added instead."""
    if r_ortho >= 1.0 - 1e-12:
        return max(0.0, r + (predicted - r_ortho))
    return max(0.0, 1.0 - (1.0 - r) * (1.0 - predicted) / (1.0 - r_ortho))


def _options_section(report, X_fit, Y_fit, X_pool, Y_pool, qb, rel, Q_old, *, k, n_items, target, seed,
                     center) -> QualityOptions:
    """The options that keep more quality, measured on the same pool as the headline retention (every sampled item;
    queries of the held-out ones) with the same map, carried to the collection's size as the headline is, and the
    cheapest one that meets ``target`` -- never one the verdict rules out (:func:`_ruled_out`).
    ``Q_old``: the old-model vectors of all of ``qb``'s queries (dual-query fusion), or None."""
    from dataclasses import replace

    from ..quality.options import CostModel, measure_options, recommend

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
    excluded = _ruled_out(report, opts, k)
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
                   f"collection's {int(n_items):,} items with the headline's extrapolation"
                   if n_items > m["n_eval"] else f"measured among all {m['n_eval']:,} items"),
        reembed_curve=reembed, rerank=rerank,
        cost_model=CostAssumptions(n_items=cost.n_items, n_queries=cost.n_queries, encode_item_s=cost.encode_item_s,
                                   encode_query_old_s=cost.encode_query_old_s),
        recommendation=Recommendation.from_dict(rec))


def _ruled_out(report: "Report | dict", options, k: int) -> dict:
    """Options the verdict rules out, with why: under NO-GO the plain orthogonal map itself, and (when the three-way
    comparison is what said NO-GO) every option short of a full re-embed that retrieves worse than staying on the old
    model."""
    v = report["verdict"]
    if v["verdict"] != "NO-GO":
        return {}
    out = {ORTHO_OPTION: "the verdict (NO-GO) is about this map"}
    three = report.get("three_way")
    if three:
        stay = three["stay_on_old_model"] - report["thresholds"]["worse_than_staying"]
        for o in options:
            if o.reembed_fraction < 1.0 and o.recall < stay and o.name not in out:
                out[o.name] = (f"Recall@{k} {o.recall:.3f} is below staying on the old model "
                               f"({three['stay_on_old_model']:.3f})")
    return out


def verdict(report: "Report | dict") -> Verdict:
    """GO / CAUTION / NO-GO with the reason in one sentence (``report``: a report's sections by key, typed or plain
    dicts, as far as they go)."""
    t = report["thresholds"]
    ho = report["held_out"]
    top1 = ho["top1"]
    retrieval = report.get("retrieval", {})
    retention = retrieval.get("predicted")
    pool = ho.get("pool")
    among = f" among {pool:,} held-out items" if pool else ""
    three = report.get("three_way")
    retired = bool(report.get("old_model_retired"))
    if retired and three and three["mapped_upgrade"] < three["stay_on_old_model"] - t["worse_than_staying"]:
        full = three.get("full_re_embed")
        return Verdict("CAUTION", (
            f"the old model is retired, so staying is not an option: new-model queries over the mapped vectors reach "
            f"Recall@{three.get('k', 10)} {three['mapped_upgrade']:.3f} (the old model gave "
            f"{three['stay_on_old_model']:.3f}" + (f"; a full re-embed gives {full:.3f}" if full is not None else "")
            + "): serve the mapped vectors now and re-embed in the background (vecbridge upgrade), or re-embed "
            "before switching"))
    if three and three["mapped_upgrade"] < three["stay_on_old_model"] - t["worse_than_staying"]:
        full = three.get("full_re_embed")
        return Verdict("NO-GO", (
            f"new-model queries over the mapped old vectors retrieve worse than staying on the old model "
            f"(Recall@{three.get('k', retrieval.get('k', 10))} {three['mapped_upgrade']:.3f} vs "
            f"{three['stay_on_old_model']:.3f}" + (f"; a full re-embed gives {full:.3f}" if full is not None else "")
            + (f", among {three['pool']:,} sampled items" if three.get("pool") else "")
            + "): keep the old model or re-embed"))
    validation = report.get("correspondences", {}).get("validation")
    if validation and not validation["passed"]:
        what = "unsupervised" if report["correspondences"].get("pseudo") else "seed-grown"
        return Verdict("NO-GO", (
            f"the {what} correspondences failed their label-free validation (score {validation['score']:.2f} < "
            f"{validation['threshold']:.2f}: {validation['reason']}), so every figure below is measured on likely "
            f"wrong pairs: give seed pairs (--seeds) or re-embed a sample (--model/--text-field)"))
    if report.get("correspondences", {}).get("pseudo"):
        c = report["correspondences"]
        ru = report.get("retrieval_unsupervised")
        got = (f"; new-model queries over the mapped vectors reach Recall@{ru['k']} {ru['recall_mapped']:.3f}"
               if ru else "")
        return Verdict("CAUTION", (
            f"the correspondences are unsupervised pseudo-pairs ({c['mutual_fraction']:.0%} of the sample found a "
            f"mutual partner){got}; retention against a re-embed cannot be measured without true pairs: give "
            f"--model/--text-field or --seeds to measure it"))
    if top1 < t["no_go_top1"]:
        pred, full = ho.get("top1_predicted"), ho.get("full_size")
        word = "measured" if ho.get("top1_curve", {}).get("pool_sizes", [0])[-1] >= (full or 0) else "predicted"
        extra = (f"; {word} {pred:.0%} among the collection's {full:,} items"
                 if pred is not None and full and pool and full > pool else "")
        return Verdict("NO-GO", f"only {top1:.0%} of held-out items find their own new vector "
                                f"(top-1{among} < {t['no_go_top1']:.0%}{extra}): the spaces do not "
                                f"align")
    if retrieval.get("unreliable") and retention is None:
        return Verdict("CAUTION", (
            f"held-out top-1 {top1:.3f}{among}, but recall retention@{retrieval.get('k', 10)} is "
            f"{retrieval['unreliable']}: the queries hardly find their relevant documents even among the new "
            f"collection's own vectors, so the ratio would mean nothing (are they new-model query vectors whose ids "
            f"name their relevant documents?)"))
    if retention is not None and retention < t["no_go_retention"]:
        return Verdict("NO-GO", f"predicted recall retention@{retrieval['k']} "
                                f"{retention:.3f} is below {t['no_go_retention']}")
    if top1 >= t["go_top1"] and retention is not None and retention >= t["go_retention"]:
        return Verdict("GO", f"held-out top-1 {top1:.3f}{among} and predicted retention "
                             f"{retention:.3f} meet the GO thresholds ({t['go_top1']}, "
                             f"{t['go_retention']})")
    if retention is None:
        return Verdict("CAUTION", f"held-out top-1 is {top1:.3f}{among}, but without new-model "
                                  f"queries the retrieval quality kept cannot be measured (give "
                                  f"--queries)")
    return Verdict("CAUTION", f"held-out top-1 {top1:.3f}{among}, predicted retention "
                              f"{retention:.3f}: usable, but below the GO thresholds "
                              f"({t['go_top1']}, {t['go_retention']})")


def advice(report: "Report | dict") -> list[str]:
    out = []
    opt = report.get("options")
    if opt:
        out.append(f"recommended option: {opt['recommendation']['reason']}")
    c = report["learning_curve"]
    key = "retention" if "retention" in c else "top1"
    last = [v for v in c[key][-2:] if v is not None]
    if len(c[key]) >= 2 and len(last) == 2 and last[1] - last[0] > 0.01:
        out.append(f"more anchors would help: {key} rose from {last[0]:.3f} to {last[1]:.3f} between "
                   f"{c['n_anchors'][-2]:,} and {c['n_anchors'][-1]:,} anchors")
    if report["fit"]["bound_vacuous"]:
        out.append("the worst-case Procrustes bound (When Embedding Models Meet: Procrustes Bounds and "
                   "Applications, 2025) is vacuous at this dimension; rely on the held-out numbers")
    return out
