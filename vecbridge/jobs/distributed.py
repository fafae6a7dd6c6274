"""``migrate`` and ``merge`` on a Ray cluster: key ranges of the sources, one Ray task per range, exact, resumable.

The driver (this process) plans once: it checks the source and the alignment, creates the target (the same code as
the single-process :func:`vecbridge.jobs.rewrite.migrate`), asks the source for ``workers x ranges_per_worker``
:class:`~vecbridge.connectors.base.KeyRange` slices and saves them in the checkpoint with the job's identity. Each
Ray task opens its own connectors from the URLs, scans its slice (``scan(after, until)``), maps every batch and
upserts it, and streams ``(range, cursor, read, written)`` back after each committed batch; the driver alone
writes the checkpoint (phase ``range-NNN`` per slice: the last key written, counts, done).

Exactness: upserts are by id, so a task that Ray re-runs after its node died (``max_retries``) rewrites the same
records with the same vectors; the driver counts a replayed report only once (totals per attempt only grow). A
resumed run loads the slices from the checkpoint, skips the finished ones and starts each unfinished one after its
last written key, whatever the number of workers now. One-row batches are mapped as two rows
(:func:`~vecbridge.jobs.rewrite.mapper`), so every vector is bit-identical to a single-process run's.

``merge`` runs on the same runner (:func:`_run`): B and A are each cut into ranges (phases ``b-range-NNNN`` and
``a-range-NNNN``), and each task applies the single-process merge's own per-batch code
(:class:`~vecbridge.jobs.merge.MergeSteps`) to its slice, reporting its ``linked``/``renamed`` counts with each batch.
B's and A's slices run in one pool, B's submitted first but with no barrier between them: what the two phases
write is disjoint (phase B writes B's ids; phase A only A's unlinked ids, which are not B ids, or renamed
``a:<id>``), and both read only the inputs, never the merged collection, so no order of the slices changes the
result.

Ray is imported only here, and only when a job runs.
"""
from __future__ import annotations

import contextlib
import copy
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NoReturn

from ..align.artifact import Alignment
from ..connectors import connect
from ..connectors.base import Collection, KeyRange, VectorBatch
from ..connectors.url import redact
from ..errors import InputError, VecbridgeError
from ..results import MergeResult, MigrationResult
from ..runtime.guard import exclusive_writer, refuse_inputs_as_target
from ..runtime.open import load_alignment
from ..runtime.pipeline import read_ahead
from .merge import MergeSteps
from .merge import begin as begin_merge
from .merge import finish as finish_merge
from .merge import prepare as prepare_merge
from .rewrite import (
    check_counts,
    create_target,
    discard_target,
    finish_target,
    mapper,
    open_checkpoint,
    preflight,
    store_batch_size,
    warn_failed_validation,
)

#: how often Ray re-runs a task whose worker or node died (a replay is harmless: upserts by id)
MAX_RETRIES = 5
#: slices per worker: a few more than workers, so that a slow or re-run slice does not hold up the end
RANGES_PER_WORKER = 4


def _ray():
    try:
        import ray
    except ImportError:
        raise InputError("--engine ray needs Ray: pip install 'vecbridge[ray]'") from None
    return ray


def _url(coll) -> str:
    return coll.url if isinstance(coll, Collection) else str(coll)


class Sealed:
    """A store URL on its way to a Ray task: written as ``repr``/``str`` (in a Ray error, a log, a dashboard) it shows
    no password or token; the task opens the store with :attr:`url`. Credentials thus reach the workers inside the
    task's arguments (Ray's object store), never in what Ray prints."""

    __slots__ = ("url",)

    def __init__(self, url: "str | Sealed"):
        self.url = url.url if isinstance(url, Sealed) else str(url)

    def __repr__(self) -> str:
        return f"Sealed({redact(self.url)!r})"

    __str__ = __repr__

    def __reduce__(self):
        return Sealed, (self.url,)


def task_error(ray, exc: BaseException) -> BaseException:
    """Our own error (or an OSError) inside what Ray raised, to be raised as one line as in a local run: a task's
    error arrives as ``RayTaskError`` with the worker's traceback as text, and Ray Data chains it further. ``exc``
    itself where none is inside."""
    stack, seen = [exc], set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ray.exceptions.RayTaskError):
            stack.append(getattr(e, "cause", None))
        elif isinstance(e, (VecbridgeError, OSError)):
            return e
        else:
            stack.extend([e.__cause__, e.__context__])
    return exc


