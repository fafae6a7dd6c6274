"""``migrate`` on a Ray cluster: the source split into key ranges, one Ray task per range, exact and resumable.

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

Ray is imported only here, and only when a job runs.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable, Iterator

from ..align.artifact import Alignment
from ..connectors import connect
from ..connectors.base import Collection, KeyRange
from ..connectors.url import redact
from ..errors import InputError, VecbridgeError
from ..results import MigrationResult
from .guard import exclusive_writer, refuse_inputs_as_target
from .open import load_alignment
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


def _refuse_single_process_store(coll: Collection, role: str) -> None:
    if getattr(coll, "lite_path", None) is not None:
        raise InputError(f"the {role} {coll.display_url} is a Milvus Lite database, which one process at a time can "
                         f"open: --engine ray needs a Milvus server (or use the default engine)")


def copy_range(source_url: "Sealed | str", target_url: "Sealed | str", alignment: Alignment, index: int, after: Any,
               until: Any, batch_size: int) -> Iterator[tuple[int, Any, int, int]]:
    """One slice (the body of a Ray task, runnable without Ray): scan it after ``after`` up to ``until``, map,
    upsert; after each batch yield ``(index, cursor, read, written)``, the totals of this attempt."""
    src = connect(Sealed(source_url).url, read_only=True)
    tgt = connect(Sealed(target_url).url)
    transform = mapper(alignment)
    read = written = 0
    for batch in src.scan(batch_size=batch_size, after=after, until=until):
        mapped = transform(batch)
        if len(mapped):
            tgt.upsert(mapped)
        read += len(batch)
        written += len(mapped)
        yield index, batch.cursor, read, written


def _phase(i: int) -> str:
    return f"range-{i:04d}"


@contextlib.contextmanager
def _connected(ray_address: str | None, workers: int) -> Iterator[Any]:
    """Ray, connected to the cluster (the one this process is already connected to, ``ray_address``,
    ``$RAY_ADDRESS``, else a local one started for this job on this machine's loopback and stopped after it)."""
    ray = _ray()
    if ray.is_initialized():
        yield ray
        return
    address = ray_address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    else:
        ray.init(num_cpus=max(int(workers), 1), include_dashboard=False, _node_ip_address="127.0.0.1",
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
    yet). The source must be a store with key ranges (file, pgvector, Milvus server)."""
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
    for coll, role in ((src, "source"), (tgt, "target")):
        _refuse_single_process_store(coll, role)
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
            _run(ray, ckpt, ranges, _url(source_url), _url(target_url), alignment, bs, int(workers), on_progress)
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


def _run(ray, ckpt, ranges: list[KeyRange], source_url: str, target_url: str, alignment: Alignment, bs: int,
         workers: int, on_progress: Callable[[int], None] | None) -> None:
    """Run the unfinished slices, ``workers`` tasks at a time, committing each task's reports to the checkpoint."""
    task = ray.remote(copy_range).options(num_cpus=1, num_returns="streaming", max_retries=MAX_RETRIES,
                                          retry_exceptions=False)
    alignment_ref = ray.put(alignment)
    source_url, target_url = Sealed(source_url), Sealed(target_url)
    todo = [i for i in range(len(ranges)) if not ckpt.phase(_phase(i))["done"]]
    running: dict = {}   # generator -> [range index, read, written] seen from the current attempt

    def submit(i: int) -> None:
        state = ckpt.phase(_phase(i))
        start = state["cursor"] if state["cursor"] is not None else ranges[i].after
        gen = task.remote(source_url, target_url, alignment_ref, i, start, ranges[i].until, bs)
        running[gen] = [i, 0, 0]

    try:
        while todo or running:
            while todo and len(running) < workers:
                submit(todo.pop(0))
            ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            for gen in ready:
                seen = running[gen]
                try:
                    ref = next(gen)
                except StopIteration:
                    ckpt.complete(_phase(seen[0]))
                    del running[gen]
                    continue
                try:
                    _, cursor, read, written = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    cause = getattr(exc, "cause", None)   # the task's own error: one line, as in a local run
                    if isinstance(cause, (VecbridgeError, OSError)):
                        raise cause from None
                    raise
                if read <= seen[1]:
                    continue   # a re-run task replaying what its first attempt reported
                ckpt.commit(_phase(seen[0]), cursor, written - seen[2], read - seen[1])
                if on_progress:
                    on_progress(read - seen[1])
                seen[1], seen[2] = read, written
    finally:
        for gen in running:
            with contextlib.suppress(Exception):
                ray.cancel(gen, force=True)
