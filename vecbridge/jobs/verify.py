"""Check a migration: same ids on both sides, and a sample of mapped vectors recomputed from the source (every record
on an engine spread over processes)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Iterator

import numpy as np

from ..align.artifact import Alignment
from ..connectors.base import Collection, CollectionInfo, VectorBatch
from ..pairing.units import Records, key_ranges
from ..results import Check, VerifyResult
from ..runtime.engine import engine_of
from ..runtime.open import load_alignment, open_collection
from ..vectors import l2_normalize

_RESERVED = ("_vb_",)
#: failing ids a check names, at most
EXAMPLES = 3


def _ids(coll: Collection, batch_size: int = 5000) -> set:
    return {str(i) for batch in coll.scan(batch_size=batch_size) for i in batch.ids}


def _user_payload(p: dict) -> dict:
    return {k: v for k, v in (p or {}).items() if not k.startswith(_RESERVED)}


@dataclass
class RecordTally:
    """What comparing source records with the target found: counts, the largest vector error and a few failing ids
    of each kind. Tallies of disjoint parts add up (:meth:`merge`), so a check of every record can be split."""

    checked: int = 0        # source records compared
    matched: int = 0        # of them, found in the target
    vectors_bad: int = 0
    payloads_bad: int = 0
    max_error: float = 0.0
    examples: dict = field(default_factory=lambda: {"missing": [], "vectors": [], "payloads": []})

    @property
    def missing(self) -> int:
        return self.checked - self.matched

    def merge(self, other: "RecordTally") -> "RecordTally":
        self.checked += other.checked
        self.matched += other.matched
        self.vectors_bad += other.vectors_bad
        self.payloads_bad += other.payloads_bad
        self.max_error = max(self.max_error, other.max_error)
        for kind, ids in other.examples.items():
            self.examples[kind] = (self.examples[kind] + ids)[:EXAMPLES]
        return self


def compare_records(alignment: Alignment, records: VectorBatch, got: VectorBatch, *, metric: str, tolerance: float,
                    payloads: bool = True) -> RecordTally:
    """Compare source ``records`` with what the target returned for their ids (``got``): is each there, is its vector
    the mapped source vector within ``tolerance`` (relative to its norm; by direction in a cosine collection, where
    some stores normalise on insert), is its user payload the same."""
    pos = {str(i): j for j, i in enumerate(got.ids)}
    rows = [j for j, i in enumerate(records.ids) if str(i) in pos]
    at = [pos[str(records.ids[j])] for j in rows]
    expected = alignment.transform(records.vectors[rows]) if rows else np.zeros((0, alignment.target_dim))
    actual = got.vectors[at] if rows else np.zeros_like(expected)
    if metric == "cosine":
        expected, actual = l2_normalize(expected), l2_normalize(actual)
        err = np.abs(expected - actual).max(axis=1) if rows else np.zeros(0)
    else:
        scale = np.maximum(np.linalg.norm(expected, axis=1), 1e-12)
        err = np.abs(expected - actual).max(axis=1) / scale if rows else np.zeros(0)
    bad_vectors = [records.ids[rows[r]] for r in np.flatnonzero(err > tolerance)]
    bad_payloads = [records.ids[j] for j, g in zip(rows, at)
                    if _user_payload(records.payloads[j]) != _user_payload(got.payloads[g])] if payloads else []
    missing = [i for i in records.ids if str(i) not in pos]
    return RecordTally(checked=len(records), matched=len(rows), vectors_bad=len(bad_vectors),
                       payloads_bad=len(bad_payloads), max_error=float(err.max()) if len(err) else 0.0,
                       examples={"missing": missing[:EXAMPLES], "vectors": bad_vectors[:EXAMPLES],
                                 "payloads": bad_payloads[:EXAMPLES]})


def shape_checks(s_info: CollectionInfo, t_info: CollectionInfo, alignment: Alignment) -> list[Check]:
    """The ``count`` and ``dimension`` checks, from the two collections' info."""
    return [Check("count", s_info.count == t_info.count, f"source {s_info.count:,}, target {t_info.count:,}"),
            Check("dimension", t_info.dim == alignment.target_dim,
                  f"target {t_info.dim}, alignment output {alignment.target_dim}")]


