"""Pairs a map is grown from rather than read: GEH from a few seed pairs (the Vector Linking paper (2026)),
mini-vec2vec from nothing shared at all ("mini-vec2vec: Scaling Universal Geometry Alignment with Linear
Transformations", Dar 2025), and the label-free check of the maps they stand for.

``link``, ``fit --pairs unsupervised`` and the report grow their pairs here; such pairs can be silently wrong, so every
map of them is validated without labels (:func:`check_map`) and refused when it fails, unless forced.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..connectors.base import Collection, VectorBatch
from ..errors import CheckFailed, InputError
from .pairs import read_pairs_file


def _estimator(cls, params: dict, seed: int):
    """``cls(random_state=seed)`` with ``params`` set by ``set_params`` (flat names of GEH's option groups included)
    and checked now, before any vector is read; an unknown name or a bad value is a one-line error."""
    from ..numeric.estimator import UnknownParameter

    est = cls(random_state=seed)
    try:
        est.set_params(**params)
    except UnknownParameter as exc:
        raise InputError(f"{exc.estimator} has no parameter {', '.join(exc.unknown)} "
                         f"(known: {', '.join(exc.valid)})") from None
    est._validate_params()
    return est


def geh_fit(source: Collection, target: Collection, seeds: str | None, *, sample: int, seed: int,
            params: dict | None = None, force: bool = False, on_step: Callable[[str], None] = lambda s: None):
    """GEH (the Vector Linking paper (2026)) grown from the id pairs in the file ``seeds`` over the seed records plus a
    uniform sample of each collection. Returns ``(source_batch, target_batch, fitted GEH)``; ``links_`` index the two
    batches. GEH refuses a bootstrap that never took off (:class:`CheckFailed`) unless ``force``. Shared by
    ``link --mode geh`` and the report."""
    from ..linking.geh import GEH

    if not seeds:
        raise InputError("GEH needs a file of 15-30 known id pairs (the pairing geh:FILE)")
    est = _estimator(GEH, params or {}, seed)
    if force:   # keep what grew, however little: the caller marks it
        est.set_params(min_grown=0)
    pairs = read_pairs_file(seeds)
    a = _with_seeds(source, sample, seed, [p[0] for p in pairs])
    b = _with_seeds(target, sample, seed, [p[1] for p in pairs])
    on_step(f"growing {len(pairs)} seed pairs with GEH over {len(a):,} x {len(b):,} vectors")
    idx = np.arange(len(pairs))
    return a, b, est.fit(a.vectors, b.vectors, np.stack([idx, idx], axis=1))


def unsupervised_fit(source: Collection, target: Collection, *, sample: int, seed: int, params: dict | None = None):
    """mini-vec2vec ("mini-vec2vec: Scaling Universal Geometry Alignment with Linear Transformations", Dar, 2025) on
    a uniform sample of each collection (different seeds: the samples are unpaired).
    Returns ``(source_sample, target_sample, fitted MiniVec2Vec)``; shared by ``link``, ``fit --pairs unsupervised``
    and the report."""
    from ..align.minivec2vec import MiniVec2Vec

    est = _estimator(MiniVec2Vec, params or {}, seed)
    a, b = source.sample(sample, seed=seed), target.sample(sample, seed=seed + 1)
    for coll, batch in ((source, a), (target, b)):
        if len(batch) == 0:
            raise InputError(f"collection is empty: {coll.display_url}")
    return a, b, est.fit(a.vectors, b.vectors)


#: vectors a side that a map fitted without true pairs reads unless told otherwise (``fit``, ``link``, ``upgrade
#: start``): the fewer, the further it serves below one fitted on true pairs (:data:`FEW_ROWS_WARNING`)
UNPAIRED_SAMPLE = 10_000
#: unpaired rows per side that validate an unsupervised or seed-grown map (``vecbridge.align.validation``)
VALIDATION_ROWS = 2000
#: below this many rows per side that the fit did not read (a small collection), validate on the fit's own rows
MIN_FRESH_ROWS = 500
#: GEH links beyond the seeds below which bootstrapping never took off
MIN_GROWN_LINKS = 50
#: what to do about a map that fails validation (the end of the one-line error)
ADVICE_UNSUPERVISED = ("the unsupervised alignment is likely wrong: give seed pairs (--pairs geh:FILE or file:PATH), "
                       "re-embed a sample of texts with the new model (--pairs reembed --model NEW), or embed texts "
                       "of your own with both models (vecbridge link --pairs reference:PATH --old-model OLD --model "
                       "NEW, then fit --pairs file:LINKS; upgrade start takes the map as --alignment)")
#: what a map fitted without any pair costs, said beside every one that passes (the gap measured on both developers'
#: corpora, every sentence-encoder pair the validation accepted; GEH from 15 seeds left at most 0.012 of it, and so
#: did new-model vectors of which 46% were the collection's own documents, unlinked; 10% of them closed about half)
NOTE_UNSUPERVISED = ("a map fitted without pairs retrieves below one fitted on true pairs when the new-model vectors "
                     "are of other documents than the collection's: on the corpora measured, Recall@10 0.02-0.11 lower "
                     "with 5,000 vectors a side and 0.12-0.21 lower with 2,500; new-model vectors of some of the "
                     "collection's own documents among them, even under unrelated ids, or 15-30 known id pairs "
                     "(--pairs geh:FILE) close most of that")
#: vectors a side below which a map fitted without pairs that passes is marked with a warning (at 5,000 its served
#: Recall@10 was 0.02-0.11 below a supervised map's on both developers' corpora; with fewer, far more: bench notes)
FEW_ROWS_WARNING = 5000
ADVICE_GEH = ("the links grown from the seeds are likely wrong: check that the seed pairs are true pairs, give more "
              "of them, or re-embed a sample of texts with the new model (--pairs reembed --model NEW)")


def validation_samples(source: Collection, target: Collection, used_source: VectorBatch, used_target: VectorBatch,
                       *, seed: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """Unpaired samples that judge a map: up to :data:`VALIDATION_ROWS` rows of each collection that the fit did not
    read, or, where a collection has fewer than :data:`MIN_FRESH_ROWS` to spare, the fit's own rows. Returns
    ``(source vectors, target vectors, in_sample)``."""
    def fresh(coll: Collection, used: VectorBatch, s: int) -> np.ndarray:
        batch = coll.sample(VALIDATION_ROWS + len(used), seed=s)
        seen = set(used.ids)
        keep = np.fromiter((i not in seen for i in batch.ids), dtype=bool, count=len(batch))
        return batch.vectors[keep][:VALIDATION_ROWS]

    xs, ys = fresh(source, used_source, seed + 7919), fresh(target, used_target, seed + 7927)
    if min(len(xs), len(ys)) >= MIN_FRESH_ROWS:
        return xs, ys, False
    return used_source.vectors, used_target.vectors, True


def check_map(transform, source: Collection, target: Collection, used_source: VectorBatch, used_target: VectorBatch,
              *, seed: int, force: bool, what: str, advice: str, unpaired: bool = False) -> dict:
    """Validate a map fitted without true pairs (:func:`vecbridge.align.validation.validate_map`, label-free) and
    refuse it with :class:`CheckFailed` when it fails, unless ``force``. A map the fit saw an independent start
    reproduce (its ``confirmation_``, set by ``MiniVec2Vec``) passes at the lower gain of a confirmed map, the reason
    saying which start confirmed it. Returns the validation for the record; a map fitted without any pair
    (``unpaired``) that passes carries a ``note`` on what such maps cost, and a ``warning`` when it read fewer than
    :data:`FEW_ROWS_WARNING` vectors a side."""
    from ..align.validation import validate_map

    X, Y, in_sample = validation_samples(source, target, used_source, used_target, seed=seed)
    v = validate_map(transform, X, Y, random_state=seed, confirmation=getattr(transform, "confirmation_", None))
    record = {**v.as_dict(), "rows": "the fit's own rows" if in_sample else "rows the fit did not read"}
    doubt = getattr(transform, "doubt_", None)
    few = doubt is not None and doubt.get("clear_gain") is None
    if v.passed and doubt and v.confirmation is None and (few or in_sample or v.gain < doubt["clear_gain"]):
        # the best of several starts passed narrowly and no other start reached it (chance, where rows are few), or
        # none passed; only rows the fit did not read may clear it (on its own rows the polish lifts a wrong map's
        # gain too)
        reason = _doubt_reason(doubt, v.gain, few=few, in_sample=in_sample)
        record.update(passed=False, reason=reason, doubt=dict(doubt))
        if not force:
            raise CheckFailed(f"{what} is in doubt ({reason}; with {len(used_source):,} x {len(used_target):,} "
                              f"vectors, more rows per side make the fit surer); {advice}; nothing was written "
                              f"(--force keeps it anyway, marked as failed)")
    if not v.passed and not force:
        raise CheckFailed(f"{what} failed validation (score {v.score:.2f} < {v.threshold:.2f}: {v.reason}); "
                          f"{advice}; nothing was written (--force keeps it anyway, marked as failed)")
    if record["passed"] and unpaired:
        record["note"] = NOTE_UNSUPERVISED
        if min(len(used_source), len(used_target)) < FEW_ROWS_WARNING:
            record["warning"] = (f"fitted on only {len(used_source):,} x {len(used_target):,} vectors: with fewer "
                                 f"than {FEW_ROWS_WARNING:,} a side, maps fitted without pairs served far below maps "
                                 f"fitted on true pairs on the corpora measured (Recall@10 0.12-0.30 lower with "
                                 f"2,000-2,500 a side); give more vectors a side or 15-30 known id pairs "
                                 f"(--pairs geh:FILE)")
    return record


def _doubt_reason(doubt: dict, gain: float, *, few: bool, in_sample: bool) -> str:
    """Why a map in doubt (:attr:`MiniVec2Vec.doubt_`) is refused: a narrow pass nothing reproduced, or the polished
    best of starts that all failed."""
    if doubt.get("passed", True):
        bar = ("with so few rows a side a pass needs another start to reach the same map" if few else
               f"short of the {doubt['clear_gain']:.3f} of a clear pass")
        return (f"it stands {gain:+.3f} above refined random maps, {bar}, and none of the fit's other "
                f"{doubt['starts'] - 1} starts reached it")
    bar = ("and with so few rows a side only a pass that another start reproduces counts" if few else
           "but on the fit's own rows, where the polish lifts a wrong map's gain too" if in_sample else
           f"short of the {doubt['clear_gain']:.3f} of a clear pass")
    return (f"none of the fit's {doubt['starts']} starts passed, the best standing {doubt['gain']:+.3f} above "
            f"refined random maps; polished, it stands {gain:+.3f}, {bar}")


def check_unsupervised(transform, source: Collection, target: Collection, a: VectorBatch, b: VectorBatch, *,
                       seed: int, force: bool) -> dict:
    """:func:`check_map` for a mini-vec2vec map (``transform``: the estimator or its orthogonal part), fitted on the
    unpaired samples ``a`` and ``b``: a pass carries what such maps cost."""
    return check_map(transform, source, target, a, b, seed=seed, force=force,
                     what="the unsupervised alignment (mini-vec2vec)", advice=ADVICE_UNSUPERVISED, unpaired=True)


def geh_map(a: VectorBatch, b: VectorBatch, geh):
    """Orthogonal Procrustes (the ``fit`` default) on GEH's links: the map the links stand for."""
    import warnings

    from ..align.procrustes import FewPairsWarning, OrthogonalProcrustes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewPairsWarning)
        return OrthogonalProcrustes().fit(a.vectors[geh.links_[:, 0]], b.vectors[geh.links_[:, 1]])


