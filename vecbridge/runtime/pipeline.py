"""Stream records from a source into a target through a transform: read, map and write overlap.

A reader thread scans the source (and maps each batch: numpy releases the GIL, so mapping overlaps the writes)
into a small bounded queue; the calling thread upserts each batch and reports it. The queue bound keeps memory flat
whatever the collection size.

``migrate`` and ``merge`` are *plan units -> run* :func:`copy_unit` *over each -> combine* on an engine
(:mod:`vecbridge.runtime.engine`): a :class:`Unit` is one source, whole or one key range of it, and one checkpoint
phase; the body upserts each batch and reports it (:class:`Copied`), and the driver alone advances the checkpoint
(:func:`committer`), after the batch was written. Upserts are by id, so a unit that runs again (a resume, a Ray task
re-run after its node died) rewrites the same records and changes nothing.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence, TypeVar

from ..connectors.base import Collection, KeyRange, VectorBatch, first_duplicate
from ..errors import InputError
from ..faultpoint import fault_point
from .checkpoint import Checkpoint
from .engine import LOCAL
from .open import open_collection

_DONE = object()
T = TypeVar("T")


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def read_ahead(produce: Iterable[T], depth: int = 3, name: str = "vecbridge-read") -> Iterator[T]:
    """The items of ``produce``, computed by a background thread up to ``depth`` items ahead of the consumer, so
    that reading and mapping the next batches overlap writing this one (numpy and the store clients release the
    GIL). An error in ``produce`` is raised in the consumer's thread; closing the generator stops the thread."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def reader():
        try:
            for item in produce:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as exc:  # handed to the consumer, which re-raises it in its own thread
            put(_Failure(exc))

    thread = threading.Thread(target=reader, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)


def refuse_duplicate_ids(source: Collection, batch: VectorBatch) -> None:
    """A source that yields an id twice in one batch (a table without a primary key) would lose one of the two
    records in the target: name it instead (checked before the batch is mapped or written)."""
    dup = first_duplicate(batch.ids)
    if dup is not None:
        raise InputError(f"duplicate id {dup!r} in the source {source.display_url}: a record id must be unique")


@dataclass(frozen=True)
class Unit:
    """One unit of a copy job: the checkpoint ``phase`` it commits to, the ``source`` it scans (a collection, or what
    the engine gives a body in another process to open it with: :meth:`~vecbridge.runtime.engine.Engine.portable`),
    from after ``after`` up to ``until`` (None: to the end), through the transform named ``step``."""

    phase: str
    source: Any
    after: Any = None
    until: Any = None
    step: str = ""


@dataclass(frozen=True)
class CopyJob:
    """What every unit shares: the ``target`` (as :class:`Unit.source`), the transforms by name (``steps``: each a
    picklable callable that makes one, e.g. ``functools.partial(mapper, alignment)``; a transform returns the batch,
    or ``(batch, counts)``: counts of its own, a dict of ints, kept per phase in the checkpoint with the batch they
    describe), and the records per batch."""

    target: Any
    batch_size: int
    steps: dict = field(default_factory=dict)


class Copied(NamedTuple):
    """A unit's report: after each written batch the cursor to resume after it, the records read and written and the
    step's counts; last, ``done``."""

    cursor: Any = None
    read: int = 0
    written: int = 0
    counts: dict = {}
    done: bool = False


def copy_unit(unit: Unit, job: CopyJob) -> Iterator[Copied]:
    """The body of a copy job (an engine runs it here or in a Ray task): scan the unit's slice of the source, refuse
    an id repeated in a batch, transform each batch, upsert it, report it; then report the unit done."""
    source = open_collection(unit.source)
    target = open_collection(job.target, read_only=False)
    transform = job.steps[unit.step]()
    where = {"after": unit.after} if unit.until is None else {"after": unit.after, "until": unit.until}

    def mapped_batches():
        for batch in source.scan(batch_size=job.batch_size, **where):
            refuse_duplicate_ids(source, batch)
            mapped = transform(batch)
            mapped, counts = mapped if isinstance(mapped, tuple) else (mapped, {})
            yield mapped, batch.cursor, len(batch), counts

    for mapped, cursor, read, counts in read_ahead(mapped_batches(), name=f"vecbridge-read-{unit.phase}"):
        if len(mapped):
            target.upsert(mapped)
        yield Copied(cursor, read, len(mapped), counts)
    yield Copied(done=True)


def range_phases(prefix: str, ranges: Sequence[KeyRange]) -> list[tuple[str, KeyRange]]:
    """``(phase, range)`` for each key range of a source: phases ``{prefix}range-0000``, ``...-0001``..."""
    return [(f"{prefix}range-{i:04d}", r) for i, r in enumerate(ranges)]


def pending(checkpoint: Checkpoint, source, step: str, parts: Sequence[tuple[str, "KeyRange | None"]]) -> list[Unit]:
    """The units of ``source`` that the checkpoint has not finished, each starting after its last written key:
    ``parts`` is ``(phase, key range)`` per unit (a range of None: the whole source). Reads the checkpoint only."""
    units = []
    for phase, rng in parts:
        state = checkpoint.state["phases"].get(phase) or {}
        if state.get("done"):
            continue
        start = state.get("cursor")
        if start is None and rng is not None:
            start = rng.after
        units.append(Unit(phase, source, start, None if rng is None else rng.until, step))
    return units


def committer(checkpoint: Checkpoint, units: Sequence[Unit], *, on_progress: Callable[[int], None] | None = None,
              on_done: Callable[[Unit], None] | None = None) -> Callable[[int, Copied], None]:
    """The engine's ``on_report`` for a copy job, on the driver: each batch's counts and cursor committed to the
    checkpoint (saved) after the batch was written, then ``on_progress(records read)``; a unit done is marked so,
    then ``on_done(unit)``."""
    kind = checkpoint.identity.get("kind")

    def on_report(i: int, report: Copied) -> None:
        phase = units[i].phase
        if report.done:
            checkpoint.complete(phase)
            if on_done:
                on_done(units[i])
            return
        fault_point(f"{kind}.{phase}.batch-written")
        state = checkpoint.phase(phase)
        for key, n in report.counts.items():   # saved by the commit below, with the batch they describe
            state[key] = state.get(key, 0) + n
        checkpoint.commit(phase, report.cursor, report.written, report.read)
        fault_point(f"{kind}.{phase}.batch-committed")
        if on_progress:
            on_progress(report.read)
    return on_report


def copy_stream(source: Collection, target: Collection, *, transform: Callable[[VectorBatch], VectorBatch],
                checkpoint: Checkpoint, phase: str, batch_size: int,
                on_progress: Callable[[int], None] | None = None) -> int:
    """Copy every record of ``source`` after the phase's checkpointed cursor into ``target`` in this process; returns
    the number written in this call (one :func:`copy_unit`, the body ``migrate`` and ``merge`` run on an engine)."""
    units = pending(checkpoint, source, "copy", [(phase, None)])
    before = checkpoint.written
    LOCAL.run(copy_unit, units, shared=CopyJob(target, batch_size, {"copy": lambda: transform}),
              on_report=committer(checkpoint, units, on_progress=on_progress))
    return checkpoint.written - before
