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
from dataclasses import dataclass, replace

import numpy as np

from .. import metrics
from ..align.methods import method as method_of
from ..align.procrustes import FewPairsWarning, OrthogonalProcrustes
from ..connectors.base import Collection, CollectionInfo
from ..errors import InputError
from ..linking.pairspec import PairSpec
from ..pairing.table import MIN_PAIRS, PAIRINGS, Request, pairing
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
from ..runtime.engine import LOCAL, engine_of
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


#: the pairings a report can use (see :class:`~vecbridge.linking.PairSpec`)
REPORT_PAIRS = ("ids", "field", "reembed", "geh", "unsupervised")


def _correspond(spec: PairSpec, old: Collection, new: Collection | None, request: Request,
                engine) -> Correspondences | None:
    """The correspondences ``spec`` finds (:data:`vecbridge.pairing.table.PAIRINGS`), or None where a stored pairing
    finds too few of them (then the report looks further). Only the unsupervised pairing takes the estimator's
    parameters."""
    row = pairing(spec)
    found = row.sample(old, new, spec, request if row.pseudo else replace(request, params={}), engine)
    if len(found) < row.report_min:
        return None
    return Correspondences(row.report_mode, found.reason, found.source.vectors, found.target.vectors,
                           list(found.source.ids), pseudo=found.pseudo, diagnostics=found.diagnostics,
                           new_ids=list(found.target.ids) if found.records else None)


def _request(sample: int, seed: int, model, text_field, params) -> Request:
    """A report judges grown pairs itself (a failed validation is NO-GO, not an error): they are always kept."""
    return Request(n=sample, seed=seed, model=model, text_field=text_field, params=params or {}, force=True,
                   min_pairs=MIN_PAIRS)


def find_correspondences(old: Collection, new: Collection | None, *, sample: int = 5000, seed: int = 0,
                         pairs: "str | PairSpec | None" = None, key: str | None = None, model: str | None = None,
                         text_field: str | None = None, seeds: str | None = None, unsupervised: bool = True,
                         unsupervised_params: dict | None = None, engine=None) -> Correspondences:
    """Pairs as ``pairs`` says (one of :data:`REPORT_PAIRS`); without it, the best available source of pairs in
    order of reliability: a payload ``key``, shared ids, then :func:`fallback_correspondences`.

    On an engine spread over processes (``engine``, see :mod:`vecbridge.runtime.engine`) the stored pairs (payload
    key, ids) are a uniform sample of ``sample`` of all such pairs, drawn over every key range of ``old``
    (:mod:`vecbridge.pairing.sampling`); the other pairings work on a sample on this machine."""
    engine = engine_of(engine)
    request = _request(sample, seed, model, text_field, unsupervised_params)
    if pairs is not None:
        spec = PairSpec.parse(pairs, allowed=REPORT_PAIRS)
        if "target" in pairing(spec).needs and new is None:
            raise InputError(f"the pairing {str(spec)!r} needs the new collection")
        found = _correspond(spec, old, new, request, engine)
        if found is None:
            among = f"the {old.info().count:,} records" if engine.remote else f"{sample:,} sampled records"
            raise InputError(f"no correspondences by {spec.label} among {among}")
        return found
    stored = ([PairSpec("field", key)] if key else []) + [PairSpec("ids")]
    for spec in stored if new is not None else []:
        found = _correspond(spec, old, new, request, engine)
        if found is not None:
            return found
    corr = fallback_correspondences(old, new, sample=sample, seed=seed, model=model, text_field=text_field,
                                    seeds=seeds, unsupervised=unsupervised, unsupervised_params=unsupervised_params)
    if engine.remote:
        corr.reason = f"no stored key shared by the collections (Ray scanned them all), so on this machine: " \
                      f"{corr.reason}"
    return corr


