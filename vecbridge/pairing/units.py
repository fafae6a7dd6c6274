"""How a job over the pairs of two collections is cut into units for an engine (:mod:`vecbridge.runtime.engine`).

On one machine a job reads its pairs in one pass: one unit, the whole source (or a seeded sample of ``limit``
records of it) or the whole list of a ``file:PATH`` pairing. An engine whose bodies run in other processes
(``engine.remote``: Ray) gets ``engine.units`` units instead: :class:`~vecbridge.connectors.base.KeyRange` slices of
the source, or consecutive chunks of the listed pairs, each a whole number of batches so that every unit reads the
batches one process reads. A ``field:NAME`` pairing's key index of the target is then built once for the whole job
(by units over the target's own key ranges where it has them) and shared by every unit, instead of each unit reading
the whole target again.

Every unit reads its pairs with the pairing's own stream (:attr:`Pairing.stream`, the single-process code), so a
split job sees the same pairs as a whole one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..connectors.base import Collection, KeyRange, VectorBatch
from ..errors import InputError
from ..linking.pairspec import PairSpec
from ..runtime.engine import LOCAL
from ..runtime.open import open_collection
from .pairs import pairs_from_list, read_pairs_file


class Counting:
    """A collection that counts the records read from it (``scan``, ``sample``, ``get``), so that "no pairs" can say
    how many records were examined; every other attribute is the collection's own."""

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


class _Slice:
    """One key range of a collection (None: all of it), seen by the pairing code as a whole collection: :meth:`scan`
    reads only the range, keeps only the records ``keep(ids)`` selects (a mask) and counts every record read; the
    rest is the collection's own."""

    def __init__(self, coll: Collection, rng: KeyRange | None, keep: Callable[[list], np.ndarray] | None = None):
        self._coll, self._range, self._keep = coll, rng, keep
        self.n_read = 0

    def __getattr__(self, name):
        return getattr(self._coll, name)

    def scan(self, batch_size: int = 1000, after: Any = None) -> Iterator[VectorBatch]:
        rng = self._range
        batches = self._coll.scan(batch_size) if rng is None else \
            self._coll.scan(batch_size, after=rng.after, until=rng.until)
        for batch in batches:
            self.n_read += len(batch)
            if self._keep is not None:
                mask = self._keep(batch.ids)
                if not mask.all():
                    batch = batch.take(mask)
            if len(batch):
                yield batch


class _ListedReader:
    """A chunk of a ``file:PATH`` pairing's id pairs, read as :func:`~vecbridge.pairing.pairs.pairs_from_list` reads
    the whole list, optionally keeping only the pairs whose source id ``keep`` selects; counts the pairs gone
    through."""

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


@dataclass(frozen=True)
class PairJob:
    """What every unit of a pairing job shares: both collections (as the engine hands them to a body: the
    collection itself here, its sealed URL for a Ray task), the pairing and its stream, records per read, and the
    target's key index where the plan built one."""

    source: Any
    target: Any
    spec: PairSpec
    stream: Callable
    batch_size: int
    index: dict | None = None

    def open(self) -> tuple[Counting, Collection | None]:
        """The two collections, the source counting what it reads (None where the pairs carry their vectors)."""
        if self.source is None:
            return Counting(None), None
        return Counting(open_collection(self.source)), open_collection(self.target)


@dataclass(frozen=True)
class Records:
    """A unit of source records: a key range (None: the whole source), or a seeded sample of ``limit`` of them."""

    range: KeyRange | None = None
    limit: int | None = None
    seed: int = 0

    def pairs(self, source: Collection, target: Collection, job: PairJob, keep=None):
        """``(pair batches, reader)``: ``reader.n_read`` counts the records gone through."""
        part = source if self.range is None and keep is None else _Slice(source, self.range, keep)
        return job.stream(part, target, job.spec, batch_size=job.batch_size, limit=self.limit, seed=self.seed,
                          index=job.index), part


@dataclass(frozen=True)
class Listed:
    """A unit of listed id pairs (a chunk of a ``file:PATH`` pairing's list, or all of it)."""

    items: list = field(default_factory=list)

    def pairs(self, source: Collection, target: Collection, job: PairJob, keep=None):
        """``(pair batches, reader)``: ``reader.n_read`` counts the listed pairs gone through."""
        reader = _ListedReader(self.items, keep)
        return reader.batches(source, target, job.batch_size), reader


@dataclass(frozen=True)
class Carried:
    """A unit of pairs that carry their vectors (a links file of re-embedded or reference-corpus anchors: no store is
    read), the first ``limit`` of them (None: all); each pair counts as a record read."""

    links: Any
    limit: int | None = None

    def pairs(self, source: Counting, target, job: PairJob, keep=None):
        return self._batches(source, job.batch_size), source

    def _batches(self, counting: Counting, batch_size: int):
        links = self.links
        n = len(links) if self.limit is None else min(self.limit, len(links))
        for lo in range(0, n, batch_size):
            hi = min(lo + batch_size, n)
            counting.n_read += hi - lo
            yield (VectorBatch(links.source_ids[lo:hi], links.source_vectors[lo:hi]),
                   VectorBatch(links.target_ids[lo:hi], links.target_vectors[lo:hi]))


