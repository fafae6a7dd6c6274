"""Pairs streamed into the sums a fit needs: the held-out side dropped by id hash, bad vectors refused by
their record, optional l2 normalisation, float64 moments that add up across the units of a job.
"""
from __future__ import annotations

import numpy as np

from ..align.methods import METHODS as METHODS  # the table, for the CLI
from ..align.moments import PairMoments
from ..validation import check_paired
from ..vectors import l2_normalize
from .pairs import in_holdout


class PairAccumulator:
    """The fit's step for one batch of pairs, in one place: drop the held-out side (by id hash), refuse a bad vector by
    its record, normalise, add to the streamed moments (and keep the pairs for a method that does not stream).

    Every unit of the fit (:func:`fit_unit`: the whole source in one process, or one key range of it in a Ray task)
    feeds its batches to this same :meth:`add`, so all engines see the same pairs; the units' accumulators are then
    merged (:meth:`merge`) in unit order."""

    def __init__(self, holdout: float = 0.0, normalization: str = "none", keep_pairs: bool = False):
        self.holdout = holdout
        self.normalization = normalization
        self.moments: PairMoments | None = None   # None until a batch came
        self.n_seen = 0                            # paired records (fit and held out)
        self.kept: list | None = [] if keep_pairs else None

    def add(self, s_batch, t_batch) -> None:
        self.n_seen += len(s_batch)
        keep = ~in_holdout(s_batch.ids, self.holdout)
        X, Y = s_batch.vectors[keep], t_batch.vectors[keep]
        if len(X):   # name the record, not a row of this batch, when a vector is NaN, inf or all zeros
            X, Y = check_paired(X, Y, names=("source", "target"),
                                ids=(np.asarray(s_batch.ids, dtype=object)[keep],
                                     np.asarray(t_batch.ids, dtype=object)[keep]))
        if self.normalization == "l2":
            X, Y = l2_normalize(X, np.float64), l2_normalize(Y, np.float64)
        if self.moments is None:
            self.moments = PairMoments(s_batch.dim, t_batch.dim)
        if len(X):
            self.moments.update(X, Y, offset=self.moments.n)
            if self.kept is not None:
                self.kept.append((np.asarray(X, np.float32), np.asarray(Y, np.float32)))

    def merge(self, other: "PairAccumulator") -> "PairAccumulator":
        """Add what ``other`` gathered on another part of the pairs (sums: the order changes only the rounding)."""
        self.n_seen += other.n_seen
        if other.moments is not None:   # into sums of our own (``other``'s may be read-only: Ray's zero-copy arrays)
            if self.moments is None:
                self.moments = PairMoments(other.moments.src_dim, other.moments.tgt_dim)
            self.moments.merge(other.moments)
        if self.kept is not None and other.kept:
            self.kept.extend(other.kept)
        return self

