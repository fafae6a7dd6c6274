"""Each record's stamp in the upgrade's own collection: how its new vector was made, kept in the store beside it.

A stamp is written in the same upsert as the vector it describes (:class:`~vecbridge.records.VectorBatch` ``stamps``),
so a killed run never leaves a vector without its stamp or a stamp without its vector, serving replicas on other
machines read the same stamps, and "which records are still mapped" is a filtered scan of the store
(:meth:`~vecbridge.connectors.base.Collection.scan_stamps`). A stamp says:

- ``origin``: ``mapped`` (the alignment applied to its old vector), ``native`` (the new model run on its text),
  ``pending`` (added or changed in the source since its new vector was made: it holds the map of its current old
  vector and is re-embedded first) or ``no-text`` (no text to embed: it keeps its mapped vector);
- ``made_by``: the alignment's fingerprint or the model's name; ``space``, ``model``, ``dim``: the space it is in;
- ``digest``: a hash of the old vector and the text the new vector was made from (a different one at the next sync
  means the application changed the record);
- ``residual``, ``hubness``, ``hits`` (with ``log``, the query log that counted them): the priority scores.
"""
from __future__ import annotations

import hashlib
import heapq
import json
from typing import Callable, Iterable

import numpy as np

from .._blas import thread_limit
from ..align.artifact import Alignment
from ..connectors.base import Collection, VectorBatch
from ..errors import InputError
from ..quality.scoring import hub_penalty
from ..quality.space import SpaceFingerprint
from ..records import StampColumns
from .provenance import record_stamp, spaces_of

ORIGINS = ("mapped", "native", "pending", "no-text")
#: re-embedding orders (after the pending records): the stamp's score that ranks a record, higher first
PRIORITIES = {"random": None, "residual": "residual", "hubs": "hubness", "queries": "hits"}
#: records one scan of the store queues for re-embedding (another scan follows when they are done)
QUEUE = 50_000


def record_digest(vector, text) -> str:
    """What a record's new vector was made from: its old vector (bit for bit) and its text. A different digest at
    the next sync means the application changed the record, so its new vector is stale."""
    h = hashlib.blake2b(np.ascontiguousarray(vector, dtype=np.float32).tobytes(), digest_size=12)
    h.update(text.encode() if isinstance(text, str) else b"\x00")
    return h.hexdigest()


def digests_of(batch: VectorBatch, text_field: str) -> list[str]:
    """:func:`record_digest` of each record of ``batch``: what its new vector is made from."""
    return [record_digest(v, (p or {}).get(text_field)) for v, p in zip(batch.vectors, batch.payloads)]


def shuffle_rank(record_id) -> int:
    """A fixed pseudo-random rank per record: the ``random`` priority order, the same in every run (so an
    interrupted run continues where it was)."""
    key = json.dumps(record_id)
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=7).digest(), "big")


def _floats(values, n: int) -> np.ndarray:
    """Scores as a stamp column: float64, NaN where a record has none (a None, or a score that is not finite)."""
    out = np.array([np.nan if v is None else v for v in values] if isinstance(values, list) else values,
                   dtype=np.float64).reshape(-1)
    if len(out) != n:
        raise InputError(f"{len(out)} scores for {n} records")
    out[~np.isfinite(out)] = np.nan
    return out


class Stamper:
    """Makes the stamps of one kind of write (``origin`` and ``made_by`` fixed, in ``space``): picklable, so a Ray
    worker stamps what it writes and the driver handles no per-record rows."""

    def __init__(self, origin: str, made_by: str, space: SpaceFingerprint | None, dim: int | None = None):
        if origin not in ORIGINS:
            raise InputError(f"origin must be one of {', '.join(ORIGINS)}")
        self.base = record_stamp(origin, made_by, space, dim=dim)

    def __call__(self, n: int, *, digests: Iterable | None = None, residuals=None, hubness=None) -> StampColumns:
        """The stamps of ``n`` records, as columns (what every record shares once): a list of dicts to every store,
        no dict per record to a store that keeps stamps in columns."""
        columns = {k: v for k, v in (("digest", None if digests is None else list(digests)),
                                     ("residual", None if residuals is None else _floats(residuals, n)),
                                     ("hubness", None if hubness is None else _floats(hubness, n))) if v is not None}
        return StampColumns(self.base, columns, n)


