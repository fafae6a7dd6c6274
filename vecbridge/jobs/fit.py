"""Fit an alignment between two live collections: pair, stream, fit, freeze into an :class:`Alignment`."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ..align.artifact import Alignment
from ..align.methods import METHODS as METHODS  # the table, for the CLI
from ..align.methods import method as method_of
from ..align.moments import PairMoments
from ..connectors.base import Collection
from ..errors import InputError
from ..fs import require_writable
from ..linking.pairspec import PairSpec
from ..pairing.pairs import in_holdout
from ..pairing.spec import iter_pairs
from ..runtime.engine import engine_of
from ..runtime.open import open_collection
from ..validation import check_paired
from ..vectors import l2_normalize

#: pairs held in memory for a method that does not stream (clustered) when ``max_pairs`` is not given
CLUSTERED_MAX_PAIRS = 200_000


class _CountingSource:
    """A source collection that counts the records read from it (``scan``, ``sample``, ``get``), so that "no pairs"
    can say how many records were examined; every other attribute is the collection's own."""

    def __init__(self, coll: Collection):
        self._coll = coll
        self.n_read = 0

    def __getattr__(self, name):
        return getattr(self._coll, name)

    def scan(self, *args, **kwargs):
        for batch in self._coll.scan(*args, **kwargs):
            self.n_read += len(batch)
            yield batch

    def sample(self, *args, **kwargs):
        batch = self._coll.sample(*args, **kwargs)
        self.n_read += len(batch)
        return batch

    def get(self, *args, **kwargs):
        batch = self._coll.get(*args, **kwargs)
        self.n_read += len(batch)
        return batch


def _vector_links(spec: PairSpec):
    """A links file whose anchors carry their vectors (re-embedded or reference-corpus anchors), else None."""
    if spec.kind == "file" and spec.value.lower().endswith(".npz"):
        from ..linking.links import Links

        links = Links.load_npz(spec.value)
        return links if links.has_vectors else None
    return None


def _vector_batches(links, batch_size: int, max_pairs):
    from ..connectors.base import VectorBatch

    n = len(links) if max_pairs is None else min(max_pairs, len(links))
    for lo in range(0, n, batch_size):
        hi = min(lo + batch_size, n)
        yield (VectorBatch(links.source_ids[lo:hi], links.source_vectors[lo:hi]),
               VectorBatch(links.target_ids[lo:hi], links.target_vectors[lo:hi]))


def _fit_unsupervised(source, target, *, n: int, seed: int, params: dict, source_model, target_model,
                      force: bool = False) -> Alignment:
    """mini-vec2vec on a sample of each side, validated without labels (:func:`vecbridge.jobs.link.check_map`): a map
    that fails is refused (:class:`~vecbridge.errors.CheckFailed`) unless ``force``, and the artifact records the
    validation either way (``metadata["validation"]``) and that its anchors are pseudo-pairs."""
    from .link import ADVICE_UNSUPERVISED, check_map, unsupervised_fit

    if source is None or target is None:
        raise InputError("the unsupervised pairing needs a source and a target collection")
    src, tgt = open_collection(source), open_collection(target)
    a, b, est = unsupervised_fit(src, tgt, sample=n, seed=seed, params=params)
    validation = check_map(est.procrustes_, src, tgt, a, b, seed=seed, force=force,
                           what="the unsupervised alignment (mini-vec2vec)", advice=ADVICE_UNSUPERVISED)
    info_s, info_t = src.info(), tgt.info()
    return Alignment.from_estimator(
        est.procrustes_, source_model=source_model, target_model=target_model, metric=info_t.metric,
        normalization="none", anchors={"method": "unsupervised mini-vec2vec", "pseudo_pairs": True,
                                       "n_source": len(a), "n_target": len(b), "seed": seed, "params": params},
        source={"url": src.display_url, "dim": info_s.dim, "count": info_s.count},
        target={"url": tgt.display_url, "dim": info_t.dim, "count": info_t.count}, validation=validation)


def check_fit_options(normalization: str, holdout: float) -> None:
    """Refuse a normalization or a holdout the fit cannot apply, before anything is read."""
    if normalization not in ("none", "l2"):
        raise InputError("normalization must be 'none' or 'l2'")
    if not 0.0 <= holdout < 1.0:
        raise InputError("holdout must be in [0, 1)")


def open_pair(source, target, spec: PairSpec) -> tuple[Collection, Collection, dict, str]:
    """The two collections a stored pairing reads, refused when either is missing or empty; how the artifact
    describes them, and the target's metric."""
    if source is None or target is None:
        raise InputError(f"fitting on {spec.label} needs a source and a target collection")
    src, tgt = open_collection(source), open_collection(target)
    src_info, tgt_info = src.info(), tgt.info()
    for coll, info in ((src, src_info), (tgt, tgt_info)):
        if info.count == 0:
            raise InputError(f"collection is empty: {coll.display_url}")
    return src, tgt, {"source": {"url": src.display_url, "dim": src_info.dim, "count": src_info.count},
                      "target": {"url": tgt.display_url, "dim": tgt_info.dim, "count": tgt_info.count}}, \
        tgt_info.metric


