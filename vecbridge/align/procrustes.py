"""Orthogonal Procrustes ("When Embedding Models Meet: Procrustes Bounds and Applications", 2025, Algorithm 1;
Schoenemann 1966) in row convention, with its diagnostics."""
from __future__ import annotations

import warnings

import numpy as np

from .._blas import one_blas_thread
from ..numeric.estimator import Boolean
from .base import LinearAlignment
from .diagnostics import dot_product_discrepancy, mean_squared_residual
from .moments import PairMoments


class FewPairsWarning(UserWarning):
    """The pairs do not determine the map on every direction (fewer independent pairs than dimensions)."""


class OrthogonalProcrustes(LinearAlignment):
    """Best orthogonal map from the source space to the target space: ``R = argmin ||X R - Y||_F, R^T R = I``.

    That paper's Algorithm 1 works on columns: ``U S V^T = SVD(Y X^T)``, ``Q = U V^T``,
    ``x_bar = Q x``. With rows as samples this is ``U S V^T = SVD(X^T Y)`` and ``R = U V^T`` applied as ``X @ R``
    (``R = Q^T``). Reflections are allowed (R is in O(d), not SO(d)) exactly as in the paper.

    Unequal dimensions follow the paper's zero padding. Padding the smaller side and taking the top-left
    ``d_src x d_tgt`` block of the padded solution is the thin SVD of the ``d_src x d_tgt`` matrix ``X^T Y``, which is
    what is computed: for ``d_src <= d_tgt`` the rows of ``R`` are orthonormal, so the source is embedded isometrically
    (norms and every pairwise dot product preserved exactly); for ``d_src > d_tgt`` the columns are orthonormal and the
    map is a projection (``is_projection_`` is True: mass outside the target span is dropped).

    Parameters
    ----------
    center : bool, default False
        Subtract each side's mean before fitting and add the target mean back after mapping (``(x - mu_x) R + mu_y``).
        Off by default, as in the paper's text-retrieval recipe; the multimodal experiments centre. Note that a centred
        map is affine, so dot products with un-centred vectors are no longer preserved.
    scale : bool, default False
        Also fit one global scale ``s`` (similarity Procrustes, not in the paper): ``s = tr(S) / ||X||_F^2``.
        Useful only for dot-product or L2 stores whose two models have different norms; cosine ignores it.

    Attributes
    ----------
    rotation_ : (d_src, d_tgt) array, the orthogonal map (same as ``matrix_``).
    singular_values_ : singular values of the (centred) cross-covariance ``X^T Y``, largest first.
    source_mean_, target_mean_ : means removed and added back (zeros when ``center=False``).
    scale_ : the global scale (1.0 when ``scale=False``).
    n_pairs_ : number of pairs fitted on.
    rank_ : numerical rank of ``X^T Y``. Below ``min(d_src, d_tgt)`` the map is not unique on the missing directions;
        that is harmless when the source data has no variance there (raw MiniLM outputs span 382 of 384 dimensions,
        a LayerNorm artefact), so only ``n_pairs_ < min(d_src, d_tgt)`` issues a :class:`FewPairsWarning`.
    residual_ : in-sample mean squared paired error ``E_i ||x_i R - y_i||^2``.
    relative_residual_ : ``||X R - Y||_F / ||Y||_F``.
    delta_ : that paper's dot-product discrepancy ``||X X^T - Y Y^T||_F / N``.
    bound_ : Corollary 1's bound ``sqrt(2 D) * delta_`` on ``residual_`` (for the unscaled map; D = max dims).
    is_projection_ : True when ``d_src > d_tgt``.
    """

    _parameter_constraints = {"center": Boolean(), "scale": Boolean()}

    def __init__(self, center: bool = False, scale: bool = False):
        self.center = center
        self.scale = scale

    def _fit_moments(self, moments: PairMoments):
        m = moments.centred() if self.center else moments
        with one_blas_thread():
            U, S, Vt = np.linalg.svd(m.xty, full_matrices=False)
        R = U @ Vt
        scale = 1.0
        if self.scale:
            scale = float(S.sum() / m.sq_norm_x)
        d_min = min(moments.src_dim, moments.tgt_dim)
        tol = S[0] * max(moments.src_dim, moments.tgt_dim) * np.finfo(float).eps if S.size and S[0] > 0 else 0.0
        rank = int(np.sum(S > tol))
        if moments.n < d_min:
            warnings.warn(
                f"only {moments.n} pairs for {d_min} dimensions: the map is not determined on at least "
                f"{d_min - moments.n} directions, so unseen vectors with components there map arbitrarily; fit on "
                f"many more pairs than dimensions (quality saturates near 10,000 in \"When Embedding Models Meet: "
                f"Procrustes Bounds and Applications\", 2025)",
                FewPairsWarning, stacklevel=3)
        src_mean = moments.mean_x if self.center else np.zeros(moments.src_dim)
        tgt_mean = moments.mean_y if self.center else np.zeros(moments.tgt_dim)
        self._set_common(moments, R, src_mean, tgt_mean, scale)
        self.rotation_ = R
        self.singular_values_ = S
        self.rank_ = rank
        self.residual_ = mean_squared_residual(m, R, scale)
        self.relative_residual_ = float(np.sqrt(self.residual_ * m.n / max(m.sq_norm_y, np.finfo(float).tiny)))
        self.delta_ = dot_product_discrepancy(m)
        self.bound_ = float(np.sqrt(2.0 * max(moments.src_dim, moments.tgt_dim)) * self.delta_)
        self.is_projection_ = moments.src_dim > moments.tgt_dim
        return self

    @property
    def inverse_matrix_(self) -> np.ndarray:
        """The inverse of an orthogonal map is its transpose ("When Embedding Models Meet", 2025: one fit serves both
        directions)."""
        return self.rotation_.T