def carried(links, spec: PairSpec, batch_size: int, limit: int | None) -> "Plan":
    """The plan of pairs that carry their vectors: one unit, in this process (nothing to spread: no store)."""
    return Plan([Carried(links, limit)], PairJob(None, None, spec, None, batch_size), False)


def key_ranges(coll: Collection, n: int) -> list[KeyRange]:
    """``n`` key ranges of ``coll``; a store that cannot cut them is refused in one line."""
    if not coll.capabilities.key_ranges:
        raise InputError(f"--engine ray reads {coll.display_url} by key ranges, which its store does not offer yet: "
                         f"use --engine local")
    return coll.key_ranges(n)


def record_units(source: Collection, spec: PairSpec, n: int | None, batch_size: int, limit: int | None,
                 seed: int) -> list[Records]:
    """The source itself (one unit), or ``n`` key ranges of it."""
    if n is None:
        return [Records(limit=limit, seed=seed)]
    return [Records(r) for r in key_ranges(source, n)]


def listed_units(source: Collection, spec: PairSpec, n: int | None, batch_size: int, limit: int | None,
                 seed: int) -> list[Listed]:
    """The listed pairs (a seeded sample of ``limit`` of them) as one unit, or in at most ``n`` consecutive chunks,
    each a whole number of batches (so that every unit reads the batches a single process reads)."""
    pairs = read_pairs_file(spec.value)
    if limit is not None and limit < len(pairs):
        pick = np.sort(np.random.default_rng(seed).choice(len(pairs), limit, replace=False))
        pairs = [pairs[i] for i in pick]
    if n is None:
        return [Listed(pairs)]
    size = max(math.ceil(len(pairs) / max(n, 1) / batch_size), 1) * batch_size
    return [Listed(pairs[lo:lo + size]) for lo in range(0, len(pairs), size)]


def _index_unit(rng: KeyRange | None, job: tuple) -> Iterator[int]:
    """The payload-key index of one slice of the target (None: all of it): key -> the first id holding it, in scan
    order; reports the records read."""
    target, name, batch_size = job
    coll = open_collection(target)
    index: dict = {}
    read = 0
    batches = coll.scan(batch_size) if rng is None else coll.scan(batch_size, after=rng.after, until=rng.until)
    for batch in batches:
        for rid, payload in zip(batch.ids, batch.payloads):
            key = payload.get(name) if payload else None
            if key is not None:
                index.setdefault(key, rid)
        read += len(batch)
        yield read
    return index


def field_index(target: Collection, name: str, engine, batch_size: int) -> dict:
    """The target's payload-key index (key -> the first id holding it, in scan order, as
    :func:`~vecbridge.pairing.pairs.pairs_by_field` builds it), built once per job: by units over key ranges of the
    target, merged in range order (so the same id wins), or in this process for a store without key ranges."""
    if target.capabilities.key_ranges:
        parts = engine.run(_index_unit, target.key_ranges(engine.units),
                           shared=(engine.portable(target), name, batch_size))
    else:
        parts = LOCAL.run(_index_unit, [None], shared=(target, name, batch_size))
    index: dict = {}
    for part in parts:
        for key, rid in part.items():
            index.setdefault(key, rid)
    if not index:
        raise InputError(f"no record of the target has payload field {name!r}")
    return index


@dataclass
class Plan:
    """A pairing job cut for an engine: the units, what they share, and whether it is ``split`` (more than one
    process reads the pairs: then each unit reads a key range or a chunk, never a sample)."""

    units: Sequence
    job: PairJob
    split: bool

    @property
    def listed(self) -> int:
        """The pairs the units list (a ``file:PATH`` pairing), else 0."""
        return sum(len(u.items) for u in self.units if isinstance(u, Listed))

    def progress(self, on_batch: Callable[[int], None] | None):
        """``on_report`` of a job over the plan's units: a whole plan ticks the pairs of each batch (its total is the
        records it samples); a split plan the records each unit has read (its total is every record, paired or not;
        each read counted once, even when Ray re-runs a unit). A unit reports ``(pairs in the batch, records read
        so far)``."""
        if on_batch is None:
            return None
        seen = [0] * len(self.units)

        def on_report(i: int, report: tuple[int, int]) -> None:
            paired, read = report
            if self.split:
                if read > seen[i]:
                    on_batch(read - seen[i])
                    seen[i] = read
            elif paired:
                on_batch(paired)
        return on_report
