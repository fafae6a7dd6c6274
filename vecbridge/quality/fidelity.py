"""Does a target hold the mapped source records? Record-by-record comparison (present, vector within a
tolerance of the mapped source vector, same user payload), tallies that add up over parts of a collection, and
the checks ``verify`` reports from them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..align.artifact import Alignment
from ..records import CollectionInfo, VectorBatch
from ..results import Check
from ..vectors import l2_normalize

_RESERVED = ("_vb_",)


#: failing ids a check names, at most
EXAMPLES = 3


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