def check_geh(source: Collection, target: Collection, a: VectorBatch, b: VectorBatch, geh, *, seed: int,
              force: bool) -> dict:
    """Refuse GEH links whose bootstrapping never took off (fewer than :data:`MIN_GROWN_LINKS` beyond the seeds) or
    whose map fails validation (:func:`check_map`), unless ``force``."""
    n_seeds = int(geh.is_seed_.sum())
    grown = len(geh.links_) - n_seeds
    if grown < MIN_GROWN_LINKS and not force:
        raise CheckFailed(f"GEH grew only {grown} links beyond its {n_seeds} seed pairs (at least {MIN_GROWN_LINKS} "
                          f"needed): bootstrapping never took off; {ADVICE_GEH}; nothing was written (--force keeps "
                          f"them anyway)")
    record = check_map(geh_map(a, b, geh), source, target, a, b, seed=seed, force=force,
                       what="the map of the GEH links", advice=ADVICE_GEH)
    return {**record, "grown_links": grown}


#: rounds of the refinement of a map fitted on GEH's links (:func:`refined_pairs`)
REFINE_ROUNDS = 2


def refined_pairs(X_links: np.ndarray, Y_links: np.ndarray, a: VectorBatch, b: VectorBatch, *,
                  rounds: int = REFINE_ROUNDS) -> np.ndarray:
    """The refinement of "Word Translation Without Parallel Data" (Conneau et al., 2018) after GEH: Procrustes on the
    links, then ``rounds`` times the CSLS mutual nearest neighbours of the whole samples ``a`` and ``b`` under the
    current map and Procrustes on them (the last round's map is the caller's to fit, on the vectors it keeps).
    Returns the last round's pairs (rows of ``a``, rows of ``b``): a map on them
    uses every row the two samples share, not only the links GEH could grow from its seeds (where few seeds barely
    took off, the links' map serves far below one fitted on true pairs)."""
    import warnings

    from ..align.procrustes import FewPairsWarning, OrthogonalProcrustes
    from ..numeric.neighbors import mutual_nearest_neighbours
    from ..vectors import l2_normalize

    X, Y = l2_normalize(a.vectors, np.float32), l2_normalize(b.vectors, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewPairsWarning)
        est = OrthogonalProcrustes().fit(X_links, Y_links)
        pairs = np.empty((0, 2), dtype=np.int64)
        for i in range(rounds):
            if i:
                est = OrthogonalProcrustes().fit(X[pairs[:, 0]], Y[pairs[:, 1]])
            pairs = mutual_nearest_neighbours(l2_normalize(est.transform(X), np.float32), Y)[0]
    return pairs


