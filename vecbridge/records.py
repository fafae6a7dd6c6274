"""Records in memory, whatever store they came from: a batch of ids, vectors and payloads, a key range
of a collection, and what a collection is (name, dimension, metric, count).
"""
from __future__ import annotations

import operator
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .errors import InputError

_MISSING = object()


class StampColumns(SequenceABC):
    """The record stamps of a batch kept as columns: the fields every record shares once (``shared``: the origin, what
    made the vectors, the space) and the others one value per record (``columns``: name -> a list, None where a
    record has no such field, or a float64 array, NaN where it has none). It reads as a list of stamp dicts, so every
    store takes it; a store that keeps stamps in columns of its own (the file store) writes it without making a dict
    or a JSON text per record, which cost more than the rest of such a write."""

    __slots__ = ("shared", "columns", "_n")

    def __init__(self, shared: dict, columns: dict | None = None, n: int | None = None):
        self.shared = dict(shared)
        self.columns = {k: v if isinstance(v, (list, np.ndarray)) else list(v) for k, v in (columns or {}).items()}
        if any(isinstance(v, np.ndarray) and (v.dtype != np.float64 or v.ndim != 1) for v in self.columns.values()):
            raise InputError("an array stamp column must be one float64 value per record")
        lengths = {len(v) for v in self.columns.values()}
        if len(lengths) > 1 or (n is not None and lengths and lengths != {n}):
            raise InputError("the stamp columns of a batch must all have one value per record")
        if n is None and not lengths:
            raise InputError("stamp columns without a column need the number of records")
        self._n = int(n if n is not None else lengths.pop())

    @classmethod
    def of(cls, stamps: Sequence[dict]) -> "StampColumns":
        """The columns of a list of stamp dicts (none of them None): a field with one value (of one type) in every
        stamp is shared, every other field is a column."""
        if isinstance(stamps, cls):
            return stamps
        stamps = list(stamps)
        keys = list(dict.fromkeys(k for s in stamps for k in s))
        shared, columns = {}, {}
        for k in keys:
            values = [s.get(k, _MISSING) for s in stamps]
            first = values[0]
            if first is not _MISSING and all(type(v) is type(first) and v == first for v in values):
                shared[k] = first
            else:
                columns[k] = [None if v is _MISSING else v for v in values]
        return cls(shared, columns, len(stamps))

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            n = len(range(*i.indices(self._n)))
            return StampColumns(self.shared, {k: v[i] for k, v in self.columns.items()}, n)
        i = operator.index(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("stamp index out of range")
        out = dict(self.shared)
        for k, col in self.columns.items():
            v = col[i]
            if isinstance(col, np.ndarray):
                if v == v:   # NaN: none
                    out[k] = float(v)
            elif v is not None:
                out[k] = v
        return out

    def __iter__(self):
        return (self[i] for i in range(self._n))

    def __eq__(self, other) -> bool:
        if isinstance(other, SequenceABC) and not isinstance(other, (str, bytes)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"StampColumns({self.shared!r}, columns={list(self.columns)}, n={self._n})"


@dataclass
class VectorBatch:
    """Records in transit: ``ids[i]``, ``vectors[i]`` (float32) and ``payloads[i]`` (a dict, possibly empty);
    ``stamps[i]``: the record's provenance stamp (a small dict saying which space its vector is in and how it was
    made, see :func:`vecbridge.connectors.base.record_stamp_text`), or None where it has none. ``stamps`` None: not
    read, or nothing to write (an upsert then leaves stamps as the store leaves the rest of a replaced record)."""

    ids: list
    vectors: np.ndarray
    payloads: list[dict] | None = None
    cursor: Any = None
    stamps: Sequence[dict | None] | None = None

    def __post_init__(self):
        self.ids = list(self.ids)
        self.vectors = np.asarray(self.vectors, dtype=np.float32)
        if self.vectors.ndim == 1 and self.vectors.size == 0:
            self.vectors = self.vectors.reshape(0, 0)
        if self.vectors.ndim != 2 or self.vectors.shape[0] != len(self.ids):
            raise InputError(f"batch has {len(self.ids)} ids but vectors of shape {self.vectors.shape}")
        if self.payloads is None:
            self.payloads = [{} for _ in self.ids]
        elif len(self.payloads) != len(self.ids):
            raise InputError(f"batch has {len(self.ids)} ids but {len(self.payloads)} payloads")
        if self.stamps is not None and len(self.stamps) != len(self.ids):
            raise InputError(f"batch has {len(self.ids)} ids but {len(self.stamps)} stamps")

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def take(self, index) -> "VectorBatch":
        """A sub-batch (rows selected by an index array or boolean mask)."""
        index = np.flatnonzero(index) if np.asarray(index).dtype == bool else np.asarray(index, dtype=np.int64)
        stamps = None if self.stamps is None else [self.stamps[i] for i in index]
        return VectorBatch([self.ids[i] for i in index], self.vectors[index], [self.payloads[i] for i in index],
                           stamps=stamps)

    def with_vectors(self, vectors: np.ndarray, stamps: list | None = None) -> "VectorBatch":
        """The same records with new vectors (e.g. mapped into another space) and, given, their new stamps (else
        none: stamps say how the vectors were made); the cursor is kept."""
        return VectorBatch(self.ids, vectors, self.payloads, self.cursor, stamps)

    def with_stamps(self, stamps: list | None) -> "VectorBatch":
        """The same records and vectors with these stamps."""
        return VectorBatch(self.ids, self.vectors, self.payloads, self.cursor, stamps)

    @classmethod
    def concat(cls, batches: Sequence["VectorBatch"]) -> "VectorBatch":
        batches = [b for b in batches if len(b)]
        if not batches:
            return cls([], np.zeros((0, 0), dtype=np.float32), [])
        stamps = None if all(b.stamps is None for b in batches) else [
            s for b in batches for s in (b.stamps if b.stamps is not None else [None] * len(b))]
        return cls([i for b in batches for i in b.ids], np.concatenate([b.vectors for b in batches]),
                   [p for b in batches for p in b.payloads], batches[-1].cursor, stamps)


@dataclass(frozen=True)
class KeyRange:
    """One slice of a keyset scan: the records after ``after`` (exclusive; None: from the start) up to and including
    ``until`` (None: to the end), both cursors in the order of the connector's own scan. JSON-serialisable through
    :meth:`as_dict` / :meth:`from_dict` (a checkpoint keeps the plan of a distributed job)."""

    after: Any = None
    until: Any = None

    def as_dict(self) -> dict:
        return {"after": self.after, "until": self.until}

    @classmethod
    def from_dict(cls, d: dict) -> "KeyRange":
        return cls(d.get("after"), d.get("until"))


def quantile_positions(count: int, n: int) -> list[int]:
    """Positions (0-based, ascending, distinct) of the last record of each of the first ``n - 1`` of ``n`` even
    slices of ``count`` sorted keys."""
    if int(n) <= 0:
        raise InputError(f"number of ranges must be positive, got {n}")
    return sorted({(int(count) * i) // int(n) - 1 for i in range(1, int(n))} - {-1})


def ranges_from_bounds(bounds: Sequence) -> list[KeyRange]:
    """Consecutive ranges cut after each of ``bounds`` (distinct cursors in scan order): the first open at the start
    and the last open at the end, so together they cover every record, whatever a sample of keys missed."""
    edges = [None, *bounds, None]
    return [KeyRange(a, b) for a, b in zip(edges[:-1], edges[1:])]


def ranges_from_keys(keys: Sequence, n: int) -> list[KeyRange]:
    """At most ``n`` ranges cut at evenly spaced quantiles of ``keys`` (sampled keys, sorted in scan order)."""
    bounds: list = []
    for pos in quantile_positions(len(keys), n):
        if not bounds or keys[pos] != bounds[-1]:
            bounds.append(keys[pos])
    return ranges_from_bounds(bounds)


@dataclass
class CollectionInfo:
    """What a report or a migration plan needs to know about a collection."""

    name: str
    dim: int
    metric: str
    count: int
    vector_fields: dict[str, tuple[int, str]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"name": self.name, "dim": self.dim, "metric": self.metric, "count": self.count,
                "vector_fields": {k: {"dim": d, "metric": m} for k, (d, m) in self.vector_fields.items()}}

