"""What the jobs return: typed results for Python callers, the same JSON for the CLI.

``result.written`` reads as any attribute; ``result.as_dict()`` is what ``--json`` prints (keys unchanged from the
plain dicts these results replace, and ``result["written"]`` still works for code written against those, nested
sections included: ``report["verdict"]["verdict"]`` is ``report.verdict.verdict``).

A section the old dict only had in some runs (``report.retrieval`` only with queries, say) is an optional field
made with :func:`omit_if_none`: None means "absent", so ``as_dict()`` leaves the key out, ``"retrieval" in report``
is False and ``report["retrieval"]`` raises KeyError, as with the dict. Other None values (``report.new`` without a
new collection) are printed as ``null``, as before.
"""
from __future__ import annotations

import copy
import dataclasses
import types
import typing
from dataclasses import dataclass, field


def omit_if_none(**kw):
    """An optional field whose key is absent from :meth:`JobResult.as_dict` (and from ``in``, ``[]``, ``get``) while
    it is None. Keyword-only, so it may sit between required fields where the JSON has it."""
    return field(default=None, kw_only=True, metadata={"omit_if_none": True}, **kw)


def _plain(value):
    """``value`` with every result dataclass in it turned into its dict (what :func:`dataclasses.asdict` does, but
    calling :meth:`JobResult.as_dict` so that absent sections stay absent)."""
    if isinstance(value, JobResult):
        return value.as_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_plain(v) for v in value)
    return copy.deepcopy(value)