def refine_linked(source: Collection, target: Collection, X: VectorBatch, Y: VectorBatch, *, sample: int, seed: int,
                  on_step: Callable[[str], None] = lambda s: None,
                  leave_out: tuple = ((), ())) -> tuple[VectorBatch, VectorBatch, dict]:
    """The pairs a map of GEH's links (``X`` row i linked to ``Y`` row i) is fitted on, as ``(source side, target
    side)`` row for row: the links refined (:func:`refined_pairs`) over ``sample`` vectors a side (less the ids in
    ``leave_out``, one sequence a side), where the refined map passes validation (:func:`check_map`) too, else the
    links as they are; and the record of what was done."""
    from ..align.procrustes import OrthogonalProcrustes

    a, b = source.sample(sample, seed=seed + 2), target.sample(sample, seed=seed + 3)
    if len(leave_out[0]) or len(leave_out[1]):
        a, b = (side.take(np.array([i not in gone for i in side.ids], dtype=bool))
                for side, gone in zip((a, b), map(set, leave_out)))
    on_step(f"refining the map of {len(X):,} GEH links over {len(a):,} x {len(b):,} vectors")
    rows = refined_pairs(X.vectors, Y.vectors, a, b)
    record = {"rounds": REFINE_ROUNDS, "links": len(X), "pairs": len(rows)}
    if len(rows) < len(X):   # fewer mutual pairs than links: nothing to gain
        return X, Y, {**record, "kept": False, "why": "fewer mutual pairs than links: the links' map is kept"}
    A, B = a.take(rows[:, 0]), b.take(rows[:, 1])
    v = check_map(OrthogonalProcrustes().fit(A.vectors, B.vectors), source, target, a, b,
                  seed=seed, force=True, what="the refined map of the GEH links", advice=ADVICE_GEH)
    if not v["passed"]:
        return X, Y, {**record, "kept": False, "why": "the refined map failed validation: the links' map is kept",
                      "refined_validation": v}
    return A, B, {**record, "kept": True, "validation": v}


def pseudo_pairs(est, a: VectorBatch, b: VectorBatch) -> tuple[np.ndarray, np.ndarray]:
    """CSLS mutual nearest neighbours between the mapped source sample and the target sample: ``(pairs, scores)``."""
    from ..numeric.neighbors import mutual_nearest_neighbours

    return mutual_nearest_neighbours(est.transform(a.vectors), b.vectors)


def _with_seeds(coll: Collection, sample: int, seed: int, seed_ids: list) -> VectorBatch:
    """The seed records first (in the seed file's order), then a uniform sample of the rest."""
    seeds = coll.get(seed_ids)
    if len(seeds) != len(seed_ids):
        missing = [i for i in seed_ids if i not in set(seeds.ids)][:3]
        raise InputError(f"{len(seed_ids) - len(seeds)} seed ids are missing from {coll.display_url} "
                         f"(e.g. {missing})")
    rest = coll.sample(sample, seed=seed)
    given = set(seed_ids)
    keep = np.array([i not in given for i in rest.ids], dtype=bool)
    return VectorBatch.concat([seeds, rest.take(keep)])
