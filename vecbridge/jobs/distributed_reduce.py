"""``fit``, ``verify``, ``evaluate`` and ``report`` on a Ray cluster: reductions over key ranges of the source.

The driver (this process) opens both collections, cuts the source into ``workers x ranges_per_worker``
:class:`~vecbridge.connectors.base.KeyRange` slices (:meth:`~vecbridge.connectors.base.Collection.key_ranges`; a
``file:PATH`` pairing is cut into chunks of its list of id pairs instead), and runs one Ray task per slice,
``workers`` at a time. Each task opens its own connectors (URLs travel :class:`~vecbridge.jobs.distributed.Sealed`, so
no password is printed), reads its slice (``scan(after, until)``), and returns something that adds up; the driver
combines the results in slice order:

* **fit** (:func:`fit_on_ray`): the pairs of the slice (found in the target by the single-process code:
  :func:`~vecbridge.pairing.pairs.pairs_by_ids`, :func:`~vecbridge.pairing.pairs.pairs_from_list`, the same payload-key
  matching) fed to the fit's own :class:`~vecbridge.jobs.fit.PairAccumulator`; the streamed moments are merged and
  fitted once. The map equals the single-process one up to float64 rounding (the sums are added in another order).
* **verify** (:func:`verify_on_ray`): every record of the slice looked up in the target and compared
  (:func:`~vecbridge.jobs.verify.compare_records`); counts and a few failing ids come back, never an id set.
* **evaluate** and **report** (:func:`evaluate_on_ray`, :func:`report_on_ray`): a sample of pairs. Each task keeps,
  of its slice's pairs (on the held-out side, for evaluate), the ``k`` whose seeded hash of the source id is
  smallest (:class:`PairSample`), and looks a record up in the target only when its hash could still make that cut;
  the ``k`` smallest of all slices are the ``k`` smallest overall. The sample is uniform without replacement over
  the pairs themselves, whatever the slices: it never falls short while pairs remain, where the single-process
  sample of source records thins out with the share of records that have a partner. It costs one read of the
  whole source, spread over the workers.

Ray is imported only when one of these runs.
"""
from __future__ import annotations

import hashlib
import math
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..align.artifact import Alignment
from ..align.methods import method as method_of
from ..connectors import connect
from ..connectors.base import Collection, KeyRange, VectorBatch
from ..errors import InputError, StoreError
from ..linking.pairspec import PairSpec
from ..pairing.pairs import in_holdout, pairs_by_ids, pairs_from_list, pairs_through_index, read_pairs_file
from ..results import Evaluation, Report, VerifyResult
from ..runtime.open import load_alignment, open_collection
from .distributed import (
    MAX_RETRIES,
    RANGES_PER_WORKER,
    Sealed,
    _connected,
    _ray,
    refuse_single_process_store,
    task_reply,
)
from .fit import PairAccumulator, _CountingSource, _vector_links, check_fit_options, freeze_fit, open_pair
from .verify import RecordTally, compare_records, full_checks

#: records per read of a slice (and per lookup in the other collection) when the job names no batch size
BATCH_SIZE = 2000


# --- the pieces a task works with ----------------------------------------------------------------------------------
class _Slice:
    """One key range of a collection, seen by the pairing code as a whole collection: :meth:`scan` reads only the
    range, keeps only the records ``keep(ids)`` selects (a mask) and counts every record read; the rest is the
    collection's own."""

    def __init__(self, coll: Collection, rng: KeyRange, keep: Callable[[list], np.ndarray] | None = None):
        self._coll, self._range, self._keep = coll, rng, keep
        self.n_read = 0

    def __getattr__(self, name):
        return getattr(self._coll, name)

    def scan(self, batch_size: int = 1000, after: Any = None) -> Iterator[VectorBatch]:
        for batch in self._coll.scan(batch_size, after=self._range.after, until=self._range.until):
            self.n_read += len(batch)
            if self._keep is not None:
                mask = self._keep(batch.ids)
                if not mask.all():
                    batch = batch.take(mask)
            if len(batch):
                yield batch