class PairAccumulator:
    """The fit's step for one batch of pairs, in one place: drop the held-out side (by id hash), refuse a bad vector by
    its record, normalise, add to the streamed moments (and keep the pairs for a method that does not stream).

    The single-process fit and every Ray task (:func:`vecbridge.jobs.distributed_reduce.fit_on_ray`) feed their
    batches to this same :meth:`add`, so both see the same pairs; Ray's per-range accumulators are then
    merged (:meth:`merge`) in range order."""

    def __init__(self, holdout: float = 0.0, normalization: str = "none", keep_pairs: bool = False):
        self.holdout = holdout
        self.normalization = normalization
        self.moments: PairMoments | None = None   # None until a batch came
        self.n_seen = 0                            # paired records (fit and held out)
        self.kept: list | None = [] if keep_pairs else None

    def add(self, s_batch, t_batch) -> None:
        self.n_seen += len(s_batch)
        keep = ~in_holdout(s_batch.ids, self.holdout)
        X, Y = s_batch.vectors[keep], t_batch.vectors[keep]
        if len(X):   # name the record, not a row of this batch, when a vector is NaN, inf or all zeros
            X, Y = check_paired(X, Y, names=("source", "target"),
                                ids=(np.asarray(s_batch.ids, dtype=object)[keep],
                                     np.asarray(t_batch.ids, dtype=object)[keep]))
        if self.normalization == "l2":
            X, Y = l2_normalize(X, np.float64), l2_normalize(Y, np.float64)
        if self.moments is None:
            self.moments = PairMoments(s_batch.dim, t_batch.dim)
        if len(X):
            self.moments.update(X, Y, offset=self.moments.n)
            if self.kept is not None:
                self.kept.append((np.asarray(X, np.float32), np.asarray(Y, np.float32)))

    def merge(self, other: "PairAccumulator") -> "PairAccumulator":
        """Add what ``other`` gathered on another part of the pairs (sums: the order changes only the rounding)."""
        self.n_seen += other.n_seen
        if other.moments is not None:   # into sums of our own (``other``'s may be read-only: Ray's zero-copy arrays)
            if self.moments is None:
                self.moments = PairMoments(other.moments.src_dim, other.moments.tgt_dim)
            self.moments.merge(other.moments)
        if self.kept is not None and other.kept:
            self.kept.extend(other.kept)
        return self


def freeze_fit(acc: PairAccumulator, *, n_examined: int, spec: PairSpec, chosen, where: str, max_pairs: int | None,
               seed: int, center: bool, scale: bool, alpha: float, metric: str, links=None, source_model=None,
               target_model=None, described: dict | None = None) -> Alignment:
    """Fit the chosen method on what a :class:`PairAccumulator` gathered (the moments, or the kept pairs of a method
    that does not stream) and freeze it into an :class:`Alignment`; no pair at all is a one-line error saying why."""
    moments, n_seen, holdout, kept = acc.moments, acc.n_seen, acc.holdout, acc.kept
    if moments is None or moments.n == 0:
        why = "no shared ids" if spec.kind == "ids" else "no matching pairs"
        if n_seen:   # pairs exist, but all of them fell in the held-out split
            why = f"all {n_seen:,} pairs are in the held-out split (holdout {holdout})"
        raise InputError(f"cannot fit: {why} {where} ({n_examined:,} source records examined)")
    estimator = chosen.build(center=center, scale=scale, alpha=alpha, seed=seed)
    if chosen.streams:
        estimator.fit_moments(moments)
    else:
        estimator.fit(np.concatenate([x for x, _ in kept]), np.concatenate([y for _, y in kept]))
    anchors = spec.describe()
    if links is not None:
        anchors["method"] = links.mode
    anchors.update({"n_examined": n_examined, "n_paired": n_seen, "holdout": holdout, "max_pairs": max_pairs,
                    "seed": seed})
    return Alignment.from_estimator(
        estimator, source_model=source_model, target_model=target_model, metric=metric,
        normalization=acc.normalization, anchors=anchors, **(described or {}))


