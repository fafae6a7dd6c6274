"""Dry-run compatibility report: will this upgrade work, and how much retrieval quality is kept?

Nothing is written to any store. The report

1. samples both collections and finds correspondences with the best mode available, saying which and why:
   a payload key (``key``), shared ids, a re-embedded sample of stored texts (``model`` + ``text_field``), seed pairs
   grown by GEH (``seeds``), or none at all (unsupervised mini-vec2vec: its pseudo-pairs are the map's own mutual
   nearest neighbours, so "held-out" agreement with them is not evidence of quality; the report then measures only
   what needs no true pairs -- Recall@k of new-model queries over the mapped old vectors, and against staying on
   the old model -- and never says GO);
2. fits orthogonal Procrustes on a training split and measures the held-out split: top-1 and mean rank of the true
   partner among the held-out items (the pool is stated with every figure, and top-1 is also predicted at the
   collection's size the way retention is, below), mean cosine, held-out residual, the residual against the
   Procrustes bound ("When Embedding Models Meet: Procrustes Bounds and Applications", 2025) and the singular-value
   spectrum, and how quality grows with the number of anchors;
3. with new-model queries (vectors whose id is their relevant document's id) measures recall retention@k of the
   held-out documents within the pool of every sampled item, predicted at the size of the whole collection
   (Recall@k falls as a collection grows: each relevant document's rank among the pool's uniformly sampled
   distractors is carried to the full size, :mod:`vecbridge.quality.at_size`); with old-model queries too, the
   three-way comparison: stay on A, mapped upgrade, full re-embed. A ratio over a native recall below
   :data:`vecbridge.metrics.MIN_NATIVE_RECALL` is reported as unreliable, not as a figure;
4. gives a verdict (GO / CAUTION / NO-GO) from :data:`THRESHOLDS`, with the reason in one sentence;
5. measures the options that keep more quality (:mod:`vecbridge.quality.options`) on the same pool as the headline and
   carries them to the collection's size the same way, so the plain orthogonal option *is* the headline figure; it
   recommends the cheapest that meets the target, never one the verdict has ruled out, and says so when the verdict
   is NO-GO.
"""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from .. import metrics
from ..align.methods import method as method_of
from ..connectors.base import Collection, CollectionInfo
from ..errors import InputError
from ..linking.pairspec import PairSpec
from ..pairing.table import MIN_PAIRS, PAIRINGS, Request, pairing
from ..pairing.table import REPORT_SAMPLE as REPORT_SAMPLE  # the CLI's --sample default
from ..quality.compatibility import (
    Correspondences,
    PairSplit,
    held_out_sections,
    learning_curve,
    options_section,
    retention_at_size,
    retention_curve,
    split_pairs,
    unsupervised_retrieval,
)
from ..quality.verdict import FAILING as FAILING  # the CLI's --fail-on levels
from ..quality.verdict import THRESHOLDS, advice, verdict
from ..results import NeighbourhoodOverlap, Report, ReportRetrieval, ThreeWay, Thresholds
from ..runtime.engine import LOCAL, engine_of
from ..runtime.models import ModelOptions
from ..runtime.open import open_collection

#: the pairings a report can use (see :class:`~vecbridge.linking.PairSpec`)
REPORT_PAIRS = ("ids", "field", "file", "reembed", "geh", "unsupervised")


def _correspond(spec: PairSpec, old: Collection, new: Collection | None, request: Request,
                engine) -> Correspondences | None:
    """The correspondences ``spec`` finds (:data:`vecbridge.pairing.table.PAIRINGS`), or None where a stored pairing
    finds too few of them (then the report looks further). Only the unsupervised pairing takes the estimator's
    parameters. The map of grown links is judged as a fit refines it (``refine``), on held-out links."""
    row = pairing(spec)
    request = replace(request, n=row.sample_size(request.n), params=request.params if row.pseudo else {})
    found = row.sample(old, new, spec, request, engine)
    if len(found) < row.report_min:
        return None
    return Correspondences(row.report_mode, found.reason, found.source.vectors, found.target.vectors,
                           list(found.source.ids), pseudo=found.pseudo, diagnostics=found.diagnostics,
                           new_ids=list(found.target.ids) if found.records else None,
                           refine=row.refiner(old, new, found, request), sample_map=found.sample_map)


def _request(sample: int | None, seed: int, model, text_field, params, models: ModelOptions | None = None) -> Request:
    """A report judges grown pairs itself (a failed validation is NO-GO, not an error): they are always kept."""
    return Request(n=sample, seed=seed, model=model, text_field=text_field, params=params or {}, force=True,
                   min_pairs=MIN_PAIRS, models=models or ModelOptions())