def _typed(hint, value):
    """``value`` (as found in a JSON dict) as the type ``hint`` names: result dataclasses rebuilt, recursively through
    ``X | None``, ``list[X]`` and ``dict[str, X]``; anything else as it is."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return _typed(kinds[0], value) if len(kinds) == 1 else value
    if isinstance(hint, type) and issubclass(hint, JobResult):
        return value if isinstance(value, hint) else hint.from_dict(value)
    if origin is list and args:
        return [_typed(args[0], v) for v in value]
    if origin is dict and len(args) == 2:
        return {k: _typed(args[1], v) for k, v in value.items()}
    return value


class JobResult:
    """Shared behaviour of the result dataclasses: ``as_dict()`` for JSON, read-only dict-style access by key."""

    def _absent(self, name: str) -> bool:
        """Whether the key ``name`` is left out of the dict (an :func:`omit_if_none` field that is None)."""
        return self.__dataclass_fields__[name].metadata.get("omit_if_none", False) and getattr(self, name) is None

    def keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self) if not self._absent(f.name)]

    def items(self) -> list[tuple]:
        return [(k, getattr(self, k)) for k in self.keys()]

    def __iter__(self):
        return iter(self.keys())

    def as_dict(self) -> dict:
        return {k: _plain(v) for k, v in self.items()}

    @classmethod
    def from_dict(cls, data: dict):
        """The result from its :meth:`as_dict` (a ``--json`` output read back, say)."""
        hints = typing.get_type_hints(cls)
        return cls(**{k: _typed(hints.get(k), v) for k, v in data.items()})

    def __getitem__(self, key: str):
        if key not in self.__dataclass_fields__ or self._absent(key):
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value) -> None:
        if key not in self.__dataclass_fields__:
            raise KeyError(f"{type(self).__name__} has no field {key!r}")
        setattr(self, key, value)

    def __contains__(self, key: str) -> bool:
        return key in self.__dataclass_fields__ and not self._absent(key)

    def get(self, key: str, default=None):
        return getattr(self, key) if key in self else default


@dataclass
class MigrationPlan(JobResult):
    """What ``migrate --dry-run`` would do: counts, dimensions, an estimate of the read+map time, the target size."""

    source: str
    target: str
    count: int
    source_dim: int
    target_dim: int
    metric: str
    batch_size: int
    field: str | None
    estimated_read_map_s: float
    estimated_target_bytes: int
    notes: list[str] = field(default_factory=list)


@dataclass
class DryRun(JobResult):
    plan: MigrationPlan
    dry_run: bool = True


@dataclass
class MigrationResult(JobResult):
    source: str
    target: str
    count: int              # records in the source when the run started
    read: int               # records read, this run and the runs it resumed
    written: int            # records written by this run
    resumed_from: int       # records the interrupted runs had written
    seconds: float
    vectors_per_s: float | None
    field: str | None
    batch_size: int
    space: dict | None = None   # the source's space check (vecbridge.runtime.provenance.SpaceCheck)


@dataclass
class MergeResult(JobResult):
    a: str
    b: str
    into: str
    policy: str
    a_count: int
    b_count: int
    written: int
    linked: int             # B records that absorbed their linked A record
    renamed: int            # unlinked A records written as "a:<id>" because B had the id
    count: int              # records the merged collection holds
    seconds: float
    space: dict | None = None   # both inputs' space checks


@dataclass
class Check(JobResult):
    name: str
    ok: bool
    detail: str


@dataclass
class VerifyResult(JobResult):
    ok: bool
    source: str
    target: str
    checks: list[Check]
    space: dict | None = None   # each side's space check (vecbridge.runtime.provenance.SpaceCheck)


# --- evaluate ----------------------------------------------------------------------------------------------------
@dataclass
class PairScores(JobResult):
    """How well mapped old vectors find their own new vector among the evaluated ones: the number of pairs, top-1
    accuracy and mean rank of the true partner, and the mean paired cosine (:func:`vecbridge.metrics.pair_quality`)."""

    n: int
    top1: float
    mean_rank: float
    mean_cosine: float

    @classmethod
    def of(cls, quality) -> "PairScores":
        """From a :class:`vecbridge.metrics.PairQuality`."""
        return cls(n=quality.n, top1=quality.top1, mean_rank=quality.mean_rank, mean_cosine=quality.mean_cosine)


@dataclass
class EvaluationRetrieval(JobResult):
    """With queries: Recall@k of new-model queries over the mapped old vectors and over the native new vectors,
    their ratio (``retention``: None, with ``unreliable`` saying why, when the native recall is too low for it to
    mean anything), and the top-k overlap of the two result lists."""

    recall_mapped: float
    recall_native: float
    retention: float | None
    unreliable: str | None
    overlap: float
    k: int
    n_queries: int


@dataclass
class Evaluation(JobResult):
    """What :func:`vecbridge.jobs.evaluate_alignment` measured: ``pairs`` (the alignment) and ``no_map`` (the raw old
    vectors, only when the dimensions agree) on ``n_pairs`` pairs, held out from the fit or not; ``retrieval`` only
    with queries; ``passed`` only once the CLI has applied its thresholds."""

    n_pairs: int
    held_out: bool
    metric: str
    pairs: PairScores
    no_map: PairScores | None = omit_if_none()
    retrieval: EvaluationRetrieval | None = omit_if_none()
    passed: bool | None = omit_if_none()


# --- report ------------------------------------------------------------------------------------------------------
@dataclass
class CorrespondenceSummary(JobResult):
    """How old and new records were paired (``mode``) and why that mode, how many pairs (``n``) and how they were
    split (``train`` to fit, ``held_out`` to measure). ``pseudo``: the partners are unsupervised estimates, not the
    same items; only then ``mutual_pairs``, ``mutual_fraction`` and ``mean_csls`` say how many mutual nearest
    neighbours the unsupervised map found and how confidently. ``validation``: for unsupervised and GEH
    correspondences, the label-free validation of their map (``vecbridge.align.validation.MapValidation`` as a dict,
    plus which rows it used); a failed one makes the verdict NO-GO. ``refinement``: GEH's links refined as a fit
    refines them (links, mutual nearest pairs, whether kept and else why); the report then judges the refined map.
    ``sampled``: GEH's, the old records it sampled (its ``n`` links are the ones it could tie with confidence)."""

    mode: str
    reason: str
    n: int
    train: int
    held_out: int
    pseudo: bool
    mutual_pairs: int | None = omit_if_none()
    mutual_fraction: float | None = omit_if_none()
    mean_csls: float | None = omit_if_none()
    validation: dict | None = omit_if_none()
    refinement: dict | None = omit_if_none()
    sampled: int | None = omit_if_none()


@dataclass
class Top1Curve(JobResult):
    """Held-out top-1 as the candidate pool grows: the held-out items alone, then with the other sampled items'
    new vectors as distractors."""

    pool_sizes: list[int]
    top1: list[float]