def _index_keys(payloads: Sequence[dict], field: str) -> list:
    return [p.get(field) if p else None for p in payloads]


def _field_index_body(coll: Collection, _, rng: KeyRange | None, __, *, field: str, batch_size: int):
    """The payload-key index of one slice of the target (None: all of it): key -> the first id holding it, in scan
    order."""
    index: dict = {}
    read = 0
    batches = coll.scan(batch_size) if rng is None else coll.scan(batch_size, after=rng.after, until=rng.until)
    for batch in batches:
        for rid, key in zip(batch.ids, _index_keys(batch.payloads, field)):
            if key is not None:
                index.setdefault(key, rid)
        read += len(batch)
        yield read
    return index


class _Listed:
    """A chunk of a ``file:PATH`` pairing's id pairs, read as :func:`~vecbridge.pairing.pairs.pairs_from_list` reads the
    whole list (so a chunk cut at a multiple of the batch size gives the single-process batches), optionally keeping
    only the pairs whose source id ``keep`` selects; counts the pairs gone through."""

    def __init__(self, pairs: list, keep: Callable[[list], np.ndarray] | None = None):
        self.pairs, self._keep, self.n_read = pairs, keep, 0

    def batches(self, source: Collection, target: Collection, batch_size: int):
        for lo in range(0, len(self.pairs), batch_size):
            part = self.pairs[lo:lo + batch_size]
            self.n_read += len(part)
            if self._keep is not None:
                part = [p for p, k in zip(part, self._keep([p[0] for p in part])) if k]
            if part:
                yield from pairs_from_list(source, target, part, batch_size=batch_size)


def _unit_pairs(source: Collection, target: Collection, spec: PairSpec, unit, index: dict | None, batch_size: int,
                keep=None):
    """``(pair batches, reader)`` of one unit (a key range of the source, or a chunk of listed pairs); ``reader.n_read``
    counts what the unit has gone through."""
    if spec.kind == "file":
        listed = _Listed(unit, keep)
        return listed.batches(source, target, batch_size), listed
    part = _Slice(source, unit, keep)
    if spec.kind == "ids":
        return pairs_by_ids(part, target, batch_size=batch_size), part
    # the target's key index is built once for the whole job (by _field_index), not once per task
    return pairs_through_index(part.scan(batch_size), target, spec.value, index), part


def _fit_body(source: Collection, target: Collection, unit, index, *, spec: str, batch_size: int, holdout: float,
              normalization: str):
    """The fit's accumulation over one unit's pairs; returns ``(accumulator, source records read)``."""
    counting = _CountingSource(source)
    batches, reader = _unit_pairs(counting, target, PairSpec.parse(spec), unit, index, batch_size)
    acc = PairAccumulator(holdout, normalization)
    for s_batch, t_batch in batches:
        acc.add(s_batch, t_batch)
        yield reader.n_read
    yield reader.n_read   # the batches after the last pair count as read too
    return acc, counting.n_read


def _verify_body(source: Collection, target: Collection, rng: KeyRange, alignment: Alignment, *, field: str | None,
                 batch_size: int, tolerance: float, metric: str):
    """Every record of one slice of the source, looked up in the target and compared."""
    if field is not None:
        target = target.with_vector_field(field)
    tally = RecordTally()
    for batch in source.scan(batch_size, after=rng.after, until=rng.until):
        tally.merge(compare_records(alignment, batch, target.get(list(batch.ids)), metric=metric,
                                    tolerance=tolerance, payloads=field is None))
        yield tally.checked
    return tally


def _sample_body(source: Collection, target: Collection, unit, index, *, spec: str, batch_size: int, k: int,
                 seed: int, holdout: float):
    """The ``k`` pairs of one unit with the smallest seeded hash of the source id (held-out ones only, with a
    holdout); a record is looked up in the target only when its hash could still make the cut."""
    sample = PairSample(k, seed)

    def keep(ids) -> np.ndarray:
        mask = in_holdout(ids, holdout) if holdout > 0 else np.ones(len(ids), dtype=bool)
        return mask & sample.admits(ids)

    batches, reader = _unit_pairs(source, target, PairSpec.parse(spec), unit, index, batch_size, keep)
    for s_batch, t_batch in batches:
        sample.add(s_batch, t_batch)
        yield reader.n_read
    yield reader.n_read   # the batches after the last pair count as read too
    sample._cut()   # what goes back to the driver is the unit's k, not its pending batches
    return sample, reader.n_read