def find_correspondences(old: Collection, new: Collection | None, *, sample: int | None = None, seed: int = 0,
                         pairs: "str | PairSpec | None" = None, key: str | None = None, model: str | None = None,
                         text_field: str | None = None, seeds: str | None = None, unsupervised: bool = True,
                         unsupervised_params: dict | None = None, engine=None,
                         models: ModelOptions | None = None) -> Correspondences:
    """Pairs as ``pairs`` says (one of :data:`REPORT_PAIRS`); without it, the best available source of pairs in
    order of reliability: a payload ``key``, shared ids, then :func:`fallback_correspondences`.

    On an engine spread over processes (``engine``, see :mod:`vecbridge.runtime.engine`) the stored pairs (payload
    key, ids) are a uniform sample of ``sample`` of all such pairs, drawn over every key range of ``old``
    (:mod:`vecbridge.pairing.sampling`); the other pairings work on a sample on this machine (a re-embedding
    model where ``models`` says). ``sample`` None: the pairing's own (:meth:`Pairing.sample_size`)."""
    engine = engine_of(engine)
    request = _request(sample, seed, model, text_field, unsupervised_params, models)
    if pairs is not None:
        spec = PairSpec.parse(pairs, allowed=REPORT_PAIRS)
        if "target" in pairing(spec).needs and new is None:
            raise InputError(f"the pairing {str(spec)!r} needs the new collection")
        found = _correspond(spec, old, new, request, engine)
        if found is None:
            among = f"the {old.info().count:,}" if engine.remote else f"{pairing(spec).sample_size(sample):,} sampled"
            raise InputError(f"no correspondences by {spec.label} among {among} records")
        return found
    stored = ([PairSpec("field", key)] if key else []) + [PairSpec("ids")]
    for spec in stored if new is not None else []:
        found = _correspond(spec, old, new, request, engine)
        if found is not None:
            return found
    corr = fallback_correspondences(old, new, sample=sample, seed=seed, model=model, text_field=text_field,
                                    seeds=seeds, unsupervised=unsupervised, unsupervised_params=unsupervised_params,
                                    models=request.models)
    if engine.remote:
        corr.reason = f"no stored key shared by the collections (Ray scanned them all), so on this machine: " \
                      f"{corr.reason}"
    return corr


def fallback_correspondences(old: Collection, new: Collection | None, *, sample: int | None, seed: int,
                             model: str | None = None, text_field: str | None = None, seeds: str | None = None,
                             unsupervised: bool = True, unsupervised_params: dict | None = None,
                             models: ModelOptions | None = None) -> Correspondences:
    """The pairings :func:`find_correspondences` tries when the collections share no stored key (payload key, ids),
    most reliable first, the first whose needs are given: a re-embedded sample (``model`` and ``text_field``), GEH
    from ``seeds``, unsupervised mini-vec2vec (unless ``unsupervised`` is False; it warns first); else a one-line
    error saying what to give."""
    request = _request(sample, seed, model, text_field, unsupervised_params, models)
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


def compatibility_report(old, new=None, *, sample: int | None = None, seed: int = 0, holdout: float = 0.2,
                         pairs: "str | PairSpec | None" = None, method: str = "orthogonal",
                         key: str | None = None, model: str | None = None, text_field: str | None = None,
                         seeds: str | None = None, queries_new=None, queries_old=None, k: int = 10,
                         center: bool = False, unsupervised: bool = True, unsupervised_params: dict | None = None,
                         options: bool = True, target_retention: float = 0.95, old_model_retired: bool = False,
                         on_step=lambda s: None, engine=None, models: ModelOptions | None = None) -> Report:
    """Everything a user needs to decide on an upgrade, as a :class:`~vecbridge.results.Report` (see the module
    docstring); ``report.as_dict()`` is the JSON.

    ``pairs`` says how records correspond (see :func:`find_correspondences`); ``method`` is the alignment method the
    user will fit (:data:`vecbridge.align.methods.METHODS`): held-out quality and retrieval are measured with it,
    while the Procrustes diagnostics (residual, bound) and the learning curve come from an orthogonal fit.
    ``engine`` gathers stored correspondences (on Ray: a uniform sample of all the pairs that share an id or a
    payload key, over every key range of ``old``); everything after that works on this machine. ``models`` says
    where a re-embedding model runs; the report's ``model_run`` is its throughput."""
    engine = engine_of(engine)
    models = models or ModelOptions()
    _refuse_what_cannot_split(engine, pairs, new)
    chosen = method_of(method)
    old_c, new_c, old_info = _open_old_new(old, new)
    on_step("finding correspondences")
    if engine.remote:
        engine.require((old_c, "old collection"), (new_c, "new collection"))
    with engine.session():
        corr = find_correspondences(old_c, new_c, sample=sample, seed=seed, pairs=pairs, key=key, model=model,
                                    text_field=text_field, seeds=seeds, unsupervised=unsupervised,
                                    unsupervised_params=unsupervised_params, engine=engine, models=models)
    sp = split_pairs(corr, holdout, seed)
    on_step(f"fitting on {len(sp.train):,} pairs, measuring on {len(sp.held):,} held out")
    report = {"old": old_c.display_url, "new": new_c.display_url if new_c else None, "method": chosen.name,
              "old_info": old_info.as_dict(), "new_info": new_c.info().as_dict() if new_c else None,
              **held_out_sections(sp, corr, chosen, center=center, seed=seed, full_size=old_info.count),
              "thresholds": Thresholds(**THRESHOLDS)}
    qb, rel = _queries_of(queries_new, [corr.ids[i] for i in sp.held], corr)
    on_step("learning curve")
    report["learning_curve"] = learning_curve(sp, qb, rel, k=k, center=center)
    measure = _retrieval_sections(report, sp, corr, qb, rel, queries_old, k=k, full_size=old_info.count,
                                  options=options, on_step=on_step, queries_new=queries_new)
    if old_model_retired:
        report["old_model_retired"] = True
    report["model_run"] = models.summary()
    report["verdict"] = verdict(report)
    if measure is not None:   # after the verdict: the recommendation must not contradict it
        on_step("measuring the options that keep more quality (local maps, re-embedding, re-ranking)")
        report["options"] = options_section(report, *measure, k=k, n_items=old_info.count,
                                             target=target_retention, seed=seed, center=center)
    report["advice"] = advice(report)
    return Report(**report)


