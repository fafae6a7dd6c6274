"""Continuous refit: while an upgrade re-embeds, every record re-embedded is an exact pair (its old vector, its native
vector), more pairs than the start's sample. Their sums are added as batches land (never re-read), and each time the
pairs have grown by a quarter the map is refitted on them, judged on held-out re-embedded pairs the sums never saw,
and, when the map it would install (fitted on those too) maps better by a margin worth a rewrite, it replaces the map
in use: the records still mapped are mapped again by it and stamped with its fingerprint.

The sums and the held-out pairs live beside the upgrade's state file (``<state>.refit.npz``, bounded: the sums are
d x d, at most :data:`HELD_MAX` held-out pairs), written whole and atomically; a run killed between two saves loses
only the pairs of the batches since the last one (fewer pairs, never a pair counted twice by a restart).
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

from .._blas import one_blas_thread
from ..align.artifact import Alignment
from ..align.methods import method as method_of
from ..align.moments import PairMoments
from ..align.procrustes import FewPairsWarning
from ..connectors.base import Collection
from ..errors import InputError
from ..vectors import l2_normalize
from .provenance import attach_spaces, spaces_of
from .record_stamps import shuffle_rank

#: one re-embedded record in HOLDOUT_EVERY (by a fixed hash of its id) is held out of the sums to judge the maps
#: (until HELD_MAX are: every later pair goes into the sums)
HOLDOUT_EVERY = 5
#: held-out pairs kept at most (beyond, every pair goes into the sums); a map that replaces the one in use joins
#: them to its fit, and the pairs re-embedded after it judge the next one
HELD_MAX = 2000
#: fewest held-out pairs a refit is judged on (a cosine gain of MIN_GAIN is then ~4 standard errors)
MIN_HELD = 100
#: a refit is tried each time the pairs grow by this factor since the last try
GROWTH = 1.25
#: mean cosine gain on the held-out pairs a new map needs to be worth mapping every mapped record again (about
#: 0.002-0.005 in Recall@10 on both developers' corpora; seven or eight rewrites in all, design notes); the gain of
#: the map installed, fitted on the held-out pairs too (:func:`installed_gain`)
MIN_GAIN = 0.003
#: the stamp origins whose vector the map made (re-mapped by a new map)
MAPPED = ("mapped", "pending", "no-text")
#: pairs gathered before they join the sums: each addition costs d x d work whatever its rows (64 pairs took as long
#: as 2,048), so batches are added in blocks; the sums are the same up to float64 rounding
FOLD_ROWS = 2048


class RefitPairs:
    """The pairs an upgrade has re-embedded since its start: their sums (with the start's own fit sample), the
    held-out pairs, the pair count of the last refit tried and the pairs of the sums the map in use was fitted on
    (``fitted_at``, 0 when it was not fitted on them). Saved to ``path`` by :meth:`save`."""

    def __init__(self, path, src_dim: int, tgt_dim: int):
        self.path = Path(path)
        self.moments = PairMoments(src_dim, tgt_dim)
        self.held_old = np.zeros((0, src_dim), np.float32)
        self.held_new = np.zeros((0, tgt_dim), np.float32)
        self.tried_at = self.fitted_at = 0
        self._waiting: list[tuple[np.ndarray, np.ndarray]] = []   # pairs on their way to the sums (FOLD_ROWS)
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        try:
            with np.load(self.path, allow_pickle=False) as f:
                m = self.moments
                if f["xty"].shape != m.xty.shape:
                    raise ValueError(f"sums of {f['xty'].shape} dimensions, the map's are {m.xty.shape}")
                m.n = int(f["n"])
                for name in ("sum_x", "sum_y", "xty", "xtx", "yty"):
                    setattr(m, name, np.array(f[name], dtype=np.float64))
                self.held_old, self.held_new = np.array(f["held_old"]), np.array(f["held_new"])
                self.tried_at = int(f["tried_at"])
                self.fitted_at = int(f["fitted_at"]) if "fitted_at" in f.files else 0   # saved by older releases
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(f"{self.path} (the continuous refit's pairs) is damaged ({exc}): remove it to start "
                             f"counting pairs again") from None

    def _fold(self) -> None:
        """Add the waiting pairs to the sums, in one block."""
        if self._waiting:
            old, new = (np.concatenate(side).astype(np.float64) for side in zip(*self._waiting))
            self._waiting = []
            with one_blas_thread():   # d x d work on a few thousand rows: threads only wait on each other
                self.moments.update(old, new)

    def save(self) -> None:
        self._fold()
        m = self.moments
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        with open(tmp, "wb") as f:
            np.savez(f, n=m.n, sum_x=m.sum_x, sum_y=m.sum_y, xty=m.xty, xtx=m.xtx, yty=m.yty,
                     held_old=self.held_old, held_new=self.held_new, tried_at=self.tried_at,
                     fitted_at=self.fitted_at)
        os.replace(tmp, self.path)

    @property
    def n(self) -> int:
        """Pairs seen: in the sums (or on their way there) and held out."""
        return self.moments.n + self._waiting_rows + len(self.held_old)

    @property
    def _waiting_rows(self) -> int:
        return sum(len(o) for o, _ in self._waiting)

    def seed(self, old, new) -> "RefitPairs":
        """Start from the pairs the map in use was fitted on (the start's re-embedded sample)."""
        if self.n == 0 and len(old):
            self.moments.update(np.asarray(old, np.float64), np.asarray(new, np.float64))
            self.tried_at = self.fitted_at = self.n
        return self

    def add(self, ids: list, old, new) -> None:
        """The pairs of one batch re-embedded: held out by the hash of their id, or added to the sums."""
        if not len(ids):
            return
        old, new = np.asarray(old, np.float32), np.asarray(new, np.float32)
        held = np.fromiter((shuffle_rank(i) % HOLDOUT_EVERY == 0 for i in ids), bool, len(ids))
        rows = np.flatnonzero(held)[:max(HELD_MAX - len(self.held_old), 0)]
        if len(rows):
            self.held_old = np.vstack([self.held_old, old[rows]])
            self.held_new = np.vstack([self.held_new, new[rows]])
        rest = np.ones(len(ids), bool)
        rest[rows] = False
        if rest.any():
            self._waiting.append((old[rest], new[rest]))
            if self._waiting_rows >= FOLD_ROWS:
                self._fold()

    def due(self) -> bool:
        """A refit is worth trying: the pairs grew by :data:`GROWTH` since the last try, enough are held out."""
        return len(self.held_old) >= MIN_HELD and self.n >= GROWTH * max(self.tried_at, 1)

    def refit(self, current: Alignment, method: str = "orthogonal") -> tuple[Alignment | None, dict]:
        """Fit ``method`` on the sums, judge it against ``current`` on the held-out pairs (re-embedded since
        ``current`` was fitted: neither map has seen them), and return ``(the map fitted on every pair, the held-out
        ones included, or None when its gain (:func:`installed_gain`) is below MIN_GAIN, the verdict)``."""
        chosen = method_of(method)
        if not chosen.streams:
            raise InputError(f"continuous refit needs a map fitted on sums of pairs (orthogonal, linear, ridge); "
                             f"this upgrade's map is {method!r}")
        with one_blas_thread():   # fits and checks of d x d maps: small algebra, faster on one thread
            return self._refit(current, chosen)

    def _refit(self, current: Alignment, chosen) -> tuple[Alignment | None, dict]:
        self._fold()
        self.tried_at = self.n
        with warnings.catch_warnings():   # few pairs or not, the candidate is judged on held-out pairs
            warnings.simplefilter("ignore", FewPairsWarning)
            candidate = chosen.build().fit_moments(self.moments)
        before, after = held_cosines(current.transform, self), held_cosines(candidate.transform, self)
        verdict = {"pairs": int(self.n), "held_out": int(len(self.held_old)), "cosine_before": float(before.mean()),
                   "cosine_after": float(after.mean()), "gain": float(after.mean() - before.mean())}
        on_sums = current.kind == chosen.kind and (current.metadata.get("fit") or {}).get("n_pairs") == self.fitted_at
        verdict["installed_gain"] = installed_gain(verdict["gain"], self.fitted_at if on_sums else 0,
                                                   self.moments.n, self.n)
        verdict["accepted"] = verdict["installed_gain"] >= MIN_GAIN
        if not verdict["accepted"]:
            return None, verdict
        # the held-out pairs have judged this map: they join its fit, and pairs re-embedded from now on judge the next
        self.moments.update(self.held_old.astype(np.float64), self.held_new.astype(np.float64))
        self.held_old, self.held_new = self.held_old[:0], self.held_new[:0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FewPairsWarning)
            est = chosen.build().fit_moments(self.moments)
        self.fitted_at = self.moments.n
        spaces = spaces_of(current)
        refitted = Alignment.from_estimator(
            est, source_model=current.metadata.get("source_model"), target_model=current.metadata.get("target_model"),
            metric=current.metadata.get("metric", "cosine"),   # fitted on the raw pairs: no normalization
            anchors={"method": "continuous refit on re-embedded records", "n": int(self.moments.n),
                     "refits": current.fingerprint})
        if spaces:
            attach_spaces(refitted, spaces["source"], spaces["target"])
        return refitted, verdict


def installed_gain(gain: float, n_current: int, n_judged: int, n_all: int) -> float:
    """The held-out cosine gain of the map a refit installs, fitted on ``n_all`` pairs, from ``gain``, that of the
    candidate judged, fitted on the ``n_judged`` in the sums, over the map in use, fitted on ``n_current`` of them.

    The judged candidate has not seen the held-out pairs the installed map joins to its fit, so ``gain`` falls short
    of the installed map's. A map's held-out cosine grows like ``c - a / n`` with its pairs (design notes), so the
    measured gain gives ``a`` and the installed map's is ``gain * (1/n_current - 1/n_all) / (1/n_current -
    1/n_judged)`` (1.15-1.25 x here; on both corpora 1.13-1.26 x measured on thousands of pairs neither map saw).
    Unchanged when the map in use was not fitted on these sums (``n_current`` 0: another map, an older file)."""
    if not 0 < n_current < n_judged <= n_all:
        return gain
    return gain * (1.0 / n_current - 1.0 / n_all) / (1.0 / n_current - 1.0 / n_judged)


def held_cosines(transform: Callable, pairs: RefitPairs) -> np.ndarray:
    """Cosine of each held-out native vector with its old vector mapped by ``transform``."""
    return np.sum(l2_normalize(np.asarray(transform(pairs.held_old), np.float32)) * l2_normalize(pairs.held_new), 1)


def remap(source: Collection, target: Collection, alignment: Alignment, *, batch_size: int = 2000) -> int:
    """Map every record of ``target`` whose vector a map made (:data:`MAPPED` origins) again with ``alignment``, from
    its old vector in ``source``, and stamp it made by ``alignment`` (its other stamp fields kept). A record already
    made by ``alignment`` is skipped, so an interrupted remap continues. Returns the records written."""
    fp, done, ids = alignment.fingerprint, 0, []
    for batch_ids, stamps in target.scan_stamps(batch_size=5000, origins=MAPPED):
        ids.extend(i for i, s in zip(batch_ids, stamps) if s.get("made_by") != fp)
    for lo in range(0, len(ids), batch_size):
        got = target.get(ids[lo:lo + batch_size])
        old = source.get(got.ids)
        row = {i: j for j, i in enumerate(old.ids)}
        keep = np.asarray([j for j, i in enumerate(got.ids) if i in row], dtype=np.int64)
        if not len(keep):
            continue
        got = got.take(keep)
        mapped = alignment.map_records(old.vectors[[row[i] for i in got.ids]], got.ids)
        stamps = [{**(s or {}), "made_by": fp} for s in (got.stamps or [None] * len(got))]
        target.upsert(got.with_vectors(mapped, stamps))
        done += len(got)
    return done
