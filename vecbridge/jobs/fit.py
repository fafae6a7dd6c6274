"""Fit an alignment between two live collections: pair, stream, fit, freeze into an :class:`Alignment`."""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

from ..align.artifact import Alignment
from ..align.methods import METHODS as METHODS  # the table, for the CLI
from ..align.methods import method as method_of
from ..connectors.base import Collection
from ..errors import InputError
from ..fs import require_writable
from ..linking.pairspec import PairSpec
from ..pairing.moments import PairAccumulator
from ..pairing.table import BATCH_SIZE, Pairing, Request, pairing
from ..pairing.units import PairJob, carried
from ..runtime.engine import LOCAL, engine_of
from ..runtime.open import open_collection
from ..runtime.provenance import attach_spaces, fingerprint_collection, fingerprint_vectors

#: pairs held in memory for a method that does not stream (clustered) when ``max_pairs`` is not given
CLUSTERED_MAX_PAIRS = 200_000


#: the pairings a fit reads
FIT_PAIRS = ("ids", "field", "file", "geh", "unsupervised")


def _fit_unsupervised(source, target, *, n: int | None, seed: int, params: dict, source_model, target_model,
                      force: bool = False, prefixes: tuple = (None, None)) -> Alignment:
    """mini-vec2vec on a sample of each side, validated without labels (:func:`vecbridge.pairing.learned.check_map`):
    a map that fails is refused (:class:`~vecbridge.errors.CheckFailed`) unless ``force``, and the artifact records
    the validation either way (``metadata["validation"]``) and that its anchors are pseudo-pairs."""
    from ..pairing.learned import UNPAIRED_SAMPLE, check_unsupervised, unsupervised_fit

    if source is None or target is None:
        raise InputError("the unsupervised pairing needs a source and a target collection")
    src, tgt = open_collection(source), open_collection(target)
    a, b, est = unsupervised_fit(src, tgt, sample=n or UNPAIRED_SAMPLE, seed=seed, params=params)
    validation = check_unsupervised(est.procrustes_, src, tgt, a, b, seed=seed, force=force)
    info_s, info_t = src.info(), tgt.info()
    alignment = Alignment.from_estimator(
        est.procrustes_, source_model=source_model, target_model=target_model, metric=info_t.metric,
        normalization="none", anchors={"method": "unsupervised mini-vec2vec", "pseudo_pairs": True,
                                       "n_source": len(a), "n_target": len(b), "seed": seed, "params": params},
        source={"url": src.display_url, "dim": info_s.dim, "count": info_s.count},
        target={"url": tgt.display_url, "dim": info_t.dim, "count": info_t.count}, validation=validation)
    return attach_spaces(alignment, *(fingerprint_vectors(side.vectors, model=model, normalization="none",
                                                          prefixes=pre, seed=seed)
                                      for side, model, pre in zip((a, b), (source_model, target_model), prefixes)))


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


def _grown(source, target, spec: PairSpec, *, n: int | None, seed: int, params: dict, force: bool, holdout: float,
           normalization: str, keep_pairs: bool, on_step) -> tuple[PairAccumulator, int, dict]:
    """The pairs of a fit on seed pairs: GEH's links grown from them (as ``link --pairs geh:SEEDS``, validated without
    labels), refined over ``n`` vectors a side (:meth:`vecbridge.pairing.table.Pairing.fit_sample`: the links are
    cut for precision, a map needs coverage), gathered as :func:`_accumulate` gathers stored pairs."""
    from ..pairing.learned import UNPAIRED_SAMPLE

    src, tgt, described, metric = open_pair(source, target, spec)
    found = pairing(spec).fit_sample(src, tgt, spec, Request(n=n or UNPAIRED_SAMPLE, seed=seed, params=params,
                                                             force=force, on_step=on_step))
    acc = PairAccumulator(holdout, normalization, keep_pairs=keep_pairs)
    acc.add(found.source, found.target)
    refinement = found.meta["refinement"]
    return acc, refinement["links"], {"where": f"between {src.display_url} and {tgt.display_url}", "metric": metric,
                                      "described": {**described, "validation": found.meta.get("validation"),
                                                    "refinement": refinement}, "sides": (src, tgt)}