class NativeStamps:
    """The stamps of records the new model embedded (``native``, made by the model, with the digest of what each was
    made from and its hub score against the ``k`` nearest reference queries): built by the driver, applied by every
    worker of ``reembed`` and by the searches that write back what they re-rank."""

    def __init__(self, stamp: Stamper, text_field: str, reference: np.ndarray | None, k: int):
        self.stamp, self.text_field, self.reference, self.k = stamp, text_field, reference, k

    def __call__(self, batch: VectorBatch, vectors: np.ndarray) -> list[dict]:
        hub = None
        if self.reference is not None and len(vectors):
            with thread_limit(1):   # one batch's neighbours: threads would only wait on each other
                hub = hub_penalty(vectors, self.reference, self.k)
        return self.stamp(len(batch), digests=digests_of(batch, self.text_field), hubness=hub)


class MappedStamps:
    """How an upgrade's start stamps each record its migration maps: ``mapped`` by the map, with the digest of what
    its vector was made from and, where the re-embedded fit sample measures them, its priority scores (the
    ``residual`` of the fit anchors near it in the old space, weighted by similarity: the ``anchor_residual``
    strategy the report measures; its hub score against the sample's ``k`` nearest new vectors)."""

    def __init__(self, aligned: Alignment, text_field: str, sample, k: int):
        spaces = spaces_of(aligned)
        self.stamp = Stamper("mapped", aligned.fingerprint, spaces["target"] if spaces else None, aligned.target_dim)
        self.text_field, self.k = text_field, k
        self.sample = None
        if sample is not None:
            from ..quality.options import anchor_residuals

            olds, news, _ = sample
            self.sample = (olds.vectors, news, anchor_residuals(aligned.transform(olds.vectors), news))

    def __call__(self, batch: VectorBatch, mapped: np.ndarray) -> list[dict]:
        scored = {}
        if self.sample is not None:
            from ..quality.options import anchor_residual

            old, news, res = self.sample
            scored = {"residuals": anchor_residual(batch.vectors, old, res)[0],
                      "hubness": hub_penalty(mapped, news, self.k)}
        return self.stamp(len(batch), digests=digests_of(batch, self.text_field), **scored)


