"""Stream records from a source into a target through a transform: read, map and write overlap.

A reader thread scans the source (and maps each batch: numpy releases the GIL, so mapping overlaps the writes)
into a small bounded queue; the calling thread upserts each batch and then advances the checkpoint. The queue bound
keeps memory flat whatever the collection size.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, Iterable, Iterator, TypeVar

from ..connectors.base import Collection, VectorBatch, first_duplicate
from ..errors import InputError
from ..faultpoint import fault_point
from .checkpoint import Checkpoint

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


def copy_stream(source: Collection, target: Collection, *, transform: Callable[[VectorBatch], VectorBatch],
                checkpoint: Checkpoint, phase: str, batch_size: int, prefetch: int = 3,
                on_progress: Callable[[int], None] | None = None) -> int:
    """Copy every record of ``source`` after the phase's checkpointed cursor into ``target``; returns the number
    written in this call. Safe to interrupt at any point (see :mod:`vecbridge.runtime.checkpoint`).

    ``transform`` may return ``(batch, counts)``: counts of its own (a dict of ints, e.g. a merge's linked pairs),
    added to the phase's state in the checkpoint with the batch they describe, so they survive a resume."""
    state = checkpoint.phase(phase)
    if state["done"]:
        return 0

    def mapped_batches():
        for batch in source.scan(batch_size=batch_size, after=state["cursor"]):
            refuse_duplicate_ids(source, batch)
            mapped = transform(batch)
            mapped, counts = mapped if isinstance(mapped, tuple) else (mapped, {})
            mapped.cursor = batch.cursor
            yield mapped, len(batch), counts

    written = 0
    for batch, read, counts in read_ahead(mapped_batches(), prefetch, name=f"vecbridge-read-{phase}"):
        if len(batch):
            target.upsert(batch)
        fault_point(f"{checkpoint.identity.get('kind')}.{phase}.batch-written")
        for key, n in counts.items():   # saved by the commit below, with the batch they describe
            state[key] = state.get(key, 0) + n
        checkpoint.commit(phase, batch.cursor, len(batch), read)
        fault_point(f"{checkpoint.identity.get('kind')}.{phase}.batch-committed")
        written += len(batch)
        if on_progress:
            on_progress(read)
    checkpoint.complete(phase)
    return written