def fit_unit(unit, job: PairJob, *, holdout: float, normalization: str, keep_pairs: bool):
    """The fit's body (:mod:`vecbridge.runtime.engine`): one unit's pairs into a :class:`PairAccumulator`. Reports
    ``(pairs in the batch, source records read so far)``; returns ``(accumulator, source records read)``."""
    source, target = job.open()
    batches, reader = unit.pairs(source, target, job)
    acc = PairAccumulator(holdout, normalization, keep_pairs=keep_pairs)
    for s_batch, t_batch in batches:
        acc.add(s_batch, t_batch)
        yield len(s_batch), reader.n_read
    yield 0, reader.n_read   # the batches after the last pair count as read too
    return acc, source.n_read


def _refuse_what_cannot_split(spec: PairSpec, row: Pairing, chosen, max_pairs) -> None:
    """On an engine spread over processes the fit is one streamed pass over every stored pair: what is not is refused
    in one line, before any work."""
    if not row.splits:
        raise InputError(f"--engine ray fits on every stored pair (ids, field:NAME, file:PATH); the {spec.kind} "
                         f"pairing works on a sample of each side on one machine: use --engine local")
    if max_pairs is not None:
        raise InputError("--engine ray fits on every pair in one streamed pass; --max-pairs fits on a sample: drop "
                         "it, or use --engine local")
    if not chosen.streams:
        raise InputError(f"--method {chosen.name} holds its pairs in memory on one machine (it does not fit on "
                         f"streamed sums): use --engine local")


def _accumulate(source, target, spec: PairSpec, row: Pairing, engine, *, batch_size: int, max_pairs, seed: int,
                body, on_start, on_batch) -> tuple[PairAccumulator, int, dict]:
    """Plan the units of the pairs (a links file that carries its vectors: one, read here), run the fit's body over
    them on the engine, merge what they gathered in unit order. Returns ``(accumulator, source records examined,
    what the artifact says of where the pairs came from)``."""
    links = row.vectors(spec)
    if links is not None:
        if engine.remote:
            raise InputError(f"{spec.value} carries the vectors of its pairs: the fit reads no collection, so there is "
                             f"nothing to spread over Ray: use --engine local")
        plan = carried(links, spec, batch_size, max_pairs)
        results = LOCAL.run(body, plan.units, shared=plan.job, on_report=plan.progress(on_batch))
        about = {"where": f"in {spec.value}", "metric": links.meta.get("metric", "cosine"), "links": links,
                 "sides": (links.source_vectors, links.target_vectors)}
    else:
        src, tgt, described, metric = open_pair(source, target, spec)
        engine.require((src, "source"), (tgt, "target"))
        with engine.session():
            plan = row.plan(src, tgt, spec, engine, batch_size=batch_size, limit=max_pairs, seed=seed)
            if on_start:
                count = described["source"]["count"]
                on_start(plan.listed if plan.split and plan.listed else min(count, max_pairs) if max_pairs else count)
            results = engine.run(body, plan.units, shared=plan.job, on_report=plan.progress(on_batch))
        about = {"where": f"between {src.display_url} and {tgt.display_url}", "metric": metric,
                 "described": described, "sides": (src, tgt)}
    acc = PairAccumulator(body.keywords["holdout"], body.keywords["normalization"], body.keywords["keep_pairs"])
    for part, _ in results:   # in unit order
        acc.merge(part)
    return acc, sum(read for _, read in results), about