def raise_one_line(ray, exc: BaseException) -> NoReturn:
    """Raise what :func:`task_error` finds inside ``exc`` without Ray's wrapper (one line, as in a local run), else
    ``exc`` itself. Call it from the ``except`` block that caught ``exc``."""
    cause = task_error(ray, exc)
    if cause is exc:
        raise exc
    raise cause from None


def task_reply(ray, ref):
    """A task's reply; where the task failed with one of our errors (or an OSError), that error itself
    (:func:`raise_one_line`)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        raise_one_line(ray, exc)


def refuse_single_process_store(*colls: tuple[Collection, str]) -> None:
    """Every Ray task opens the stores itself: a store only one process may open (``single_process``) would fail
    there, or be a different, empty one (a store in this process's memory), or be corrupted by concurrent writers.
    ``colls``: ``(collection, role)`` pairs, checked before Ray starts."""
    for coll, role in colls:
        if coll.single_process:
            raise InputError(f"the {role} {coll.display_url} is an embedded store that one process at a time can "
                             f"open: --engine ray needs the collection on a server or in a file:// store (or use the "
                             f"default engine)")


@dataclass(frozen=True)
class MergePhase:
    """What a merge task does to each batch: phase ``"b"`` folds the linked A records into B's, phase ``"a"`` drops
    the linked records, renames clashes and maps (:class:`~vecbridge.jobs.merge.MergeSteps`, the code the
    single-process merge runs)."""

    steps: MergeSteps
    phase: str

    def bind(self) -> tuple[Callable[[VectorBatch], VectorBatch], dict]:
        steps = copy.copy(self.steps)   # its own connections and counts from zero: one per task attempt
        return getattr(steps, f"phase_{self.phase}"), steps.stats


def _batch_step(step: "Alignment | MergePhase") -> tuple[Callable[[VectorBatch], VectorBatch], dict | None]:
    """A task's transform and the counts it keeps (None: none): an alignment maps every batch (migrate)."""
    if isinstance(step, Alignment):
        return mapper(step), None
    return step.bind()


def copy_range(source_url: "Sealed | str", target_url: "Sealed | str", step: "Alignment | MergePhase", index: int,
               after: Any, until: Any, batch_size: int) -> Iterator[tuple]:
    """One slice (the body of a Ray task, runnable without Ray): scan it after ``after`` up to ``until``, transform
    each batch (``step``: an alignment maps it, a :class:`MergePhase` merges it), upsert; after each batch yield
    ``(index, cursor, read, written)``, the totals of this attempt, followed by the step's counts (a dict) where it
    keeps any."""
    src = connect(Sealed(source_url).url, read_only=True)
    tgt = connect(Sealed(target_url).url)
    transform, counts = _batch_step(step)

    def transformed():   # the step's counts as they stood after this batch (the reader runs ahead of the writes)
        for batch in src.scan(batch_size=batch_size, after=after, until=until):
            mapped = transform(batch)
            yield batch, mapped, (None if counts is None else dict(counts))

    read = written = 0
    for batch, mapped, seen in read_ahead(transformed(), name=f"vecbridge-range-{index}"):
        if len(mapped):
            tgt.upsert(mapped)
        read += len(batch)
        written += len(mapped)
        if seen is None:
            yield index, batch.cursor, read, written
        else:
            yield index, batch.cursor, read, written, seen


def _phase(i: int) -> str:
    return f"range-{i:04d}"


@dataclass(frozen=True)
class Slice:
    """One task's worth of a job: the checkpoint phase it commits to, the source it scans, its key range, and the
    name of what it does to a batch (a step the runner puts in Ray's object store once for every slice)."""

    phase: str
    source: str
    range: KeyRange
    step: str


@contextlib.contextmanager
def _connected(ray_address: str | None, workers: int) -> Iterator[Any]:
    """Ray, connected to the cluster (the one this process is already connected to, ``ray_address``,
    ``$RAY_ADDRESS``, else a new local one started for this job on this machine's loopback and stopped after it: never
    a Ray instance another job started on this machine)."""
    ray = _ray()
    if ray.is_initialized():
        yield ray
        return
    address = ray_address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    else:
        ray.init(address="local", num_cpus=max(int(workers), 1), include_dashboard=False,
                 _node_ip_address="127.0.0.1",
                 logging_level="WARNING", log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def migrate_on_ray(source_url, alignment, target_url, *, workers: int = 2, ray_address: str | None = None,
                   batch_size: int | None = None, resume: bool = False, overwrite: bool = False,
                   checkpoint_path=None, metric: str | None = None, build_index: bool = True,
                   ranges_per_worker: int = RANGES_PER_WORKER, on_progress: Callable[[int], None] | None = None,
                   on_start: Callable[[int, int], None] | None = None,
                   on_phase: Callable[[str], None] | None = None) -> MigrationResult:
    """Rewrite ``source_url`` into a new collection ``target_url`` through ``alignment``, ``workers`` Ray tasks at a
    time; the options mean what they mean for :func:`vecbridge.jobs.rewrite.migrate` (no ``field`` and no dry run
    yet). The source must be a store with key ranges that several processes may open (file, pgvector, Milvus server,
    Qdrant server, Chroma server)."""
    _ray()   # a missing extra fails first, in one line
    if int(workers) <= 0:
        raise InputError(f"workers must be a positive number, got {workers}")
    if target_url is None:
        raise InputError("a target collection is required (--field is not supported with --engine ray yet)")
    alignment, alignment_path = load_alignment(alignment)
    warn_failed_validation(alignment, alignment_path)
    src = connect(_url(source_url), read_only=True)
    tgt = connect(_url(target_url), read_only=False)
    refuse_inputs_as_target(tgt, [(src, "the source collection itself")], "choose a new target")
    refuse_single_process_store((src, "source"), (tgt, "target"))
    bs = store_batch_size(tgt, batch_size)
    info, ckpt_path, identity = preflight(src, tgt, alignment, alignment_path, checkpoint_path,
                                          kind="migrate-ranges")
    with exclusive_writer(tgt), _connected(ray_address, workers) as ray:
        planned: list[KeyRange] = []

        def create():
            planned.extend(src.key_ranges(max(int(workers) * int(ranges_per_worker), 1)))   # before any write
            create_target(tgt, alignment.target_dim, metric or info.metric, overwrite=overwrite)

        ckpt, created, bs = open_checkpoint(ckpt_path, identity, tgt, resume=resume, overwrite=overwrite,
                                            batch_size=bs, create=create)
        if created:
            ckpt.state["ranges"] = [r.as_dict() for r in planned]
        ranges = [KeyRange.from_dict(d) for d in ckpt.state.get("ranges", [])]
        if not ranges:
            raise InputError(f"checkpoint {ckpt.path} holds no key ranges; remove it and the target to start over")
        ckpt.start()
        resumed_from = ckpt.written
        if on_start:
            on_start(info.count, ckpt.read)
        t0 = time.perf_counter()
        try:
            slices = [Slice(_phase(i), _url(source_url), r, "map") for i, r in enumerate(ranges)]
            _run(ray, ckpt, slices, _url(target_url), {"map": alignment}, bs, int(workers), on_progress)
        except (VecbridgeError, OSError) as exc:
            if created and (ckpt.written == 0 or isinstance(exc, InputError)):
                discard_target(tgt, ckpt)
            raise
        held = finish_target(tgt, ckpt, build_index=build_index, on_phase=on_phase)
    seconds = time.perf_counter() - t0
    check_counts(tgt, read=ckpt.read, written=ckpt.written, held=held)
    written = ckpt.written - resumed_from
    return MigrationResult(src.display_url, tgt.display_url, info.count, ckpt.read, written, resumed_from, seconds,
                           written / seconds if seconds > 0 else None, None, bs)


def _run(ray, ckpt, slices: list[Slice], target_url: str, steps: dict[str, Any], bs: int, workers: int,
         on_progress: Callable[[int], None] | None) -> None:
    """Run the unfinished slices in their order, ``workers`` tasks at a time, committing each task's reports to the
    checkpoint: per slice's phase the last key written, what was read and written, and the step's counts (migrate
    keeps none, so its checkpoint has no other fields). A report that a re-run task replays is counted once: an
    attempt starts where the slice stood when it was submitted, and its totals only grow."""
    task = ray.remote(copy_range).options(num_cpus=1, num_returns="streaming", max_retries=MAX_RETRIES,
                                          retry_exceptions=False)
    step_refs = {name: ray.put(step) for name, step in steps.items()}
    target_url = Sealed(target_url)
    todo = [i for i, s in enumerate(slices) if not ckpt.phase(s.phase)["done"]]
    running: dict = {}   # generator -> [slice index, read, written, counts] seen from the current attempt

    def submit(i: int) -> None:
        s = slices[i]
        state = ckpt.phase(s.phase)
        start = state["cursor"] if state["cursor"] is not None else s.range.after
        gen = task.remote(Sealed(s.source), target_url, step_refs[s.step], i, start, s.range.until, bs)
        running[gen] = [i, 0, 0, {}]

    # tasks still running when this stops are not cancelled: Ray 2.60's driver aborts (a failed internal check) when
    # a cancelled streaming task's reply arrives after the cancellation. They stop with their job's driver (the CLI's
    # process); until then they finish their slice, and a resume that overlaps them rewrites the same records with
    # the same vectors (upserts by id)
    while todo or running:
        while todo and len(running) < workers:
            submit(todo.pop(0))
        ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
        for gen in ready:
            seen = running[gen]
            phase = slices[seen[0]].phase
            try:
                ref = next(gen)
            except StopIteration:
                ckpt.complete(phase)
                del running[gen]
                continue
            _, cursor, read, written, *rest = task_reply(ray, ref)
            if read <= seen[1]:
                continue   # a re-run task replaying what its first attempt reported
            counts = rest[0] if rest else {}
            state = ckpt.phase(phase)
            for key, n in counts.items():   # saved by the commit below, with the batch they describe
                state[key] = state.get(key, 0) + n - seen[3].get(key, 0)
            ckpt.commit(phase, cursor, written - seen[2], read - seen[1])
            if on_progress:
                on_progress(read - seen[1])
            seen[1], seen[2], seen[3] = read, written, counts


def merge_on_ray(a, b, into, alignment, *, links="ids", policy: str = "keep-b", workers: int = 2,
                 ray_address: str | None = None, batch_size: int | None = None, resume: bool = False,
                 overwrite: bool = False, checkpoint_path=None, ranges_per_worker: int = RANGES_PER_WORKER,
                 on_progress: Callable[[int], None] | None = None) -> MergeResult:
    """:func:`vecbridge.jobs.merge.merge` with B's and A's key ranges merged by Ray tasks, ``workers`` at a time:
    the same checks before any write, the same records bit for bit. Both inputs must be stores with key ranges.
    ``linked`` and ``renamed`` count the whole job, also across a resume (they are kept in the checkpoint)."""
    _ray()   # a missing extra fails first, in one line
    if int(workers) <= 0:
        raise InputError(f"workers must be a positive number, got {workers}")
    job = prepare_merge(a, b, into, alignment, links=links, policy=policy, batch_size=batch_size,
                        checkpoint_path=checkpoint_path, kind="merge-ranges")
    A, B, C, ckpt = job["A"], job["B"], job["C"], job["checkpoint"]
    refuse_single_process_store((A, "input A"), (B, "input B"), (C, "merged collection"))
    n = max(int(workers) * int(ranges_per_worker), 1)
    with exclusive_writer(C), _connected(ray_address, workers) as ray:
        planned: dict = {}

        def plan():   # before the target is created: a store without key ranges refuses with nothing written
            planned.update(b=[r.as_dict() for r in B.key_ranges(n)], a=[r.as_dict() for r in A.key_ranges(n)])

        created, bs = begin_merge(ckpt, C, job["alignment"], job["b_info"], policy, bs=job["bs"], resume=resume,
                                  overwrite=overwrite, before_create=plan)
        if created:
            ckpt.state["ranges"] = planned
        ranges = ckpt.state.get("ranges")
        if not isinstance(ranges, dict) or not ranges.get("a") or not ranges.get("b"):
            raise InputError(f"checkpoint {ckpt.path} holds no key ranges; remove it and the target to start over")
        sources = {"b": _url(b), "a": _url(a)}
        slices = [Slice(f"{p}-{_phase(i)}", sources[p], KeyRange.from_dict(d), p)
                  for p in ("b", "a") for i, d in enumerate(ranges[p])]
        steps = MergeSteps(Sealed(sources["a"]), Sealed(sources["b"]), job["alignment"], explicit=job["explicit"],
                           policy=policy, a_into=Sealed(_url(into)) if policy == "keep-both" else None)
        ckpt.start()
        resumed_from = ckpt.written
        t0 = time.perf_counter()
        try:
            _run(ray, ckpt, slices, _url(into), {p: MergePhase(steps, p) for p in ("b", "a")}, bs, int(workers),
                 on_progress)
        except (VecbridgeError, OSError) as exc:
            if created and (ckpt.written == 0 or isinstance(exc, InputError)):
                discard_target(C, ckpt)   # bad input data or a refused first write: no half-merged collection
            raise
        stats = {k: sum(p.get(k, 0) for p in ckpt.state["phases"].values()) for k in ("linked", "renamed")}
        written = ckpt.written - resumed_from
        count = finish_merge(C, ckpt)
    return MergeResult(A.display_url, B.display_url, C.display_url, policy, job["a_info"].count, job["b_info"].count,
                       written, stats["linked"], stats["renamed"], count, time.perf_counter() - t0)
