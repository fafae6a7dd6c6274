"""The pairings a user can choose, in one table read by ``fit``, ``link``, ``evaluate``, ``report`` and ``merge``.

Each row (:class:`Pairing`) says, for one kind of :class:`~vecbridge.linking.PairSpec`, what it needs, how it streams
pair batches from two collections (:attr:`Pairing.stream`), how it is cut into units for an engine
(:attr:`Pairing.units`; None: it is not, and a job spread over processes refuses it), how it draws a sample of
pairs (:attr:`Pairing.sample`: what ``link`` writes and ``report`` measures) and what it is called. The grammar and
the artifact's label (``describe()``) stay with :class:`~vecbridge.linking.PairSpec`; a job asks this table the rest.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from ..connectors.base import Collection, VectorBatch
from ..errors import InputError
from ..linking.pairspec import KINDS, PairSpec
from ..quality.compatibility import MIN_PAIRS
from ..runtime.engine import engine_of
from ..runtime.models import ModelOptions
from .learned import UNPAIRED_SAMPLE
from .pairs import _source_batches, pairs_by_field, pairs_by_ids, pairs_from_list, pairs_through_index, read_pairs_file
from .sampling import sample_pairs
from .units import PairJob, Plan, field_index, listed_units, record_units

#: records per read (and per lookup in the other collection) when a job names no batch size
BATCH_SIZE = 2000
#: pairs a compatibility report samples when not told (stored or re-embedded pairs: :meth:`Pairing.sample_size`)
REPORT_SAMPLE = 5000


@dataclass
class Request:
    """What drawing a sample of pairs may use: its size and seed, the models, where they run (``models``) and the
    text field, the estimator's parameters, ``force`` (keep grown pairs whose map fails validation), ``min_pairs``
    (fewer grown pairs are an error) and ``on_step`` (a line per step)."""

    n: int = UNPAIRED_SAMPLE
    seed: int = 0
    model: str | None = None
    old_model: str | None = None
    text_field: str | None = "text"
    params: dict = field(default_factory=dict)
    force: bool = False
    min_pairs: int = 0
    on_step: Callable[[str], None] = lambda s: None
    models: ModelOptions = field(default_factory=ModelOptions)


@dataclass
class Anchors:
    """A sample of pairs: row i of ``source`` (old-model vectors) pairs with row i of ``target`` (new-model vectors).
    ``records``: the target rows are records of the target collection (else named ``reembed:ID``, ``ref:J``: the
    vectors must travel with the links). ``meta`` is what a links file records, ``reason`` and ``diagnostics`` what
    a report says of them; ``examined``: the source records gone through. ``sample_map``: pseudo-pairs only, the whole
    source sample and the map a fit saves from it (a report serves its queries over all of it, not the pairs)."""

    source: VectorBatch
    target: VectorBatch
    records: bool = True
    confidence: np.ndarray | None = None
    meta: dict = field(default_factory=dict)
    reason: str = ""
    diagnostics: dict | None = None
    pseudo: bool = False
    examined: int = 0
    sample_map: tuple | None = None

    def __len__(self) -> int:
        return len(self.source)


@dataclass(frozen=True)
class Pairing:
    """One way of pairing records (see the module docstring)."""

    kind: str
    #: what a report calls its correspondences (``correspondences.mode``)
    report_mode: str
    #: what a links file calls them (``Links.mode``; ``{spec}``: the pairing as written)
    link_mode: str
    #: what it needs besides the source: ``target`` (a collection), ``model``, ``old_model``, ``text_field``
    needs: tuple[str, ...]
    #: ``sample(source, target, spec, request, engine)`` -> :class:`Anchors`
    sample: Callable
    #: ``stream(source, target, spec, *, batch_size, limit, seed, index)`` -> pair batches; None: not read from stores
    stream: Callable | None = None
    #: ``units(source, spec, n, batch_size, limit, seed)``: one unit (n None) or ``n``; None: one process only
    units: Callable | None = None
    #: the units share the target's payload-key index (built once per job on a split plan)
    indexed: bool = False
    #: ``listed(spec)`` -> the id pairs it lists (a file of pairs), else None
    listed: Callable | None = None
    #: ``vectors(spec)`` -> :class:`~vecbridge.linking.links.Links` that carry their vectors (no store read), or None
    vectors: Callable = lambda spec: None
    #: its estimator takes ``--param`` values
    takes_params: bool = False
    #: its pairs are a map's own guesses (pseudo-pairs), not the same items
    pseudo: bool = False
    #: its links are cut for precision: a fit refines them over samples of both sides first (:meth:`fit_sample`)
    refined: bool = False
    #: a report takes fewer pairs than this for none found, and looks further
    report_min: int = 0
    #: for a report's message: which records a query must name to count
    queries_hint: str = "linked items"

    @property
    def splits(self) -> bool:
        """Whether a job spread over processes can cut it into units (key ranges, chunks of a list)."""
        return self.units is not None

    def ready(self, spec: PairSpec, target, request: Request) -> bool:
        """Whether everything it needs is given (a seed file, a target, the models)."""
        if KINDS[self.kind][0] and not spec.value:
            return False
        return all(target is not None if n == "target" else getattr(request, n) for n in self.needs)

    def sample_size(self, asked: int | None) -> int:
        """What a report samples: ``asked``, else :data:`REPORT_SAMPLE` pairs, or where a map is fitted on samples of
        both unpaired sides (unsupervised, grown links) as many records per side as ``fit`` reads
        (:data:`~vecbridge.pairing.learned.UNPAIRED_SAMPLE`): the report judges the map the user will fit."""
        return asked or (UNPAIRED_SAMPLE if self.pseudo or self.refined else REPORT_SAMPLE)

    def refiner(self, source: Collection, target, found: Anchors, request: Request) -> Callable | None:
        """Where the row's links are cut for precision (:attr:`refined`), ``refine(rows)``: the pairs a map of the
        links ``rows`` of ``found`` is fitted on, ``(source side, target side, record)``
        (:func:`~vecbridge.pairing.learned.refine_linked`), refined over samples that leave out the other links'
        records (a report measures the map on them); else None."""
        if not self.refined:
            return None
        from .learned import refine_linked

        def refine(rows: np.ndarray):
            others = np.ones(len(found), dtype=bool)
            others[rows] = False
            return refine_linked(source, target, found.source.take(rows), found.target.take(rows), sample=request.n,
                                 seed=request.seed, on_step=request.on_step,
                                 leave_out=(found.source.take(others).ids, found.target.take(others).ids))
        return refine

    def fit_sample(self, source: Collection, target, spec: PairSpec, request: Request, engine=None) -> Anchors:
        """The pairs a map is fitted on: :attr:`sample`'s, all of them refined where the row says (:meth:`refiner`),
        as ``fit`` and ``upgrade start`` refine them; ``meta["refinement"]`` records what was done."""
        found = self.sample(source, target, spec, request, engine)
        refine = self.refiner(source, target, found, request)
        if refine is None:
            return found
        A, B, record = refine(np.arange(len(found)))
        if not record["kept"]:
            return replace(found, meta={**found.meta, "refinement": record})
        return replace(found, source=A, target=B, confidence=None, meta={**found.meta, "refinement": record},
                       reason=f"{found.reason}, refined to {len(A):,} mutual nearest pairs over samples of both sides")

    def name(self, spec: PairSpec) -> str:
        """The pairing as a checkpoint names it: a file by its name, never its folder."""
        return Path(spec.value).name if self.listed is not None else str(spec)

    def plan(self, source: Collection, target: Collection, spec: PairSpec, engine, *, batch_size: int = BATCH_SIZE,
             limit: int | None = None, seed: int = 0) -> Plan:
        """The units of a job over these pairs: one (the whole source, or a seeded sample of ``limit`` records) on
        an engine that runs in this process, ``engine.units`` key ranges or chunks (every pair) on one that does
        not (call it inside ``engine.session()``)."""
        split = bool(engine.remote)
        units = self.units(source, spec, engine.units if split else None, batch_size, None if split else limit, seed)
        index = field_index(target, spec.value, engine, batch_size) if split and self.indexed else None
        job = PairJob(engine.portable(source), engine.portable(target), spec, self.stream, batch_size, index)
        return Plan(units, job, split)


# --- the streams of the stored pairings ------------------------------------------------------------------------------
def _ids_stream(source, target, spec, *, batch_size, limit, seed, index=None):
    return pairs_by_ids(source, target, batch_size=batch_size, limit=limit, seed=seed)


def _field_stream(source, target, spec, *, batch_size, limit, seed, index=None):
    if index is None:
        return pairs_by_field(source, target, spec.value, batch_size=batch_size, limit=limit, seed=seed)
    return pairs_through_index(_source_batches(source, batch_size, limit, seed), target, spec.value, index)


def _file_stream(source, target, spec, *, batch_size, limit, seed, index=None):
    """The listed pairs (a seeded sample of ``limit`` of them), read now; their records fetched as consumed."""
    (unit,) = listed_units(source, spec, None, batch_size, limit, seed)
    return pairs_from_list(source, target, unit.items, batch_size=batch_size)


def _vector_links(spec: PairSpec):
    """A links file whose anchors carry their vectors (re-embedded or reference-corpus anchors), else None."""
    if spec.value.lower().endswith(".npz"):
        from ..linking.links import Links

        links = Links.load_npz(spec.value)
        return links if links.has_vectors else None
    return None


# --- samples -------------------------------------------------------------------------------------------------------
def _stored(source, target, spec, request: Request, engine, k: int | None) -> tuple[Anchors, bool]:
    """``k`` pairs (None: every one) as the engine's plan samples them (:func:`~vecbridge.pairing.sampling.
    sample_pairs`); and whether the plan was split."""
    engine = engine_of(engine)
    row = PAIRINGS[spec.kind]
    plan = row.plan(source, target, spec, engine, limit=k, seed=request.seed)
    s, t, read = sample_pairs(plan, engine, k=k, seed=request.seed)
    return Anchors(s, t, examined=read), plan.split


def _shared(how: str, anchors: Anchors, split: bool, sampled: str) -> Anchors:
    anchors.reason = (f"{len(anchors):,} old records that {how}, drawn uniformly from all such records by Ray tasks "
                      f"over the {anchors.examined:,} old records" if split else sampled)
    return anchors


def _ids_sample(source, target, spec, request: Request, engine=None) -> Anchors:
    anchors, split = _stored(source, target, spec, request, engine, request.n)
    return _shared("also exist in the new collection", anchors, split,
                   f"{len(anchors):,} of {anchors.examined:,} sampled old ids also exist in the new collection")


def _field_sample(source, target, spec, request: Request, engine=None) -> Anchors:
    anchors, split = _stored(source, target, spec, request, engine, request.n)
    return _shared(f"share payload field {spec.value!r}", anchors, split,
                   f"{len(anchors):,} sampled records share payload field {spec.value!r}")


def _file_sample(source, target, spec, request: Request, engine=None) -> Anchors:
    """Every listed pair: the file is the sample."""
    return _stored(source, target, spec, request, engine, None)[0]


def _reembed_sample(source, target, spec, request: Request, engine=None) -> Anchors:
    from .reembed import reembed_pairs

    model, text_field = request.model, request.text_field
    if not (model and text_field):
        raise InputError("re-embedding needs the new model (a name, a local path or module:function) and the "
                         "payload field that holds the text")
    request.on_step(f"re-embedding up to {request.n:,} stored texts ({text_field!r}) with {model}")
    olds, news = reembed_pairs(source, request.models.load(model), text_field=text_field, n=request.n,
                               seed=request.seed)
    return Anchors(olds, VectorBatch([f"reembed:{i}" for i in olds.ids], news), records=False,
                   meta={"model": model, "text_field": text_field},
                   reason=f"{len(olds):,} stored texts ({text_field!r}) re-embedded with {model}")


def _reference_sample(source, target, spec, request: Request, engine=None) -> Anchors:
    from .reembed import read_texts, reference_pairs

    if not (request.model and request.old_model):
        raise InputError("a reference corpus needs both encoders: the old model and the new model")
    texts = read_texts(spec.value, limit=request.n)
    request.on_step(f"embedding {len(texts):,} reference texts with both models")
    X, Y = reference_pairs(texts, request.models.load(request.old_model), request.models.load(request.model))
    ids = [f"ref:{j}" for j in range(len(texts))]
    return Anchors(VectorBatch(ids, X), VectorBatch(ids, Y), records=False,
                   meta={"model": request.model, "old_model": request.old_model})


def _geh_sample(source, target, spec, request: Request, engine=None) -> Anchors:
    """GEH grown from the seed pairs in ``spec.value``; links whose bootstrapping never took off or whose map fails
    validation are refused unless ``force`` (the links record the validation either way)."""
    from .learned import check_geh, geh_fit

    a, b, geh = geh_fit(source, target, spec.value, sample=request.n, seed=request.seed, params=request.params,
                        force=request.force, on_step=request.on_step)
    links, n_seeds = geh.links_, int(geh.is_seed_.sum())
    if len(links) < request.min_pairs:
        raise InputError(f"GEH grew only {len(links)} links from {n_seeds} seeds: too few to fit a map")
    request.on_step("validating the map of the links (label-free)")
    checked = check_geh(source, target, a, b, geh, seed=request.seed, force=request.force)
    validation = {k: v for k, v in checked.items() if k != "grown_links"}   # the report's (the links add the count)
    precision = getattr(geh, "estimated_precision_", None)
    how = (f"estimated precision {precision:.2f}" if precision is not None
           else f"mean confidence {float(np.mean(geh.confidence_)):.2f}")
    return Anchors(a.take(links[:, 0]), b.take(links[:, 1]), confidence=np.asarray(geh.confidence_, np.float32),
                   meta={"n_seeds": n_seeds, "validation": checked},
                   diagnostics={"validation": validation, "sampled": len(a)},
                   reason=f"no shared ids; GEH grew {len(links):,} links from {n_seeds} seed pairs ({how})")


def _unsupervised_sample(source, target, spec, request: Request, engine=None) -> Anchors:
    """mini-vec2vec on a sample of each side, then the mutual nearest neighbours under its map as pseudo-pairs; a
    map that fails validation is refused unless ``force``."""
    from .learned import check_unsupervised, pseudo_pairs, unsupervised_fit

    request.on_step(f"unsupervised alignment (mini-vec2vec) of up to {request.n:,} vectors per side")
    a, b, est = unsupervised_fit(source, target, sample=request.n, seed=request.seed, params=request.params)
    request.on_step("validating the unsupervised map (label-free)")
    validation = check_unsupervised(est, source, target, a, b, seed=request.seed, force=request.force)
    pairs, scores = pseudo_pairs(est, a, b)
    frac = len(pairs) / max(min(len(a), len(b)), 1)
    diag = {"mutual_pairs": int(len(pairs)), "mutual_fraction": float(frac),
            "mean_csls": float(np.mean(scores)) if len(scores) else 0.0, "validation": validation}
    return Anchors(a.take(pairs[:, 0]), b.take(pairs[:, 1]), pseudo=True, diagnostics=diag,
                   confidence=np.clip((scores + 1) / 2, 0, 1).astype(np.float32),   # CSLS in [-1, 1] -> [0, 1]
                   sample_map=(a, est.procrustes_),
                   meta={"pseudo_pairs": True, "validation": validation},
                   reason=f"no shared ids, texts or seeds; mini-vec2vec aligned {len(a):,} and {len(b):,} unpaired "
                          f"vectors and {len(pairs):,} mutual nearest neighbours ({frac:.0%}) serve as pseudo-pairs")


PAIRINGS: dict[str, Pairing] = {p.kind: p for p in (
    Pairing("ids", "shared-ids", "ids", ("target",), _ids_sample, _ids_stream, record_units, report_min=MIN_PAIRS,
            queries_hint="items present in both collections (the same id in each)"),
    Pairing("field", "payload-key", "{spec}", ("target",), _field_sample, _field_stream, record_units, indexed=True,
            report_min=1, queries_hint="old-collection items whose payload key is found in the new collection"),
    Pairing("file", "pairs-file", "pairs", ("target",), _file_sample, _file_stream, listed_units,
            listed=lambda spec: read_pairs_file(spec.value), vectors=_vector_links,
            queries_hint="old-collection items named in the pairs file"),
    Pairing("reembed", "re-embedded-sample", "reembed", ("model", "text_field"), _reembed_sample,
            queries_hint="the sampled old-collection items whose texts were re-embedded"),
    Pairing("reference", "reference-corpus", "reference", ("model", "old_model"), _reference_sample),
    Pairing("geh", "geh", "geh", ("target",), _geh_sample, takes_params=True, refined=True,
            queries_hint="old-collection items linked by GEH to the new collection"),
    Pairing("unsupervised", "unsupervised", "unsupervised", ("target",), _unsupervised_sample, takes_params=True,
            pseudo=True),
)}

#: the pairings read from the two collections themselves (the others need models or estimators)
STORED = tuple(k for k, p in PAIRINGS.items() if p.stream is not None)


def pairing(spec: "str | PairSpec") -> Pairing:
    """The row of a pairing (a spelling, or a parsed :class:`~vecbridge.linking.PairSpec`)."""
    return PAIRINGS[PairSpec.parse(spec).kind]