def _refuse_what_cannot_split(engine, pairs, new) -> None:
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


def _queries_of(queries_new, ids: list, corr: Correspondences | None):
    """The new-model queries whose relevant document is one of ``ids``, and each one's row of ``ids`` (``(None, None)``
    without queries); fewer than 10 are an error where ``corr`` names the correspondences ``ids`` are held out of."""
    if queries_new is None:
        return None, None
    qn_c = open_collection(queries_new)
    qb = qn_c.get(list(ids))
    if corr is not None and len(qb) < 10:
        raise InputError(_too_few_queries(qn_c, qb, corr, ids))
    pos = {i: j for j, i in enumerate(ids)}
    return qb, np.array([pos[i] for i in qb.ids])


def _retrieval_sections(report: dict, sp: PairSplit, corr: Correspondences, qb, rel, queries_old, *, k: int,
                        full_size: int, options: bool, on_step, queries_new=None) -> tuple | None:
    """With queries: retrieval over the pool (retention, or with pseudo-pairs only the mapped side) and the
    three-way comparison with old-model queries; without: the neighbourhood overlap. Returns what the options are
    measured on, or None where they cannot be."""
    X, Y, pool_order = sp.X, sp.Y, sp.pool_order
    if qb is None:   # each held-out item's new vector as the query (itself excluded)
        ov = metrics.topk_overlap(Y[sp.held], sp.mapped_held, Y[sp.held], k=k + 1)
        report["neighbourhood_overlap"] = NeighbourhoodOverlap(k=k, overlap=ov, pool=len(sp.held))
        return None
    if corr.sample_map is None:
        pool_x, fitted = X[pool_order], sp.judged
    else:   # pseudo-pairs: the whole sample, every query of it, under the map a fit saves
        sample, fitted = corr.sample_map
        pool_x, (qb, rel) = sample.vectors, _queries_of(queries_new, sample.ids, None)
    mapped_pool = fitted.transform(pool_x)
    both, Q_old = _old_queries(queries_old, qb)     # fetched once: three-way comparison and options
    if corr.pseudo:
        # pseudo-pairs: the partners are estimates, so no "native" pool exists; measure what needs no true pairs
        on_step("retrieval with new-model queries (mapped old vectors only)")
        report["retrieval_unsupervised"] = unsupervised_retrieval(qb.vectors, mapped_pool, rel, k=k,
                                                                  full_size=full_size)
    else:
        on_step("retrieval with new-model queries")
        at_size = retention_at_size(sp, qb.vectors, rel, *_training_queries(queries_new, corr, sp), k=k,
                                    full_size=full_size)
        report["retrieval"] = ReportRetrieval(**retention_curve(qb.vectors, mapped_pool, Y[pool_order], rel, k,
                                                                 sp.rng, full_size, at_size=at_size),
                                              k=k, n_queries=len(qb))
    if Q_old is not None:
        rel_b = rel[both]
        report["three_way"] = ThreeWay(
            stay_on_old_model=metrics.recall_at_k(Q_old, pool_x, rel_b, k),
            mapped_upgrade=metrics.recall_at_k(qb.vectors[both], mapped_pool, rel_b, k),
            full_re_embed=None if corr.pseudo else metrics.recall_at_k(qb.vectors[both], Y[pool_order], rel_b, k),
            n_queries=len(both), pool=len(pool_x), k=k)
    if options and not corr.pseudo and report["retrieval"].measured is not None:
        all_old = Q_old if Q_old is not None and len(both) == len(qb) else None
        return X[sp.train], Y[sp.train], pool_x, Y[pool_order], qb, rel, all_old
    return None


def _training_queries(queries_new, corr: Correspondences, sp: PairSplit):
    """The new-model queries of the training documents and each one's pool row: the report predicts retention for
    all of the collection's queries, theirs included (:func:`retention_at_size`)."""
    ids = [corr.ids[i] for i in sp.train]
    qt = open_collection(queries_new).get(ids)
    pos = {i: len(sp.held) + j for j, i in enumerate(ids)}
    return qt.vectors, np.array([pos[i] for i in qt.ids], dtype=np.int64)


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