class RecordStamps:
    """The stamps of the upgrade's collection (``target``: its own collection, or the new vector field of the
    source): read, counted and ranked from the store; rewritten where a score changes."""

    def __init__(self, target: Collection, *, log: str | None = None):
        self.target = target
        self.log = log   # the query log whose ``hits`` count (hits counted by an earlier log rank as none)

    # --- reading --------------------------------------------------------------------------------------------------
    def of(self, ids: Iterable) -> dict:
        """``{id: stamp}`` of the ids the upgrade holds (records gone from the source, or never its, are left out)."""
        return self.target.stamps_of(list(dict.fromkeys(ids)))

    def digests(self, ids: Iterable) -> dict:
        return {i: s.get("digest") for i, s in self.of(ids).items()}

    def hub_scores(self, ids: Iterable) -> dict:
        """``{id: hub score or None}`` of the ids the upgrade holds."""
        return {i: s.get("hubness") for i, s in self.of(ids).items()}

    def counts(self) -> dict[str, int]:
        """Records per origin: one scan of the stamps (no vectors where the store filters)."""
        out = dict.fromkeys(ORIGINS, 0)
        for _, stamps in self.target.scan_stamps(batch_size=5000):
            for s in stamps:
                if s["origin"] in out:
                    out[s["origin"]] += 1
        return out

    def ids(self) -> Iterable[list]:
        """Every stamped id, in batches (what the upgrade holds)."""
        for ids, _ in self.target.scan_stamps(batch_size=5000):
            yield ids

    def queue(self, priority: str = "random", *, limit: int = QUEUE, skip: set | None = None) -> list[tuple]:
        """``(id, origin)`` of up to ``limit`` records still waiting for their native vector, in the order
        ``reembed`` takes them: records the source gained or changed first, then mapped ones by ``priority``:
        ``random`` (a fixed shuffle), ``residual`` (the mapped vectors expected to be worst first: those whose nearest
        fit anchors the map fits worst), ``hubs`` (mapped vectors that attract the most queries first) or ``queries``
        (the records the latest query log retrieves most often first); ties and unscored records in shuffle
        order."""
        if priority not in PRIORITIES:
            raise InputError(f"priority must be one of {', '.join(PRIORITIES)}, got {priority!r}")
        key = PRIORITIES[priority]
        skip = skip or set()

        def rank(i, s) -> tuple:
            score = s.get(key) if key else None
            if key == "hits" and s.get("log") != self.log:
                score = None
            return (s["origin"] != "pending", -(score if isinstance(score, (int, float)) else -1e300), shuffle_rank(i))

        ranked = ((rank(i, s), i, s["origin"]) for ids, stamps in self.target.scan_stamps(
            batch_size=5000, origins=("pending", "mapped")) for i, s in zip(ids, stamps) if i not in skip)
        return [(i, origin) for _, i, origin in heapq.nsmallest(int(limit), ranked, key=lambda t: t[0])]

    def carry_over(self, row_batches: Iterable[list], space: SpaceFingerprint | None, dim: int,
                   log: str | None) -> int:
        """Write stamps kept elsewhere (batches of ``(id, origin, made_by, residual, hubness, hits, digest)``, as
        state files of earlier versions held them) beside their records' vectors; returns the records written."""
        moved = 0
        for rows in row_batches:
            by_id = {r[0]: r for r in rows}

            def stamp(i, _old, by_id=by_id):
                _, origin, made_by, residual, hubness, hits, digest = by_id[i]
                st = Stamper(origin, made_by, space, dim)(1, digests=[digest], residuals=[residual],
                                                          hubness=[hubness])[0]
                return {**st, "hits": hits, "log": log} if hits else st
            moved += self.restamp(list(by_id), stamp)
        return moved

    def rescore(self, hub_of: Callable[[np.ndarray], np.ndarray], hits: dict, log: str) -> int:
        """Every stamp rewritten with its vector (one pass): its hub score ``hub_of(vectors)`` and how often the
        query log ``log`` retrieved it (``hits``; none where it did not). Returns the records rescored."""
        scored = 0
        for batch in self.target.scan(batch_size=2000):
            def rescored(i, stamp, hub):
                if stamp is None:   # not the upgrade's record
                    return None
                stamp = {k: v for k, v in stamp.items() if k not in ("hits", "log")}
                return {**stamp, "hubness": float(hub), **({"hits": hits[i], "log": log} if i in hits else {})}

            stamps = [rescored(i, st, h) for i, st, h in zip(batch.ids, batch.stamps or [None] * len(batch),
                                                              hub_of(batch.vectors))]
            self.target.upsert(batch.with_stamps(stamps))
            scored += sum(s is not None for s in stamps)
        return scored

    # --- rewriting stamps ------------------------------------------------------------------------------------------
    def restamp(self, ids: list, change: Callable[[object, dict | None], dict | None]) -> int:
        """Write ``change(id, stamp)`` as the stamp of each record of ``ids`` the collection holds, with the vector
        it has (one read and one upsert per call): how scores and ``no-text`` are kept."""
        got = self.target.get(list(ids))
        if not len(got):
            return 0
        stamps = [change(i, s) for i, s in zip(got.ids, got.stamps or [None] * len(got))]
        self.target.upsert(got.with_stamps(stamps))
        return len(got)