_BODIES = {"fit": _fit_body, "verify": _verify_body, "sample": _sample_body, "index": _field_index_body}


def run_unit(body: str, first: "Sealed | str", second: "Sealed | str | None", index: int, unit, shared,
             options: dict) -> Iterator[tuple[int, int, bool, Any]]:
    """One unit of a reduction (the body of a Ray task, runnable without Ray): open the collection(s), run
    ``body``; after each batch yield ``(index, records read so far, False, None)``, then ``(index, read, True,
    result)``."""
    a = connect(Sealed(first).url, read_only=True)
    b = connect(Sealed(second).url, read_only=True) if second is not None else None
    work = _BODIES[body](a, b, unit, shared, **options)
    read = 0
    while True:
        try:
            read = next(work)
        except StopIteration as done:
            yield index, read, True, done.value
            return
        yield index, read, False, None


# --- sampling ------------------------------------------------------------------------------------------------------
def _hashes(ids: Sequence, seed: int) -> np.ndarray:
    """A seeded 64-bit hash of each id (as text, so that ``5`` and ``"5"`` agree), independent of the holdout's."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(f"{seed}\x00{i}".encode(), digest_size=8,
                                                       person=b"vb-sample").digest(), "big") for i in ids),
                       dtype=np.uint64, count=len(ids))


class PairSample:
    """The ``k`` pairs with the smallest seeded hash of their source id (ties by the target id's) among all pairs
    added (:meth:`add`): a uniform sample without replacement of them, the same whatever order or split they came in, so
    per-slice samples merge (:meth:`merge`) into the sample of the whole."""

    def __init__(self, k: int, seed: int = 0):
        self.k, self.seed = int(k), int(seed)
        self._keys = np.zeros((0, 2), dtype=np.uint64)   # (source id hash, target id hash), ascending
        self._kept: tuple[VectorBatch, VectorBatch] | None = None
        self._pending: list = []                         # added since the last cut: (keys, source, target)

    def _cut(self) -> None:
        """Keep the ``k`` smallest of what is kept and pending (pending batches are cut in bulk, not one by one)."""
        if not self._pending:
            return
        parts = ([(self._keys, *self._kept)] if self._kept is not None else []) + self._pending
        keys = np.concatenate([p[0] for p in parts])
        s, t = VectorBatch.concat([p[1] for p in parts]), VectorBatch.concat([p[2] for p in parts])
        order = np.lexsort((keys[:, 1], keys[:, 0]))[: self.k]
        self._keys, self._kept, self._pending = keys[order], (s.take(order), t.take(order)), []

    @property
    def source(self) -> VectorBatch | None:
        """The sampled source records (None: none yet), ordered by their hash: no order of the store's."""
        self._cut()
        return self._kept[0] if self._kept is not None else None

    @property
    def target(self) -> VectorBatch | None:
        """Their partners, row for row."""
        self._cut()
        return self._kept[1] if self._kept is not None else None

    def __len__(self) -> int:
        self._cut()
        return len(self._keys)

    def admits(self, ids: Sequence) -> np.ndarray:
        """Which source ids could still enter the sample (a full sample admits only hashes up to its largest)."""
        if len(self._keys) < self.k:
            return np.ones(len(ids), dtype=bool)
        return _hashes(ids, self.seed) <= self._keys[-1, 0]

    def add(self, s: VectorBatch, t: VectorBatch) -> None:
        if not len(s):
            return
        keys = np.stack([_hashes(s.ids, self.seed), _hashes(t.ids, self.seed)], axis=1)
        if len(self._keys) >= self.k:   # what cannot make the cut is dropped at once
            fit = np.flatnonzero(keys[:, 0] <= self._keys[-1, 0])
            if not len(fit):
                return
            keys, s, t = keys[fit], s.take(fit), t.take(fit)
        self._pending.append((keys, s, t))
        if sum(len(p[0]) for p in self._pending) >= self.k:
            self._cut()

    def merge(self, other: "PairSample") -> "PairSample":
        if other.source is not None:
            self.add(other.source, other.target)
            self._cut()
        return self


# --- the driver ----------------------------------------------------------------------------------------------------
def _check_workers(workers: int) -> int:
    if int(workers) <= 0:
        raise InputError(f"workers must be a positive number, got {workers}")
    return int(workers)


def _ranges(coll: Collection, n: int) -> list[KeyRange]:
    if type(coll).key_ranges is Collection.key_ranges:
        raise InputError(f"--engine ray reads {coll.display_url} by key ranges, which its store does not offer yet: "
                         f"use --engine local")
    return coll.key_ranges(n)


def _chunks(pairs: list, n: int, batch_size: int) -> list[list]:
    """``pairs`` in at most ``n`` consecutive chunks, each a whole number of batches (so that every task reads the
    batches a single process reads)."""
    size = max(math.ceil(len(pairs) / max(n, 1) / batch_size), 1) * batch_size
    return [pairs[lo:lo + size] for lo in range(0, len(pairs), size)]


def _reduce(ray, body: str, first: str, second: str | None, units: list, shared, options: dict, workers: int,
            on_progress: Callable[[int], None] | None = None) -> list:
    """Run ``body`` over every unit, ``workers`` Ray tasks at a time; the results in unit order. A task that Ray
    re-runs after its node died reports its progress again: only what goes beyond its earlier report counts."""
    task = ray.remote(run_unit).options(num_cpus=1, num_returns="streaming", max_retries=MAX_RETRIES,
                                        retry_exceptions=False)
    shared_ref = ray.put(shared)
    first_s, second_s = Sealed(first), Sealed(second) if second is not None else None
    results: list = [None] * len(units)
    finished = [False] * len(units)
    todo = list(range(len(units)))
    running: dict = {}   # generator -> [unit index, records reported]
    # tasks still running when this stops are not cancelled (see distributed._run); they only read
    while todo or running:
        while todo and len(running) < workers:
            i = todo.pop(0)
            running[task.remote(body, first_s, second_s, i, units[i], shared_ref, options)] = [i, 0]
        ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
        for gen in ready:
            seen = running[gen]
            try:
                ref = next(gen)
            except StopIteration:
                del running[gen]
                if not finished[seen[0]]:
                    raise StoreError(f"a Ray task ended without its result (slice {seen[0]})") from None
                continue
            _, read, final, value = task_reply(ray, ref)
            if read > seen[1]:
                if on_progress:
                    on_progress(read - seen[1])
                seen[1] = read
            if final:
                results[seen[0]], finished[seen[0]] = value, True
    return results


def _field_index(ray, target: Collection, field: str, n: int, workers: int, batch_size: int) -> dict:
    """The target's payload-key index (key -> the first id holding it, in scan order, as
    :func:`~vecbridge.pairing.pairs.pairs_by_field` builds it), built once per job: by Ray tasks over key ranges of the
    target, merged in range order (so the same id wins), or on the driver for a store without key ranges. Every task
    then gets it from Ray's object store instead of reading the whole target again."""
    if type(target).key_ranges is Collection.key_ranges:
        parts = [_drain(_field_index_body(target, None, None, None, field=field, batch_size=batch_size))]
    else:
        parts = _reduce(ray, "index", target.url, None, target.key_ranges(n), None,
                        {"field": field, "batch_size": batch_size}, workers)
    index: dict = {}
    for part in parts:
        for key, rid in part.items():
            index.setdefault(key, rid)
    if not index:
        raise InputError(f"no record of the target has payload field {field!r}")
    return index


def _drain(gen):
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return done.value


def _plan(ray, src: Collection, tgt: Collection, spec: PairSpec, n: int, workers: int, batch_size: int):
    """The units of a pairing (key ranges of the source, or chunks of listed pairs) and what every task shares (the
    target's key index for ``field:NAME``)."""
    refuse_single_process_store((src, "source"), (tgt, "target"))
    if spec.kind == "file":
        return _chunks(read_pairs_file(spec.value), n, batch_size), None
    units = _ranges(src, n)
    return units, (_field_index(ray, tgt, spec.value, n, workers, batch_size) if spec.kind == "field" else None)


# --- fit -----------------------------------------------------------------------------------------------------------
def fit_on_ray(source, target, *, pairs: "str | PairSpec" = "ids", method: str = "orthogonal", center: bool = False,
               scale: bool = False, alpha: float = 0.01, normalization: str = "none", holdout: float = 0.0,
               max_pairs: int | None = None, seed: int = 0, batch_size: int = BATCH_SIZE,
               source_model: str | None = None, target_model: str | None = None, params: dict | None = None,
               force: bool = False, workers: int = 2, ray_address: str | None = None,
               ranges_per_worker: int = RANGES_PER_WORKER, on_batch: Callable[[int], None] | None = None,
               on_start: Callable[[int], None] | None = None) -> Alignment:
    """:func:`vecbridge.jobs.fit.fit_alignment` on every stored pair (``ids``, ``field:NAME``, ``file:PATH`` of id
    pairs), ``workers`` Ray tasks at a time; the options mean what they mean there. Each task streams the pairs of
    one key range of the source into moments; the driver merges them in range order and fits once: the map equals
    the single-process fit up to float64 rounding (the sums are added in another order).

    Refused in one line, because they are not a full streamed fit: a sample (``max_pairs``, the unsupervised
    pairing), a method that holds its pairs in memory (clustered), a links file that carries its vectors (no store
    to read). ``force`` only concerns the unsupervised pairing."""
    _ray()   # a missing extra fails first, in one line
    workers = _check_workers(workers)
    spec = PairSpec.parse(pairs, allowed=("ids", "field", "file", "unsupervised"))
    chosen = method_of(method)
    if spec.kind == "unsupervised":
        raise InputError("--engine ray fits on every stored pair (ids, field:NAME, file:PATH); the unsupervised "
                         "pairing works on a sample of each side on one machine: use --engine local")
    if max_pairs is not None:
        raise InputError("--engine ray fits on every pair in one streamed pass; --max-pairs fits on a sample: drop "
                         "it, or use --engine local")
    if not chosen.streams:
        raise InputError(f"--method {chosen.name} holds its pairs in memory on one machine (it does not fit on "
                         f"streamed sums): use --engine local")
    if params:
        raise InputError("estimator parameters apply to the unsupervised pairing only")
    check_fit_options(normalization, holdout)
    if _vector_links(spec) is not None:
        raise InputError(f"{spec.value} carries the vectors of its pairs: the fit reads no collection, so there is "
                         f"nothing to spread over Ray: use --engine local")
    src, tgt, described, metric = open_pair(source, target, spec)
    refuse_single_process_store((src, "source"), (tgt, "target"))
    n = workers * int(ranges_per_worker)
    with _connected(ray_address, workers) as ray:
        units, index = _plan(ray, src, tgt, spec, n, workers, batch_size)
        if on_start:
            on_start(sum(len(u) for u in units) if spec.kind == "file" else described["source"]["count"])
        results = _reduce(ray, "fit", src.url, tgt.url, units, index,
                          {"spec": str(spec), "batch_size": batch_size, "holdout": holdout,
                           "normalization": normalization}, workers, on_batch)
    acc = PairAccumulator(holdout, normalization)
    for part, _ in results:   # in range order
        acc.merge(part)
    return freeze_fit(acc, n_examined=sum(r for _, r in results), spec=spec, chosen=chosen,
                      where=f"between {src.display_url} and {tgt.display_url}", max_pairs=None, seed=seed,
                      center=center, scale=scale, alpha=alpha, metric=metric, source_model=source_model,
                      target_model=target_model, described=described)


# --- verify --------------------------------------------------------------------------------------------------------
def verify_on_ray(source, target, alignment, *, tolerance: float = 1e-5, field: str | None = None, workers: int = 2,
                  ray_address: str | None = None, batch_size: int = BATCH_SIZE,
                  ranges_per_worker: int = RANGES_PER_WORKER) -> VerifyResult:
    """:func:`vecbridge.jobs.verify.verify` on every record instead of a sample: each Ray task looks every record of
    one key range of the source up in the target and checks its vector (recomputed through ``alignment``, within
    ``tolerance``) and its user payload; the driver adds up the counts. No id set is held anywhere: ids are unique in
    a collection, so the target's ids that are not in the source number ``target count - matched``. The result has
    the checks of :func:`~vecbridge.jobs.verify.verify`, each saying it is a full check."""
    _ray()
    workers = _check_workers(workers)
    alignment, _ = load_alignment(alignment)
    src, tgt = open_collection(source), open_collection(target)
    view = tgt.with_vector_field(field) if field is not None else tgt
    refuse_single_process_store((src, "source"), (tgt, "target"))
    s_info, t_info = src.info(), view.info()
    ranges = _ranges(src, workers * int(ranges_per_worker))
    with _connected(ray_address, workers) as ray:
        tallies = _reduce(ray, "verify", src.url, tgt.url, ranges, alignment,
                          {"field": field, "batch_size": batch_size, "tolerance": tolerance,
                           "metric": t_info.metric}, workers)
    tally = RecordTally()
    for part in tallies:
        tally.merge(part)
    checks = full_checks(s_info, t_info, alignment, tally, tolerance)
    return VerifyResult(all(c.ok for c in checks), src.display_url, view.display_url, checks)


# --- evaluate and report: a sample of pairs ------------------------------------------------------------------------
def sample_pairs_on_ray(ray, source: Collection, target: Collection, pairs: "str | PairSpec" = "ids", *, k: int,
                        seed: int = 0, holdout: float = 0.0, workers: int = 2, batch_size: int = BATCH_SIZE,
                        ranges_per_worker: int = RANGES_PER_WORKER) -> tuple[VectorBatch, VectorBatch, int]:
    """``(source records, their partners, records gone through)``: a uniform sample without replacement of ``k`` of
    the pairs (held-out ones only, with a ``holdout``), gathered by Ray tasks over key ranges of the source (or
    chunks of a ``file:PATH`` list); see :class:`PairSample`. ``ray``: the Ray module, connected (as
    :func:`~vecbridge.jobs.distributed._connected` gives it)."""
    spec = PairSpec.parse(pairs, allowed=("ids", "field", "file"))
    n = int(workers) * int(ranges_per_worker)
    units, index = _plan(ray, source, target, spec, n, workers, batch_size)
    results = _reduce(ray, "sample", source.url, target.url, units, index,
                      {"spec": str(spec), "batch_size": batch_size, "k": int(k), "seed": int(seed),
                       "holdout": float(holdout)}, workers)
    sample = PairSample(k, seed)
    for part, _ in results:
        sample.merge(part)
    if sample.source is None:
        empty = VectorBatch([], np.zeros((0, 0), np.float32))
        return empty, empty, sum(r for _, r in results)
    return sample.source, sample.target, sum(r for _, r in results)


def evaluate_on_ray(alignment, source, target, *, pairs: str = "ids", queries=None, k: int = 10,
                    max_pairs: int = 10000, use_holdout: bool = True, seed: int = 1, workers: int = 2,
                    ray_address: str | None = None, batch_size: int = BATCH_SIZE,
                    ranges_per_worker: int = RANGES_PER_WORKER) -> Evaluation:
    """:func:`vecbridge.jobs.evaluate.evaluate_alignment` on pairs gathered by Ray tasks: a uniform sample of
    ``max_pairs`` of all the (held-out) pairs, drawn over every key range of the source (:func:`sample_pairs_on_ray`)
    where the single-process job samples source records first. The measures are then the same, on this machine."""
    from .evaluate import evaluate_alignment

    _ray()
    workers = _check_workers(workers)
    alignment, _ = load_alignment(alignment)

    def collect(src, tgt, pairs, *, holdout, max_pairs, seed):
        refuse_single_process_store((src, "source"), (tgt, "target"))
        with _connected(ray_address, workers) as ray:
            s, t, _ = sample_pairs_on_ray(ray, src, tgt, pairs, k=max_pairs, seed=seed, holdout=holdout,
                                          workers=workers, batch_size=batch_size, ranges_per_worker=ranges_per_worker)
        if len(s) == 0:
            raise InputError("no evaluation pairs found" + (" in the held-out split" if holdout > 0 else ""))
        return s, t

    return evaluate_alignment(alignment, source, target, pairs=pairs, queries=queries, k=k, max_pairs=max_pairs,
                              use_holdout=use_holdout, seed=seed, collect=collect)


#: the report's pairings that Ray gathers (the others work on a sample on one machine)
REPORT_RAY_PAIRS = ("ids", "field")


def report_on_ray(old, new=None, *, workers: int = 2, ray_address: str | None = None, batch_size: int = BATCH_SIZE,
                  ranges_per_worker: int = RANGES_PER_WORKER, **options) -> Report:
    """:func:`vecbridge.jobs.report.compatibility_report` (``options`` as there) on correspondences gathered by Ray
    tasks: a uniform sample of ``sample`` of all the pairs that share an id or a payload key, drawn over every key
    range of the old collection (:func:`sample_pairs_on_ray`). The rest of the report (fits, held-out measures,
    options) works on that sample on this machine, as it does without Ray.

    A pairing that needs no stored key (reembed, geh, unsupervised) is refused in one line; without ``pairs``, when
    the scan finds no shared key, the report falls back to them as it does without Ray, and says so."""
    from .report import MIN_PAIRS, Correspondences, compatibility_report, fallback_correspondences

    _ray()
    workers = _check_workers(workers)
    pairs = options.get("pairs")
    spec = PairSpec.parse(pairs, allowed=("ids", "field", "reembed", "geh", "unsupervised")) if pairs else None
    if spec is not None and spec.kind not in REPORT_RAY_PAIRS:
        raise InputError(f"--engine ray gathers stored pairs (ids, field:NAME); the {spec.kind} pairing works on a "
                         f"sample on one machine: use --engine local")
    if new is None:
        raise InputError("--engine ray gathers pairs from both collections: give the new collection too")

    def gather(ray, old_c, new_c, kind: str, field: str | None, sample: int, seed: int):
        pairing = f"field:{field}" if kind == "field" else "ids"
        s, t, read = sample_pairs_on_ray(ray, old_c, new_c, pairing, k=sample, seed=seed, workers=workers,
                                         batch_size=batch_size, ranges_per_worker=ranges_per_worker)
        if len(s) < (1 if kind == "field" else MIN_PAIRS):
            return None
        how = f"share payload field {field!r}" if kind == "field" else "also exist in the new collection"
        return Correspondences("payload-key" if kind == "field" else "shared-ids",
                               f"{len(s):,} old records that {how}, drawn uniformly from all such records by Ray "
                               f"tasks over the {read:,} old records", s.vectors, t.vectors, list(s.ids),
                               new_ids=list(t.ids))

    def find(old_c, new_c, *, sample, seed, pairs, key, model, text_field, seeds, unsupervised, unsupervised_params):
        refuse_single_process_store((old_c, "old collection"), (new_c, "new collection"))
        with _connected(ray_address, workers) as ray:
            if spec is not None:
                found = gather(ray, old_c, new_c, spec.kind, spec.value, sample, seed)
                if found is None:
                    raise InputError(f"no correspondences by {spec.label} among the {old_c.info().count:,} records")
                return found
            found = gather(ray, old_c, new_c, "field", key, sample, seed) if key else None
            if found is None:
                found = gather(ray, old_c, new_c, "ids", None, sample, seed)
        if found is not None:
            return found
        corr = fallback_correspondences(old_c, new_c, sample=sample, seed=seed, model=model, text_field=text_field,
                                        seeds=seeds, unsupervised=unsupervised,
                                        unsupervised_params=unsupervised_params)
        corr.reason = f"no stored key shared by the collections (Ray scanned them all), so on this machine: " \
                      f"{corr.reason}"
        return corr

    return compatibility_report(old, new, find_pairs=find, **options)
