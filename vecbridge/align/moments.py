"""Streamed second moments of paired vectors: everything a linear alignment needs, without holding the pairs.

Every map vecbridge fits (orthogonal Procrustes, its centred and scaled variants, least squares and ridge) depends on
the data only through the sums below. Accumulating them in float64, batch by batch, means a fit on 10^6 pairs needs
O(d^2) memory and never an N x N matrix, and that a fit on a stream equals the one-shot fit up to float64 rounding.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..validation import check_paired


def _add_gram(acc: np.ndarray, X: np.ndarray) -> None:
    """acc += X^T X using the symmetric rank-k update (half the flops of a general matrix product). SciPy is
    imported here, not with the module: it is a third of every command's start-up, and most commands fit nothing."""
    from scipy.linalg.blas import dsyrk

    upper = dsyrk(1.0, X, trans=1, lower=0)
    acc += np.triu(upper) + np.triu(upper, 1).T


@dataclass
class PairMoments:
    """Running sums over pairs (x_i, y_i): n, sum x, sum y, X^T Y, X^T X, Y^T Y (all float64)."""

    src_dim: int
    tgt_dim: int
    n: int = 0
    sum_x: np.ndarray = field(init=False)
    sum_y: np.ndarray = field(init=False)
    xty: np.ndarray = field(init=False)
    xtx: np.ndarray = field(init=False)
    yty: np.ndarray = field(init=False)

    def __post_init__(self):
        self.sum_x = np.zeros(self.src_dim)
        self.sum_y = np.zeros(self.tgt_dim)
        self.xty = np.zeros((self.src_dim, self.tgt_dim))
        self.xtx = np.zeros((self.src_dim, self.src_dim))
        self.yty = np.zeros((self.tgt_dim, self.tgt_dim))

    @classmethod
    def from_arrays(cls, X, Y, batch_size: int = 65536) -> "PairMoments":
        X = np.asarray(X)
        Y = np.asarray(Y)
        if X.ndim != 2 or Y.ndim != 2:
            raise InputError(f"expected 2-D arrays, got shapes {X.shape} and {Y.shape}")
        moments = cls(X.shape[1], Y.shape[1])
        if X.shape[0] != Y.shape[0]:
            raise InputError(f"X_src has {X.shape[0]} rows but Y_tgt has {Y.shape[0]}: pairs must be row-aligned")
        if X.shape[0] == 0:
            raise InputError("no pairs to fit on (0 rows)")
        for start in range(0, X.shape[0], batch_size):
            moments.update(X[start:start + batch_size], Y[start:start + batch_size], offset=start)
        return moments

    def update(self, X, Y, offset: int = 0) -> "PairMoments":
        """Add one batch of pairs (validated: finite, non-zero rows, dimensions as at creation)."""
        try:
            X, Y = check_paired(X, Y, src_dim=self.src_dim, tgt_dim=self.tgt_dim)
        except InputError as exc:
            if offset:
                raise InputError(f"{exc} (in the batch starting at pair {offset})") from None
            raise
        self.n += X.shape[0]
        self.sum_x += X.sum(axis=0)
        self.sum_y += Y.sum(axis=0)
        self.xty += X.T @ Y
        _add_gram(self.xtx, X)
        _add_gram(self.yty, Y)
        return self

    def merge(self, other: "PairMoments") -> "PairMoments":
        """Combine sums computed on disjoint parts of the data (e.g. by parallel workers)."""
        if (other.src_dim, other.tgt_dim) != (self.src_dim, self.tgt_dim):
            raise InputError("cannot merge moments of different dimensions")
        self.n += other.n
        for name in ("sum_x", "sum_y", "xty", "xtx", "yty"):
            getattr(self, name).__iadd__(getattr(other, name))
        return self

    # --- derived quantities -------------------------------------------------------------------------------------
    @property
    def mean_x(self) -> np.ndarray:
        return self.sum_x / self.n

    @property
    def mean_y(self) -> np.ndarray:
        return self.sum_y / self.n

    def centred(self) -> "PairMoments":
        """The same sums for the mean-centred pairs: X_c^T Y_c = X^T Y - n mu_x mu_y^T, and so on."""
        out = PairMoments(self.src_dim, self.tgt_dim, n=self.n)
        mx, my = self.mean_x, self.mean_y
        out.xty = self.xty - self.n * np.outer(mx, my)
        out.xtx = self.xtx - self.n * np.outer(mx, mx)
        out.yty = self.yty - self.n * np.outer(my, my)
        return out

    @property
    def sq_norm_x(self) -> float:
        """||X||_F^2 (the trace of X^T X)."""
        return float(np.trace(self.xtx))

    @property
    def sq_norm_y(self) -> float:
        return float(np.trace(self.yty))