def fit_alignment(source, target, *, pairs: "str | PairSpec" = "ids", method: str = "orthogonal", center: bool = False,
                  scale: bool = False, alpha: float = 0.01, normalization: str = "none", holdout: float = 0.0,
                  max_pairs: int | None = None, seed: int = 0, batch_size: int = 2000,
                  source_model: str | None = None, target_model: str | None = None,
                  params: dict | None = None, force: bool = False, on_batch: Callable[[int], None] | None = None,
                  on_start: Callable[[int], None] | None = None, engine=None) -> Alignment:
    """Fit a map from ``source``'s space to ``target``'s space on corresponding records, without holding them all.

    ``pairs`` is ``ids``, ``field:NAME``, ``file:PATH`` (a CSV/JSON file of id pairs, or a ``.npz`` links file from
    ``vecbridge link``: one that carries vectors, from re-embedding or a reference corpus, needs no collections) or
    ``unsupervised`` (see :class:`~vecbridge.linking.PairSpec`).
    ``holdout`` keeps a deterministic fraction of pairs (by id hash) out of the fit so that ``evaluate`` can measure
    on unseen items; ``max_pairs`` fits on a seeded uniform sample of the source instead of a full scan.

    ``pairs="unsupervised"`` needs no correspondences at all: mini-vec2vec ("mini-vec2vec: Scaling Universal
    Geometry Alignment with Linear Transformations", Dar 2025; :class:`~vecbridge.align.MiniVec2Vec` with ``params``)
    on a sample of ``max_pairs`` (default 10,000) records
    of each collection; the artifact holds its nearest orthogonal map (with both means). On wordnet this keeps
    retention@10 0.78 where refitting Procrustes on its mutual-nearest-neighbour links keeps 0.72
    (``bench/linking_retention.py``). Such a map can be silently wrong, so it is validated without labels
    (:mod:`vecbridge.align.validation`) and refused with :class:`~vecbridge.errors.CheckFailed` when it fails, unless
    ``force`` (then the artifact records the failed validation and ``migrate`` warns before using it).

    A full streamed fit on stored pairs also runs on a Ray cluster:
    :func:`vecbridge.jobs.distributed_reduce.fit_on_ray`.
    """
    engine = engine_of(engine)
    if engine.name == "ray":  # temporary: the Ray twin, until this job runs its body through the engine seam
        from .distributed_reduce import fit_on_ray

        return fit_on_ray(source, target, pairs=pairs, method=method, center=center, scale=scale, alpha=alpha,
                          normalization=normalization, holdout=holdout, max_pairs=max_pairs, seed=seed,
                          batch_size=batch_size, source_model=source_model, target_model=target_model,
                          params=params, force=force, workers=engine.workers, ray_address=engine.address,
                          ranges_per_worker=engine.units_per_worker, on_batch=on_batch, on_start=on_start)
    spec = PairSpec.parse(pairs, allowed=("ids", "field", "file", "unsupervised"))
    chosen = method_of(method)
    if params and spec.kind != "unsupervised":
        raise InputError("estimator parameters apply to the unsupervised pairing only")
    if spec.kind == "unsupervised":
        return _fit_unsupervised(source, target, n=max_pairs or 10_000, seed=seed, params=params or {},
                                 source_model=source_model, target_model=target_model, force=force)
    check_fit_options(normalization, holdout)
    if not chosen.streams and max_pairs is None:   # a method that does not stream holds its pairs in memory
        max_pairs = CLUSTERED_MAX_PAIRS
    links = _vector_links(spec)
    described = {}
    counting = None
    if links is None:
        src, tgt, described, metric = open_pair(source, target, spec)
        count = described["source"]["count"]
        if on_start:
            on_start(min(count, max_pairs) if max_pairs else count)
        src = counting = _CountingSource(src)
        batches = iter_pairs(src, tgt, spec, batch_size=batch_size, limit=max_pairs, seed=seed)
        where = f"between {src.display_url} and {tgt.display_url}"
    else:
        batches = _vector_batches(links, batch_size, max_pairs)
        metric = links.meta.get("metric", "cosine")
        where = f"in {spec.value}"
    # a method that does not stream fits on the pairs themselves (bounded by max_pairs)
    acc = PairAccumulator(holdout, normalization, keep_pairs=not chosen.streams)
    for s_batch, t_batch in batches:
        acc.add(s_batch, t_batch)
        if on_batch:
            on_batch(len(s_batch))
    return freeze_fit(acc, n_examined=counting.n_read if counting is not None else acc.n_seen, spec=spec,
                      chosen=chosen, where=where, max_pairs=max_pairs, seed=seed, center=center, scale=scale,
                      alpha=alpha, metric=metric, links=links, source_model=source_model, target_model=target_model,
                      described=described)


def fit_to_file(output, source, target, *, engine=None, **options) -> tuple[Alignment, Path]:
    """:func:`fit_alignment` on the ``engine`` given (see :mod:`vecbridge.runtime.engine`), then save the artifact
    at ``output``; a folder that cannot take the file is refused before the fit, not after it."""
    engine = engine_of(engine)
    require_writable(output, "the alignment", "choose another output path")
    alignment = fit_alignment(source, target, engine=engine, **options)
    return alignment, alignment.save(output)