def compare_unit(unit: Records, job: tuple[Any, Any, str | None], *, alignment: Alignment, batch_size: int,
                 tolerance: float, metric: str) -> Iterator[int]:
    """The body of ``verify`` (:mod:`vecbridge.runtime.engine`): the unit's source records (a seeded sample of
    ``unit.limit`` of them, or every record of a key range) looked up in the target and compared; reports the records
    compared so far, returns their :class:`RecordTally`."""
    source, target, field = open_collection(job[0]), open_collection(job[1]), job[2]
    if field is not None:
        target = target.with_vector_field(field)
    if unit.limit is not None:
        batches = [source.sample(unit.limit, seed=unit.seed)]
    else:
        batches = source.scan(batch_size, after=unit.range.after, until=unit.range.until)
    tally = RecordTally()
    for batch in batches:
        tally.merge(compare_records(alignment, batch, target.get(list(batch.ids)), metric=metric,
                                    tolerance=tolerance, payloads=field is None))
        yield tally.checked
    return tally


def sample_checks(src: Collection, tgt: Collection, tally: RecordTally, tolerance: float) -> list[Check]:
    """The ``ids`` check (every id of both collections, as sets) and the checks of a sample's tally."""
    s_ids, t_ids = _ids(src), _ids(tgt)
    missing, extra = s_ids - t_ids, t_ids - s_ids
    return [Check("ids", not missing and not extra,
                  f"{len(missing):,} missing in target, {len(extra):,} not in source"
                  + (f" (e.g. {sorted(missing)[:3] or sorted(extra)[:3]})" if missing or extra else "")),
            Check("vectors", tally.vectors_bad == 0 and tally.missing == 0,
                  f"{tally.matched:,} sampled records recomputed, {tally.vectors_bad} differ by more than "
                  f"{tolerance:g} (max {tally.max_error:.2e})"),
            Check("payloads", tally.payloads_bad == 0,
                  f"{tally.payloads_bad} of {tally.matched:,} sampled payloads differ")]


def verify(source, target, alignment, *, sample: int = 1000, seed: int = 0, tolerance: float = 1e-5,
           field: str | None = None, batch_size: int = 2000, engine=None) -> VerifyResult:
    """Whether ``target`` holds ``source`` mapped through ``alignment``: counts, dimension, ids, a sample of vectors
    recomputed, payloads (:class:`VerifyResult`: ``ok`` and the ``checks``); nothing is written anywhere.

    Vectors are compared relative to their norm (float32 storage); in cosine collections, stores that normalise on
    insert (Qdrant) are compared by direction. On an engine spread over processes (Ray) every record is checked
    instead of a sample: each unit compares one key range of the source, and the counts add up (no id set is held
    anywhere: ids are unique in a collection, so the target's ids that are not in the source number ``target count -
    matched``); each check then says it is a full check.
    """
    engine = engine_of(engine)
    alignment, _ = load_alignment(alignment)
    src, tgt = open_collection(source), open_collection(target)
    view = tgt.with_vector_field(field) if field is not None else tgt
    s_info, t_info = src.info(), view.info()
    engine.require((src, "source"), (tgt, "target"))
    units = [Records(r) for r in key_ranges(src, engine.units)] if engine.remote else \
        [Records(limit=sample, seed=seed)]
    body = partial(compare_unit, alignment=alignment, batch_size=batch_size, tolerance=tolerance,
                   metric=t_info.metric)
    with engine.session():
        tallies = engine.run(body, units, shared=(engine.portable(src), engine.portable(tgt), field))
    tally = RecordTally()
    for part in tallies:
        tally.merge(part)
    checks = full_checks(s_info, t_info, alignment, tally, tolerance) if engine.remote else \
        shape_checks(s_info, t_info, alignment) + sample_checks(src, view, tally, tolerance)
    return VerifyResult(all(c.ok for c in checks), src.display_url, view.display_url, checks)


def full_checks(s_info: CollectionInfo, t_info: CollectionInfo, alignment: Alignment, tally: RecordTally,
                tolerance: float) -> list[Check]:
    """The checks of :func:`verify` from a tally of every source record (ids are unique in a collection, so the
    target ids that are not in the source number ``target count - matched``)."""
    extra = max(t_info.count - tally.matched, 0)
    ex = tally.examples
    return shape_checks(s_info, t_info, alignment) + [
        Check("ids", tally.missing == 0 and extra == 0,
              f"full check: {tally.missing:,} missing in target, {extra:,} not in source"
              + (f" (e.g. missing {ex['missing']})" if tally.missing else "")),
        Check("vectors", tally.vectors_bad == 0 and tally.missing == 0,
              f"full check: all {tally.matched:,} matched records recomputed, {tally.vectors_bad:,} differ by more "
              f"than {tolerance:g} (max {tally.max_error:.2e})"
              + (f" (e.g. {ex['vectors']})" if ex["vectors"] else "")),
        Check("payloads", tally.payloads_bad == 0,
              f"full check: {tally.payloads_bad:,} of {tally.matched:,} payloads differ"
              + (f" (e.g. {ex['payloads']})" if ex["payloads"] else "")),
    ]