@dataclass
class HeldOutQuality(PairScores):
    """The judged map on the held-out pairs: pair quality among the ``pool`` held-out items, the mean squared
    residual, a 20-bin histogram of mapped-vs-new cosines over [-1, 1], top-1 as the pool grows, and top-1 predicted
    among the collection's ``full_size`` items (``top1_predicted``: each item's rank among every sampled item,
    carried to that size; :mod:`vecbridge.quality.at_size`), and how far the collection's own top-1 may lie from it
    (``top1_margin``: half-width of a 95% interval from the number of held-out items)."""

    pool: int
    residual: float
    cosine_histogram: list[int]
    top1_curve: Top1Curve
    top1_predicted: float
    full_size: int
    top1_margin: float | None = None


@dataclass
class FitDiagnostics(JobResult):
    """The orthogonal Procrustes fit on the training pairs (whatever method is judged): in-sample and relative
    residual, the dot-product discrepancy ``delta``, the Procrustes bound and whether it is vacuous at this
    dimension, the singular values of X^T Y, and whether both sides were centred."""

    residual: float
    relative_residual: float
    delta: float
    bound: float
    bound_vacuous: bool
    singular_values: list[float]
    center: bool


@dataclass
class Thresholds(JobResult):
    """What the verdict was judged against (:data:`vecbridge.quality.verdict.THRESHOLDS`): GO needs both ``go_*``,
    NO-GO any ``no_go_*``, or a mapped recall below staying on the old model by more than ``worse_than_staying``."""

    go_top1: float
    go_retention: float
    no_go_top1: float
    no_go_retention: float
    worse_than_staying: float


@dataclass
class LearningCurve(JobResult):
    """Quality of orthogonal fits on the first ``n_anchors`` training pairs: held-out top-1 among the ``pool``
    held-out items and, only with queries, recall retention (None at a size where it is unreliable)."""

    n_anchors: list[int]
    top1: list[float]
    pool: int
    retention: list[float | None] | None = omit_if_none()


@dataclass
class ReportRetrieval(JobResult):
    """Recall retention@k of ``n_queries`` new-model queries (mapped old vectors / native new vectors) over the
    ``pool`` sampled items and sub-pools of it (one point per pool size), ``measured`` on the whole pool and
    ``predicted`` for all the queries of the collection's ``full_size`` documents (mapped and native Recall@k each
    carried to that size from the relevant documents' ranks in the pool; :mod:`vecbridge.quality.at_size`). When
    the whole pool gives no reliable ratio, ``measured`` and ``predicted`` are None and ``unreliable`` says why (the
    key exists only then)."""

    pool_sizes: list[float]
    retention: list[float]
    recall_mapped: list[float]
    recall_native: list[float]
    full_size: int
    pool: int
    measured: float | None
    predicted: float | None
    unreliable: str | None = field(default=None, kw_only=True)
    k: int
    n_queries: int

    def _absent(self, name: str) -> bool:
        if name == "unreliable":
            return self.unreliable is None and self.measured is not None
        return super()._absent(name)


@dataclass
class UnsupervisedRetrieval(JobResult):
    """With pseudo-pairs (no native pool to compare with): Recall@k of new-model queries over the ``pool`` sampled
    old vectors under the map a fit saves (``recall_mapped``), and predicted over the collection's ``full_size``
    records (``predicted``)."""

    k: int
    n_queries: int
    pool: int
    recall_mapped: float
    predicted: float | None = None
    full_size: int | None = None


@dataclass
class ThreeWay(JobResult):
    """Recall@k of the same queries three ways over the ``pool`` sampled items: staying on the old model, the mapped
    upgrade, and a full re-embed (None with pseudo-pairs: not measurable without true pairs)."""

    stay_on_old_model: float
    mapped_upgrade: float
    full_re_embed: float | None
    n_queries: int
    pool: int
    k: int


@dataclass
class NeighbourhoodOverlap(JobResult):
    """Without queries: the mean top-k overlap of the ``pool`` held-out items' neighbourhoods, mapped vs native."""

    k: int
    overlap: float
    pool: int


@dataclass
class Verdict(JobResult):
    """GO / CAUTION / NO-GO for the judged map, and the reason in one sentence."""

    verdict: str
    reason: str


