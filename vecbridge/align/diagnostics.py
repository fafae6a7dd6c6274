"""The diagnostics of "When Embedding Models Meet: Procrustes Bounds and Applications" (2025), computed from streamed
moments (no N x N Gram matrix is ever formed).

Identities (rows as samples):

* dot-product discrepancy ``eps^2 = ||X X^T - Y Y^T||_F^2 = ||X^T X||_F^2 + ||Y^T Y||_F^2 - 2 ||X^T Y||_F^2`` and
  ``delta = eps / N`` (Corollary 1's per-sample form, the RMS gap between the two models' dot products over all
  N^2 ordered pairs);
* Corollary 1 bound: ``E_i ||x_i Q - y_i||^2 <= sqrt(2 D) * delta`` with ``D = max(d_src, d_tgt)`` after zero padding;
* the actual residual of a fitted map ``R``: ``||X R s - Y||_F^2 = s^2 tr(R^T X^T X R) + ||Y||_F^2 - 2 s tr(R^T X^T Y)``
  (exact for every shape, including the large -> small projection where ``||X R|| < ||X||``).
"""
from __future__ import annotations

import numpy as np

from .moments import PairMoments


def dot_product_discrepancy(m: PairMoments) -> float:
    """delta = ||X X^T - Y Y^T||_F / N, from d x d sums (float64; tiny negative rounding clamps to 0)."""
    eps2 = (np.sum(m.xtx * m.xtx) + np.sum(m.yty * m.yty) - 2.0 * np.sum(m.xty * m.xty))
    return float(np.sqrt(max(eps2, 0.0)) / m.n)


def procrustes_bound(m: PairMoments) -> float:
    """Corollary 1: an upper bound on the mean squared paired error of the optimal orthogonal map."""
    return float(np.sqrt(2.0 * max(m.src_dim, m.tgt_dim)) * dot_product_discrepancy(m))


def mean_squared_residual(m: PairMoments, matrix: np.ndarray, scale: float = 1.0) -> float:
    """E_i ||s x_i R - y_i||^2 for the pairs summarised in ``m`` (which must already be centred if the map is)."""
    mapped_sq = np.sum((m.xtx @ matrix) * matrix)
    cross = np.sum(m.xty * matrix)
    total = scale * scale * mapped_sq + m.sq_norm_y - 2.0 * scale * cross
    return float(max(total, 0.0) / m.n)