def fit_alignment(source, target, *, pairs: "str | PairSpec" = "ids", method: str = "orthogonal", center: bool = False,
                  scale: bool = False, alpha: float = 0.01, normalization: str = "none", holdout: float = 0.0,
                  max_pairs: int | None = None, seed: int = 0, batch_size: int = BATCH_SIZE,
                  source_model: str | None = None, target_model: str | None = None,
                  params: dict | None = None, force: bool = False, on_batch: Callable[[int], None] | None = None,
                  on_start: Callable[[int], None] | None = None, engine=None, source_prefixes: dict | None = None,
                  target_prefixes: dict | None = None, on_step: Callable[[str], None] = lambda s: None) -> Alignment:
    """Fit a map from ``source``'s space to ``target``'s space on corresponding records, without holding them all.

    ``pairs`` is ``ids``, ``field:NAME``, ``file:PATH`` (a CSV/JSON file of id pairs, or a ``.npz`` links file from
    ``vecbridge link``: one that carries vectors, from re-embedding or a reference corpus, needs no collections) or
    ``unsupervised`` (see :class:`~vecbridge.linking.PairSpec`).
    ``holdout`` keeps a deterministic fraction of pairs (by id hash) out of the fit so that ``evaluate`` can measure
    on unseen items; ``max_pairs`` fits on a seeded uniform sample of the source instead of a full scan.

    ``pairs="geh:SEEDS"`` fits on GEH's links grown from a few seed pairs ("Vector Linking via Cross-Model Local
    Isometric Consistency", 2026), refined over samples of ``max_pairs`` (default 10,000) records of each side as in
    "Word Translation Without Parallel Data" (2018) where the refined map passes validation too; links that never
    took off or whose map fails validation are refused unless ``force``. ``on_step`` hears its steps.

    ``pairs="unsupervised"`` needs no correspondences at all: mini-vec2vec ("mini-vec2vec: Scaling Universal
    Geometry Alignment with Linear Transformations", Dar 2025; :class:`~vecbridge.align.MiniVec2Vec` with ``params``)
    on a sample of ``max_pairs`` (default 10,000) records
    of each collection; the artifact holds its nearest orthogonal map (with both means). On wordnet this keeps
    retention@10 0.78 where refitting Procrustes on its mutual-nearest-neighbour links keeps 0.72
    (``bench/linking_retention.py``). Such a map can be silently wrong, so it is validated without labels
    (:mod:`vecbridge.align.validation`) and refused with :class:`~vecbridge.errors.CheckFailed` when it fails, unless
    ``force`` (then the artifact records the failed validation and ``migrate`` warns before using it).

    ``engine`` (:mod:`vecbridge.runtime.engine`; the local one by default) runs the fit: on Ray each task streams
    the pairs of one key range of the source (or a chunk of a listed file) into moments, merged in range order
    and fitted once; the map equals the single-process fit up to float64 rounding. A sample (``max_pairs``, the
    unsupervised pairing), a method that holds its pairs in memory (clustered) and a links file that carries its
    vectors are refused there in one line.
    """
    engine = engine_of(engine)
    spec = PairSpec.parse(pairs, allowed=FIT_PAIRS)
    row, chosen = pairing(spec), method_of(method)
    if engine.remote:
        _refuse_what_cannot_split(spec, row, chosen, max_pairs)
    if params and not row.takes_params:
        raise InputError("estimator parameters apply to the geh and unsupervised pairings only")
    if row.pseudo:
        return _fit_unsupervised(source, target, n=max_pairs, seed=seed, params=params or {},
                                 source_model=source_model, target_model=target_model, force=force,
                                 prefixes=(source_prefixes, target_prefixes))
    check_fit_options(normalization, holdout)
    body = partial(fit_unit, holdout=holdout, normalization=normalization, keep_pairs=not chosen.streams)
    if row.refined:
        acc, n_examined, about = _grown(source, target, spec, n=max_pairs, seed=seed, params=params or {},
                                        force=force, on_step=on_step, **body.keywords)
    else:
        if not chosen.streams and max_pairs is None:   # a method that does not stream holds its pairs in memory
            max_pairs = CLUSTERED_MAX_PAIRS
        acc, n_examined, about = _accumulate(source, target, spec, row, engine, batch_size=batch_size,
                                             max_pairs=max_pairs, seed=seed, body=body, on_start=on_start,
                                             on_batch=on_batch)
    alignment = freeze_fit(acc, n_examined=n_examined, spec=spec, chosen=chosen, where=about["where"],
                           max_pairs=max_pairs, seed=seed, center=center, scale=scale, alpha=alpha,
                           metric=about["metric"], links=about.get("links"), source_model=source_model,
                           target_model=target_model, described=about.get("described", {}))
    return attach_spaces(alignment, *(_fingerprint(side, model=model, normalization=normalization, prefixes=pre,
                                                   seed=seed)
                                      for side, model, pre in zip(about["sides"], (source_model, target_model),
                                                                  (source_prefixes, target_prefixes))))


def _fingerprint(side, **about):
    """A fingerprint of one side of the fit: a sample of its collection, or the vectors a links file carries."""
    if isinstance(side, Collection):
        return fingerprint_collection(side, **about)
    return fingerprint_vectors(side, **about)


def fit_to_file(output, source, target, *, engine=None, **options) -> tuple[Alignment, Path]:
    """:func:`fit_alignment` on the ``engine`` given (see :mod:`vecbridge.runtime.engine`), then save the artifact
    at ``output``; a folder that cannot take the file is refused before the fit, not after it."""
    engine = engine_of(engine)
    require_writable(output, "the alignment", "choose another output path")
    alignment = fit_alignment(source, target, engine=engine, **options)
    return alignment, alignment.save(output)