@dataclass
class OptionCost(JobResult):
    """What one option costs under the report's cost model (:meth:`vecbridge.quality.options.Option.cost`): seconds of
    compute once and over the queries, the latency it adds to an uncached query, and extra storage."""

    one_off_s: float
    reembed_s: float
    query_total_s: float
    total_s: float
    added_latency_s_uncached: float
    extra_storage_bytes: float


@dataclass
class OptionRow(JobResult):
    """One row of the options table: the option's retention at the collection's size (``retention_measured``: on
    the report's pool, when it was carried), its costs, and (``excluded``) why the verdict rules it out, if it does."""

    name: str
    retention: float
    one_off_s: float
    reembed_s: float
    query_total_s: float
    total_s: float
    added_latency_s_uncached: float
    extra_storage_bytes: float
    retention_measured: float | None = omit_if_none()
    excluded: str | None = omit_if_none()


@dataclass
class Recommendation(JobResult):
    """The cheapest option that keeps ``target`` retention (or, when none does, the best and its ``shortfall``),
    never one the verdict rules out (``verdict_note`` says so when it rules some out), with the whole table."""

    choice: str
    meets_target: bool
    retention: float
    target: float
    shortfall: float | None = omit_if_none()
    cost: OptionCost
    reason: str
    options: list[OptionRow]
    verdict_note: str | None = omit_if_none()


@dataclass
class ReembedCurve(JobResult):
    """Retention after re-embedding each fraction of the items on top of ``first_stage``, per selection strategy
    (the keys of ``retention``), carried to the collection's size (``retention_measured``: on the pool)."""

    fractions: list[float]
    first_stage: str
    retention: dict[str, list[float]]
    retention_measured: dict[str, list[float]]


@dataclass
class RerankPoint(JobResult):
    """Re-ranking each query's top K with the new model: retention at the collection's size and on the pool, and
    the fraction of items that were candidates (what a cache of re-embedded candidates would hold)."""

    retention: float
    candidates_covered: float
    retention_measured: float


@dataclass
class CostAssumptions(JobResult):
    """The cost model the options are priced with: items, queries over the horizon, encoder seconds per call."""

    n_items: int
    n_queries: int
    encode_item_s: float
    encode_query_old_s: float


@dataclass
class QualityOptions(JobResult):
    """The options that keep more quality, measured on the headline's pool (``n_eval`` items, ``n_queries``
    queries) and carried to the collection's ``full_size`` as the headline is (``size_note``), the re-embedding and
    re-ranking curves (``rerank`` keyed by K), the cost model, and the recommendation."""

    target: float
    native_recall: float
    n_eval: int
    pool: int
    full_size: int
    n_queries: int
    size_note: str
    reembed_curve: ReembedCurve
    rerank: dict[str, RerankPoint]
    cost_model: CostAssumptions
    recommendation: Recommendation


@dataclass
class Report(JobResult):
    """What :func:`vecbridge.jobs.report.compatibility_report` found (see its module docstring). ``old_info`` and
    ``new_info`` are the collections' descriptions as their connectors give them (``new_info`` is None without a new
    collection). The sections after ``learning_curve`` depend on the inputs: ``retrieval`` with new-model queries
    and true pairs, ``retrieval_unsupervised`` with queries and pseudo-pairs, ``three_way`` with old-model queries
    too, ``neighbourhood_overlap`` without queries, ``options`` when retention could be measured."""

    old: str
    new: str | None
    method: str
    old_info: dict
    new_info: dict | None
    correspondences: CorrespondenceSummary
    held_out: HeldOutQuality
    fit: FitDiagnostics
    thresholds: Thresholds
    learning_curve: LearningCurve
    #: True when the user said the old model is retired (staying on it is then not an option)
    old_model_retired: bool | None = omit_if_none()
    retrieval: ReportRetrieval | None = omit_if_none()
    retrieval_unsupervised: UnsupervisedRetrieval | None = omit_if_none()
    three_way: ThreeWay | None = omit_if_none()
    neighbourhood_overlap: NeighbourhoodOverlap | None = omit_if_none()
    verdict: Verdict
    options: QualityOptions | None = omit_if_none()
    advice: list[str] = field(default_factory=list)
    #: the re-embedding model's throughput (:meth:`vecbridge.runtime.models.ModelOptions.summary`), when one ran
    model_run: dict | None = omit_if_none()
