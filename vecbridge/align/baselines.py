"""Baselines that every report and benchmark compares orthogonal Procrustes against.

* :class:`LinearMap`: unconstrained least squares (``alpha=0``) or ridge, the "linear" and "l2-regularised linear"
  baselines of "When Embedding Models Meet: Procrustes Bounds and Applications" (2025). The paper does not say how
  its regulariser is scaled; here ``alpha`` is relative to the mean eigenvalue of ``X^T X``
  (``lambda = alpha * tr(X^T X) / d_src``), so one value means the same on any data scale.
* :class:`NoMap`: use the source vectors as they are (zero-padded or truncated to the target dimension): what
  happens if the old vectors are queried with the new model and nothing is done.
"""
from __future__ import annotations

import numpy as np

from ..numeric.estimator import Boolean, Real
from .base import LinearAlignment
from .diagnostics import mean_squared_residual
from .moments import PairMoments


class LinearMap(LinearAlignment):
    """Least-squares / ridge map ``W = (X^T X + lambda I)^+ X^T Y``, optionally with intercept (centred fit)."""

    _parameter_constraints = {"alpha": Real(0), "fit_intercept": Boolean()}

    def __init__(self, alpha: float = 0.0, fit_intercept: bool = False):
        self.alpha = alpha
        self.fit_intercept = fit_intercept

    def _fit_moments(self, moments: PairMoments):
        m = moments.centred() if self.fit_intercept else moments
        lam = self.alpha * np.trace(m.xtx) / m.src_dim
        if lam > 0:
            W = np.linalg.solve(m.xtx + lam * np.eye(m.src_dim), m.xty)
        else:
            W = np.linalg.lstsq(m.xtx, m.xty, rcond=None)[0]
        src_mean = moments.mean_x if self.fit_intercept else np.zeros(moments.src_dim)
        tgt_mean = moments.mean_y if self.fit_intercept else np.zeros(moments.tgt_dim)
        self._set_common(moments, W, src_mean, tgt_mean, 1.0)
        self.coef_ = W
        self.residual_ = mean_squared_residual(m, W)
        return self

    @property
    def inverse_matrix_(self) -> np.ndarray:
        """A general linear map has no exact inverse: the pseudo-inverse (least-squares back-projection)."""
        if not hasattr(self, "_pinv"):
            self._pinv = np.linalg.pinv(self.coef_)
        return self._pinv


class NoMap(LinearAlignment):
    """Identity on the shared leading dimensions (zero pad or truncate): the "do nothing" baseline."""

    def _fit_moments(self, moments: PairMoments):
        W = np.eye(moments.src_dim, moments.tgt_dim)
        self._set_common(moments, W, np.zeros(moments.src_dim), np.zeros(moments.tgt_dim), 1.0)
        self.residual_ = mean_squared_residual(moments, W)
        return self

    @property
    def inverse_matrix_(self) -> np.ndarray:
        return self.matrix_.T
