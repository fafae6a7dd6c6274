"""``vecbridge link``: obtain correspondences between two collections with any mode, as a :class:`Links` file."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..connectors.base import Collection, VectorBatch
from ..errors import CheckFailed, InputError
from ..linking.links import Links
from ..linking.pairspec import PairSpec
from ..pairing.pairs import pairs_by_field, pairs_by_ids, pairs_from_list, read_pairs_file
from ..runtime.open import open_collection


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
    """mini-vec2vec (the mini-vec2vec paper (Dar, 2025)) on a uniform sample of each collection (different seeds: the
    samples are unpaired).
    Returns ``(source_sample, target_sample, fitted MiniVec2Vec)``; shared by ``link``, ``fit --pairs unsupervised``
    and the report."""
    from ..align.minivec2vec import MiniVec2Vec

    est = _estimator(MiniVec2Vec, params or {}, seed)
    a, b = source.sample(sample, seed=seed), target.sample(sample, seed=seed + 1)
    for coll, batch in ((source, a), (target, b)):
        if len(batch) == 0:
            raise InputError(f"collection is empty: {coll.display_url}")
    return a, b, est.fit(a.vectors, b.vectors)


#: unpaired rows per side that validate an unsupervised or seed-grown map (``vecbridge.align.validation``)
VALIDATION_ROWS = 2000
#: below this many rows per side that the fit did not read (a small collection), validate on the fit's own rows
MIN_FRESH_ROWS = 500
#: GEH links beyond the seeds below which bootstrapping never took off
MIN_GROWN_LINKS = 50
#: what to do about a map that fails validation (the end of the one-line error)
ADVICE_UNSUPERVISED = ("the unsupervised alignment is likely wrong: give seed pairs (--pairs geh:FILE or file:PATH) or "
                       "re-embed a sample of texts with the new model (--pairs reembed --model NEW)")
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
              *, seed: int, force: bool, what: str, advice: str) -> dict:
    """Validate a map fitted without true pairs (:func:`vecbridge.align.validation.validate_map`, label-free) and
    refuse it with :class:`CheckFailed` when it fails, unless ``force``. Returns the validation for the record."""
    from ..align.validation import validate_map

    X, Y, in_sample = validation_samples(source, target, used_source, used_target, seed=seed)
    v = validate_map(transform, X, Y, random_state=seed)
    record = {**v.as_dict(), "rows": "the fit's own rows" if in_sample else "rows the fit did not read"}
    if not v.passed and not force:
        raise CheckFailed(f"{what} failed validation (score {v.score:.2f} < {v.threshold:.2f}: {v.reason}); "
                          f"{advice}; nothing was written (--force keeps it anyway, marked as failed)")
    return record


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


def pseudo_pairs(est, a: VectorBatch, b: VectorBatch) -> tuple[np.ndarray, np.ndarray]:
    """CSLS mutual nearest neighbours between the mapped source sample and the target sample: ``(pairs, scores)``."""
    from ..numeric.neighbors import mutual_nearest_neighbours

    return mutual_nearest_neighbours(est.transform(a.vectors), b.vectors)


def _id_links(parts, mode: str) -> Links:
    src = [i for a, _ in parts for i in a.ids]
    tgt = [i for _, b in parts for i in b.ids]
    return Links(src, tgt, np.ones(len(src), dtype=np.float32), mode)


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


def link(source, target, pairs: "str | PairSpec", *, seeds: str | None = None, model: str | None = None,
         old_model: str | None = None, text_field: str = "text", sample: int = 10_000, seed: int = 0,
         params: dict | None = None, force: bool = False, on_step: Callable[[str], None] = lambda s: None) -> Links:
    """Correspondences between ``source`` (old model) and ``target`` (new model), found as ``pairs`` says (any
    :class:`~vecbridge.linking.PairSpec`; ``"geh"`` with ``seeds=FILE`` is read as ``geh:FILE``).

    ``params`` go to the estimator of ``geh`` (:class:`~vecbridge.linking.geh.GEH`) or ``unsupervised``
    (:class:`~vecbridge.align.minivec2vec.MiniVec2Vec`); the papers' defaults otherwise. Links of those two are
    validated without labels (:func:`check_map`): a map that fails raises :class:`CheckFailed` unless ``force``, and
    the links' ``meta["validation"]`` records the outcome either way."""
    if pairs == "geh" and seeds:
        pairs = f"geh:{seeds}"
    spec = PairSpec.parse(pairs)
    source = open_collection(source)
    target = open_collection(target) if target is not None else None
    params = dict(params or {})
    if params and spec.kind not in ("geh", "unsupervised"):
        raise InputError(f"estimator parameters apply to the geh and unsupervised pairings, not {str(spec)!r}")
    if spec.kind == "reembed":
        from ..pairing.reembed import reembed_pairs
        from ..runtime.models import load_model

        if not model:
            raise InputError("re-embedding needs the new model (a name, a local path or module:function)")
        on_step(f"re-embedding up to {sample:,} stored texts ({text_field!r}) with {model}")
        olds, news = reembed_pairs(source, load_model(model), text_field=text_field, n=sample, seed=seed)
        return Links(list(olds.ids), [f"reembed:{i}" for i in olds.ids], np.ones(len(olds), np.float32), "reembed",
                     olds.vectors, news, {"model": model, "text_field": text_field})
    if spec.kind == "reference":
        from ..pairing.reembed import read_texts, reference_pairs
        from ..runtime.models import load_model

        if not (model and old_model):
            raise InputError("a reference corpus needs both encoders: the old model and the new model")
        texts = read_texts(spec.value, limit=sample)
        on_step(f"embedding {len(texts):,} reference texts with both models")
        X, Y = reference_pairs(texts, load_model(old_model), load_model(model))
        ids = [f"ref:{j}" for j in range(len(texts))]
        return Links(ids, ids, np.ones(len(ids), np.float32), "reference", X, Y,
                     {"model": model, "old_model": old_model})
    if target is None:
        raise InputError(f"the pairing {str(spec)!r} needs a target collection")
    if spec.kind == "ids":
        return _id_links(list(pairs_by_ids(source, target, limit=sample, seed=seed)), "ids")
    if spec.kind == "field":
        return _id_links(list(pairs_by_field(source, target, spec.value, limit=sample, seed=seed)), str(spec))
    if spec.kind == "file":
        return _id_links(list(pairs_from_list(source, target, read_pairs_file(spec.value))), "pairs")
    if spec.kind == "geh":
        a, b, geh = geh_fit(source, target, spec.value, sample=sample, seed=seed, params=params, force=force,
                            on_step=on_step)
        on_step("validating the map of the links (label-free)")
        validation = check_geh(source, target, a, b, geh, seed=seed, force=force)
        return Links([a.ids[i] for i in geh.links_[:, 0]], [b.ids[j] for j in geh.links_[:, 1]],
                     np.asarray(geh.confidence_, np.float32), "geh",
                     meta={"n_seeds": int(geh.is_seed_.sum()), "validation": validation})
    on_step(f"unsupervised alignment (mini-vec2vec) of up to {sample:,} vectors per side")
    a, b, est = unsupervised_fit(source, target, sample=sample, seed=seed, params=params)
    on_step("validating the unsupervised map (label-free)")
    validation = check_map(est, source, target, a, b, seed=seed, force=force,
                           what="the unsupervised alignment (mini-vec2vec)", advice=ADVICE_UNSUPERVISED)
    pairs_, scores = pseudo_pairs(est, a, b)
    conf = np.clip((scores + 1) / 2, 0, 1).astype(np.float32)     # CSLS in [-1, 1] -> [0, 1]
    return Links([a.ids[i] for i in pairs_[:, 0]], [b.ids[j] for j in pairs_[:, 1]], conf, "unsupervised",
                 meta={"pseudo_pairs": True, "validation": validation})