def fallback_correspondences(old: Collection, new: Collection | None, *, sample: int, seed: int,
                             model: str | None = None, text_field: str | None = None, seeds: str | None = None,
                             unsupervised: bool = True, unsupervised_params: dict | None = None) -> Correspondences:
    """The pairings :func:`find_correspondences` tries when the collections share no stored key (payload key, ids),
    most reliable first, the first whose needs are given: a re-embedded sample (``model`` and ``text_field``), GEH
    from ``seeds``, unsupervised mini-vec2vec (unless ``unsupervised`` is False; it warns first); else a one-line
    error saying what to give."""
    request = _request(sample, seed, model, text_field, unsupervised_params)
    for spec in (PairSpec("reembed"), PairSpec("geh", seeds or ""), PairSpec("unsupervised")):
        row = pairing(spec)
        if not row.ready(spec, new, request) or (row.pseudo and not unsupervised):
            continue
        if row.pseudo:
            warnings.warn("the collections share no ids or payload key and no re-embedding model or seed pairs were "
                          "given: matching them without labels (mini-vec2vec), which takes minutes and may not "
                          "succeed; pass --pairs to say how records correspond", UserWarning, stacklevel=2)
        return _correspond(spec, old, new, request, LOCAL)
    raise InputError("no correspondences: the collections share no ids; say how records correspond "
                     "(field:NAME, reembed with a model and a text field, or geh:FILE of seed pairs)")


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
                         on_step=lambda s: None, engine=None) -> Report:
    """Everything a user needs to decide on an upgrade, as a :class:`~vecbridge.results.Report` (see the module
    docstring); ``report.as_dict()`` is the JSON.

    ``pairs`` says how records correspond (see :func:`find_correspondences`); ``method`` is the alignment method the
    user will fit (:data:`vecbridge.align.methods.METHODS`): held-out quality and retrieval are measured with it,
    while the Procrustes diagnostics (residual, bound) and the learning curve come from an orthogonal fit.
    ``engine`` gathers stored correspondences (on Ray: a uniform sample of all the pairs that share an id or a
    payload key, over every key range of ``old``); everything after that works on this machine."""
    engine = engine_of(engine)
    _refuse_on_ray(engine, pairs, new)
    chosen = method_of(method)
    old_c, new_c, old_info = _open_old_new(old, new)
    on_step("finding correspondences")
    if engine.remote:
        engine.require((old_c, "old collection"), (new_c, "new collection"))
    with engine.session():
        corr = find_correspondences(old_c, new_c, sample=sample, seed=seed, pairs=pairs, key=key, model=model,
                                    text_field=text_field, seeds=seeds, unsupervised=unsupervised,
                                    unsupervised_params=unsupervised_params, engine=engine)
    sp = _split(corr, holdout, seed)
    on_step(f"fitting on {len(sp.train):,} pairs, measuring on {len(sp.held):,} held out")
    report = {"old": old_c.display_url, "new": new_c.display_url if new_c else None, "method": chosen.name,
              "old_info": old_info.as_dict(), "new_info": new_c.info().as_dict() if new_c else None,
              **_held_out_sections(sp, corr, chosen, center=center, seed=seed, full_size=old_info.count),
              "thresholds": Thresholds(**THRESHOLDS)}
    qb, rel = _held_out_queries(queries_new, corr, sp.held)
    on_step("learning curve")
    report["learning_curve"] = _learning_curve(sp, qb, rel, k=k, center=center)
    measure = _retrieval_sections(report, sp, corr, qb, rel, queries_old, k=k, full_size=old_info.count,
                                  options=options, on_step=on_step)
    if old_model_retired:
        report["old_model_retired"] = True
    report["verdict"] = verdict(report)
    if measure is not None:   # after the verdict: the recommendation must not contradict it
        on_step("measuring the options that keep more quality (local maps, re-embedding, re-ranking)")
        report["options"] = _options_section(report, *measure, k=k, n_items=old_info.count,
                                             target=target_retention, seed=seed, center=center)
    report["advice"] = advice(report)
    return Report(**report)


def _refuse_on_ray(engine, pairs, new) -> None:
    """On an engine spread over processes the report gathers stored pairs from both collections; a pairing that
    works on a sample on one machine, or no new collection, is refused in one line before any work."""
    if not engine.remote:
        return
    spec = PairSpec.parse(pairs, allowed=REPORT_PAIRS) if pairs else None
    if spec is not None and not pairing(spec).splits:
        raise InputError(f"--engine ray gathers stored pairs (ids, field:NAME); the {spec.kind} pairing works on a "
                         f"sample on one machine: use --engine local")
    if new is None:
        raise InputError("--engine ray gathers pairs from both collections: give the new collection too")


