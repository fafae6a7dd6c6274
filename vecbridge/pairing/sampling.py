"""A sample of the pairs of a plan (:class:`~vecbridge.pairing.units.Plan`), for ``evaluate`` and ``report``.

Two samplers, chosen by the plan, because the two plans read different things:

* a whole plan (one process) samples **source records first**: a seeded sample of ``limit`` records of the source
  is paired in stream order and cut at ``k`` pairs (:func:`first_pairs`). It reads only the sample, but it thins out
  with the share of records that have a partner: fewer than ``k`` pairs can come back while pairs remain.
* a split plan (key ranges read by several processes) reads every record, and keeps, of each unit's pairs, the ``k``
  whose seeded hash of the source id is smallest (:class:`PairSample`, :func:`hashed_pairs`); the ``k`` smallest of
  all units are the ``k`` smallest overall. The sample is uniform without replacement over the pairs themselves,
  the same whatever the units, and never falls short while pairs remain. A record is looked up in the target only
  when its hash could still make the cut.
"""
from __future__ import annotations

import hashlib
from functools import partial
from typing import Sequence

import numpy as np

from ..connectors.base import VectorBatch
from .pairs import in_holdout
from .units import PairJob, Plan


def _hashes(ids: Sequence, seed: int) -> np.ndarray:
    """A seeded 64-bit hash of each id (as text, so that ``5`` and ``"5"`` agree), independent of the holdout's."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(f"{seed}\x00{i}".encode(), digest_size=8,
                                                       person=b"vb-sample").digest(), "big") for i in ids),
                       dtype=np.uint64, count=len(ids))


class PairSample:
    """The ``k`` pairs with the smallest seeded hash of their source id (ties by the target id's) among all pairs
    added (:meth:`add`): a uniform sample without replacement of them, the same whatever order or split they came in,
    so per-unit samples merge (:meth:`merge`) into the sample of the whole."""

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


def first_pairs(unit, job: PairJob, *, k: int | None, holdout: float):
    """Source records first (a whole plan): the unit's pairs in stream order (the held-out ones only, with a
    ``holdout``), cut at ``k`` (None: all). Returns ``(source records, partners, records gone through)``."""
    source, target = job.open()
    batches, reader = unit.pairs(source, target, job)
    src_parts, tgt_parts, n = [], [], 0
    for s, t in batches:
        if holdout > 0:
            keep = in_holdout(s.ids, holdout)
            s, t = s.take(keep), t.take(keep)
        src_parts.append(s)
        tgt_parts.append(t)
        n += len(s)
        if k is not None and n >= k:
            break
    src_b, tgt_b = VectorBatch.concat(src_parts), VectorBatch.concat(tgt_parts)
    n = len(src_b) if k is None else min(len(src_b), k)
    return src_b.take(np.arange(n)), tgt_b.take(np.arange(n)), reader.n_read


def hashed_pairs(unit, job: PairJob, *, k: int, seed: int, holdout: float):
    """The ``k`` pairs of one unit (of a split plan) with the smallest seeded hash of the source id (held-out ones
    only, with a ``holdout``). Returns ``(PairSample, records gone through)``."""
    sample = PairSample(k, seed)

    def keep(ids) -> np.ndarray:
        mask = in_holdout(ids, holdout) if holdout > 0 else np.ones(len(ids), dtype=bool)
        return mask & sample.admits(ids)

    source, target = job.open()
    batches, reader = unit.pairs(source, target, job, keep)
    for s_batch, t_batch in batches:
        sample.add(s_batch, t_batch)
    sample._cut()   # what goes back to the driver is the unit's k, not its pending batches
    return sample, reader.n_read


def sample_pairs(plan: Plan, engine, *, k: int | None, seed: int = 0, holdout: float = 0.0
                 ) -> tuple[VectorBatch, VectorBatch, int]:
    """``(source records, their partners, records gone through)``: ``k`` pairs of the plan (held-out ones only, with
    a ``holdout``; ``k`` None: every pair), by the plan's sampler (see the module docstring)."""
    if not plan.split:
        return engine.run(partial(first_pairs, k=k, holdout=holdout), plan.units, shared=plan.job)[0]
    results = engine.run(partial(hashed_pairs, k=k, seed=seed, holdout=holdout), plan.units, shared=plan.job)
    sample = PairSample(k, seed)
    for part, _ in results:
        sample.merge(part)
    read = sum(r for _, r in results)
    if sample.source is None:
        empty = VectorBatch([], np.zeros((0, 0), np.float32))
        return empty, empty, read
    return sample.source, sample.target, read