def _open_old_new(old, new) -> tuple[Collection, Collection | None, CollectionInfo]:
    old_c = open_collection(old)
    new_c = open_collection(new) if new is not None else None
    old_info = old_c.info()
    if old_info.count == 0:
        raise InputError(f"collection is empty: {old_c.display_url}")
    return old_c, new_c, old_info


@dataclass
class _Split:
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


def _split(corr: Correspondences, holdout: float, seed: int) -> _Split:
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
    return _Split(corr.X.astype(np.float32), corr.Y.astype(np.float32), held, train, np.concatenate([held, train]),
                  rng)


def _held_out_sections(sp: _Split, corr: Correspondences, chosen, *, center: bool, seed: int,
                       full_size: int) -> dict:
    """Fit the user's method (and an orthogonal map, for the Procrustes diagnostics) on the training rows; the
    ``correspondences``, ``held_out`` and ``fit`` sections. Keeps the fitted map and the mapped held-out rows in
    ``sp``."""
    X, Y, held, train = sp.X, sp.Y, sp.held, sp.train
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewPairsWarning)
        est = OrthogonalProcrustes(center=center).fit(X[train], Y[train])
        sp.judged = est if chosen.name == "orthogonal" else \
            chosen.build(center=center, seed=seed).fit(X[train], Y[train])
    sp.mapped_held = mapped_held = sp.judged.transform(X[held])
    pq = metrics.pair_quality(mapped_held, Y[held])
    cos = np.einsum("ij,ij->i", metrics.prepare_vectors(mapped_held, "cosine"),
                    metrics.prepare_vectors(Y[held], "cosine"))
    held_resid = float(np.mean(np.sum((mapped_held - Y[held]) ** 2, axis=1)))
    top1_curve = _top1_curve(mapped_held, Y[sp.pool_order], pq.top1, np.random.default_rng(seed + 1), full_size)
    return {
        "correspondences": CorrespondenceSummary(mode=corr.mode, reason=corr.reason, n=len(corr.X), train=len(train),
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
    }


def _held_out_queries(queries_new, corr: Correspondences, held: np.ndarray):
    """The new-model queries whose relevant document is held out (only those count), and the pool row of each
    one's document: ``(queries, rows)``, or ``(None, None)`` without queries."""
    if queries_new is None:
        return None, None
    held_ids = [corr.ids[i] for i in held]
    qn_c = open_collection(queries_new)
    qb = qn_c.get(held_ids)
    if len(qb) < 10:
        raise InputError(_too_few_queries(qn_c, qb, corr, held_ids))
    pos = {i: j for j, i in enumerate(held_ids)}
    return qb, np.array([pos[i] for i in qb.ids])


def _learning_curve(sp: _Split, qb, rel, *, k: int, center: bool) -> LearningCurve:
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


def _retrieval_sections(report: dict, sp: _Split, corr: Correspondences, qb, rel, queries_old, *, k: int,
                        full_size: int, options: bool, on_step) -> tuple | None:
    """With queries: retrieval over the pool (retention, or with pseudo-pairs only the mapped side) and the
    three-way comparison with old-model queries; without: the neighbourhood overlap. Returns what the options are
    measured on, or None where they cannot be."""
    X, Y, pool_order = sp.X, sp.Y, sp.pool_order
    if qb is None:   # each held-out item's new vector as the query (itself excluded)
        ov = metrics.topk_overlap(Y[sp.held], sp.mapped_held, Y[sp.held], k=k + 1)
        report["neighbourhood_overlap"] = NeighbourhoodOverlap(k=k, overlap=ov, pool=len(sp.held))
        return None
    pool_x = X[pool_order]
    mapped_pool = sp.judged.transform(pool_x)
    both, Q_old = _old_queries(queries_old, qb)     # fetched once: three-way comparison and options
    if corr.pseudo:
        # pseudo-pairs: the partners are estimates, so no "native" pool exists; measure what needs no true pairs
        on_step("retrieval with new-model queries (mapped old vectors only)")
        report["retrieval_unsupervised"] = UnsupervisedRetrieval(
            k=k, n_queries=len(qb), pool=len(pool_order), recall_mapped=metrics.recall_at_k(qb.vectors, mapped_pool,
                                                                                          rel, k))
    else:
        on_step("retrieval with new-model queries")
        report["retrieval"] = ReportRetrieval(**_retention_curve(qb.vectors, mapped_pool, Y[pool_order], rel, k,
                                                                 sp.rng, full_size), k=k, n_queries=len(qb))
    if Q_old is not None:
        rel_b = rel[both]
        report["three_way"] = ThreeWay(
            stay_on_old_model=metrics.recall_at_k(Q_old, pool_x, rel_b, k),
            mapped_upgrade=metrics.recall_at_k(qb.vectors[both], mapped_pool, rel_b, k),
            full_re_embed=None if corr.pseudo else metrics.recall_at_k(qb.vectors[both], Y[pool_order], rel_b, k),
            n_queries=len(both), pool=len(pool_order), k=k)
    if options and not corr.pseudo and report["retrieval"].measured is not None:
        all_old = Q_old if Q_old is not None and len(both) == len(qb) else None
        return X[sp.train], Y[sp.train], pool_x, Y[pool_order], qb, rel, all_old
    return None


def _too_few_queries(qn_c, qb, corr, held_ids) -> str:
    """Why fewer than 10 queries count, and what the queries need to be."""
    n_given = qn_c.info().count
    n_paired = len(qn_c.get(list(corr.ids)))
    shared = next((p.queries_hint for p in PAIRINGS.values() if p.report_mode == corr.mode), "linked items")
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


@dataclass
class _Facts:
    """What the verdict reads of a report (its sections by key, typed or plain dicts, as far as they go)."""

    t: dict
    top1: float
    among: str                 # " among N held-out items", or ""
    retrieval: dict
    retention: float | None    # predicted recall retention@k
    three: dict | None

    @classmethod
    def of(cls, report) -> "_Facts":
        ho, retrieval = report["held_out"], report.get("retrieval", {})
        pool = ho.get("pool")
        return cls(report["thresholds"], ho["top1"], f" among {pool:,} held-out items" if pool else "", retrieval,
                   retrieval.get("predicted"), report.get("three_way"))

    @property
    def worse_than_staying(self) -> bool:
        three = self.three
        return bool(three) and three["mapped_upgrade"] < three["stay_on_old_model"] - self.t["worse_than_staying"]

    def re_embed(self) -> str:
        full = self.three.get("full_re_embed")
        return f"; a full re-embed gives {full:.3f}" if full is not None else ""


def _staying_is_better(report, f: _Facts) -> Verdict | None:
    """New-model queries over the mapped vectors retrieve worse than the old model: NO-GO, or CAUTION when the old
    model is retired (staying is then no option)."""
    if not f.worse_than_staying:
        return None
    three = f.three
    if report.get("old_model_retired"):
        return Verdict("CAUTION", (
            f"the old model is retired, so staying is not an option: new-model queries over the mapped vectors reach "
            f"Recall@{three.get('k', 10)} {three['mapped_upgrade']:.3f} (the old model gave "
            f"{three['stay_on_old_model']:.3f}" + f.re_embed()
            + "): serve the mapped vectors now and re-embed in the background (vecbridge upgrade), or re-embed "
            "before switching"))
    return Verdict("NO-GO", (
        f"new-model queries over the mapped old vectors retrieve worse than staying on the old model "
        f"(Recall@{three.get('k', f.retrieval.get('k', 10))} {three['mapped_upgrade']:.3f} vs "
        f"{three['stay_on_old_model']:.3f}" + f.re_embed()
        + (f", among {three['pool']:,} sampled items" if three.get("pool") else "")
        + "): keep the old model or re-embed"))


def _untrusted_pairs(report, f: _Facts) -> Verdict | None:
    """Grown or unsupervised correspondences: NO-GO when they failed their label-free validation; CAUTION for
    pseudo-pairs (retention against a re-embed needs true pairs)."""
    c = report.get("correspondences", {})
    validation = c.get("validation")
    if validation and not validation["passed"]:
        what = "unsupervised" if c.get("pseudo") else "seed-grown"
        return Verdict("NO-GO", (
            f"the {what} correspondences failed their label-free validation (score {validation['score']:.2f} < "
            f"{validation['threshold']:.2f}: {validation['reason']}), so every figure below is measured on likely "
            f"wrong pairs: give seed pairs (--seeds) or re-embed a sample (--model/--text-field)"))
    if not c.get("pseudo"):
        return None
    ru = report.get("retrieval_unsupervised")
    got = f"; new-model queries over the mapped vectors reach Recall@{ru['k']} {ru['recall_mapped']:.3f}" if ru else ""
    return Verdict("CAUTION", (
        f"the correspondences are unsupervised pseudo-pairs ({c['mutual_fraction']:.0%} of the sample found a "
        f"mutual partner){got}; retention against a re-embed cannot be measured without true pairs: give "
        f"--model/--text-field or --seeds to measure it"))


def _no_alignment(report, f: _Facts) -> Verdict | None:
    """Too few held-out items find their own new vector: the spaces do not align."""
    if f.top1 >= f.t["no_go_top1"]:
        return None
    ho = report["held_out"]
    pred, full, pool = ho.get("top1_predicted"), ho.get("full_size"), ho.get("pool")
    word = "measured" if ho.get("top1_curve", {}).get("pool_sizes", [0])[-1] >= (full or 0) else "predicted"
    extra = (f"; {word} {pred:.0%} among the collection's {full:,} items"
             if pred is not None and full and pool and full > pool else "")
    return Verdict("NO-GO", f"only {f.top1:.0%} of held-out items find their own new vector "
                            f"(top-1{f.among} < {f.t['no_go_top1']:.0%}{extra}): the spaces do not align")


def _by_retention(report, f: _Facts) -> Verdict:
    """The last word: retention unreliable or unmeasured (CAUTION), too low (NO-GO), or both thresholds met (GO)."""
    t, top1, retention, retrieval = f.t, f.top1, f.retention, f.retrieval
    if retrieval.get("unreliable") and retention is None:
        return Verdict("CAUTION", (
            f"held-out top-1 {top1:.3f}{f.among}, but recall retention@{retrieval.get('k', 10)} is "
            f"{retrieval['unreliable']}: the queries hardly find their relevant documents even among the new "
            f"collection's own vectors, so the ratio would mean nothing (are they new-model query vectors whose ids "
            f"name their relevant documents?)"))
    if retention is not None and retention < t["no_go_retention"]:
        return Verdict("NO-GO", f"predicted recall retention@{retrieval['k']} {retention:.3f} is below "
                                f"{t['no_go_retention']}")
    if top1 >= t["go_top1"] and retention is not None and retention >= t["go_retention"]:
        return Verdict("GO", f"held-out top-1 {top1:.3f}{f.among} and predicted retention {retention:.3f} meet the "
                             f"GO thresholds ({t['go_top1']}, {t['go_retention']})")
    if retention is None:
        return Verdict("CAUTION", f"held-out top-1 is {top1:.3f}{f.among}, but without new-model queries the "
                                  f"retrieval quality kept cannot be measured (give --queries)")
    return Verdict("CAUTION", f"held-out top-1 {top1:.3f}{f.among}, predicted retention {retention:.3f}: usable, but "
                              f"below the GO thresholds ({t['go_top1']}, {t['go_retention']})")


def verdict(report: "Report | dict") -> Verdict:
    """GO / CAUTION / NO-GO with the reason in one sentence (``report``: a report's sections by key, typed or plain
    dicts, as far as they go): the first rule that speaks decides, in this order."""
    facts = _Facts.of(report)
    for rule in (_staying_is_better, _untrusted_pairs, _no_alignment):
        found = rule(report, facts)
        if found is not None:
            return found
    return _by_retention(report, facts)


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
