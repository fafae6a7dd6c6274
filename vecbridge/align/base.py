"""What every fitted linear alignment shares: y ~ s * (x - mu_x) @ M + mu_y, applied in row convention.

:class:`LinearTransform` applies such a map: estimators fill ``matrix_`` (d_src x d_tgt), ``source_mean_``,
``target_mean_`` (zeros when not centring) and ``scale_``, and ``transform`` / ``inverse_transform`` are defined once
here. :class:`LinearAlignment` adds fitting from *paired* rows, always through
:class:`~vecbridge.align.moments.PairMoments`, so ``fit`` (arrays), ``partial_fit`` (batches arriving over time),
``fit_stream`` (an iterator of batches, e.g. from a connector scan) and ``fit_moments`` give the same result. An
estimator fitted without pairs (mini-vec2vec) is a :class:`LinearTransform` only.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ..errors import InputError
from ..numeric.estimator import Estimator
from .moments import PairMoments

DEFAULT_BATCH = 65536


def _as_float(X) -> np.ndarray:
    X = np.asarray(X)
    if X.dtype in (np.float32, np.float64):
        return X
    return X.astype(np.float32) if X.dtype == np.float16 else X.astype(np.float64)


class LinearTransform(Estimator):
    """A fitted affine map ``y = s (x - mu_x) M + mu_y`` and its inverse (no fitting method of its own)."""

    # --- applying -------------------------------------------------------------------------------------------------
    def _check_fitted(self):
        if not hasattr(self, "matrix_"):
            raise InputError(f"{type(self).__name__} is not fitted yet: call fit() first")

    def transform(self, X):
        """Map source-model vectors into the target space: ``s * (X - mu_x) @ M + mu_y``."""
        self._check_fitted()
        return apply_linear(X, self.matrix_, self.source_mean_, self.target_mean_, self.scale_, "X")

    def inverse_transform(self, Y):
        """Map target-space vectors (e.g. new-model queries) back into the source space."""
        self._check_fitted()
        return apply_linear(Y, self.inverse_matrix_, self.target_mean_, self.source_mean_, 1.0 / self.scale_, "Y")

    @property
    def inverse_matrix_(self) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


class LinearAlignment(LinearTransform):
    """A linear map fitted on paired rows, from their sums (:class:`~vecbridge.align.moments.PairMoments`)."""

    batch_size = DEFAULT_BATCH

    # --- fitting -------------------------------------------------------------------------------------------------
    def fit(self, X_src, Y_tgt):
        """Fit on row-aligned pairs: row i of ``X_src`` (source model) and of ``Y_tgt`` (target model) are one item."""
        self._validate_params()
        self._moments = PairMoments.from_arrays(X_src, Y_tgt, batch_size=self.batch_size)
        return self._fit_moments(self._moments)

    def partial_fit(self, X_src, Y_tgt):
        """Add a batch of pairs to what was seen so far and refit (cheap: one d x d solve)."""
        self._validate_params()
        X_src, Y_tgt = np.asarray(X_src), np.asarray(Y_tgt)
        moments = getattr(self, "_moments", None)
        if moments is None:
            if X_src.ndim != 2 or Y_tgt.ndim != 2:
                raise InputError(f"expected 2-D arrays, got shapes {X_src.shape} and {Y_tgt.shape}")
            moments = self._moments = PairMoments(X_src.shape[1], Y_tgt.shape[1])
        moments.update(X_src, Y_tgt, offset=moments.n)
        return self._fit_moments(moments)

    def fit_stream(self, batches: Iterable[tuple[np.ndarray, np.ndarray]]):
        """Fit on an iterator of ``(X_batch, Y_batch)`` without ever holding all pairs: one solve at the end."""
        self._validate_params()
        moments = None
        for X, Y in batches:
            X, Y = np.asarray(X), np.asarray(Y)
            if X.ndim != 2 or Y.ndim != 2:
                raise InputError(f"expected 2-D batches, got shapes {X.shape} and {Y.shape}")
            if X.shape[0] == 0:
                continue
            if moments is None:
                moments = PairMoments(X.shape[1], Y.shape[1])
            moments.update(X, Y, offset=moments.n)
        if moments is None:
            raise InputError("no pairs to fit on: the stream was empty")
        self._moments = moments
        return self._fit_moments(moments)

    def fit_moments(self, moments: PairMoments):
        """Fit from precomputed sums (e.g. merged from several workers)."""
        self._validate_params()
        if moments.n == 0:
            raise InputError("no pairs to fit on (0 rows)")
        self._moments = moments
        return self._fit_moments(moments)

    def _fit_moments(self, moments: PairMoments):  # pragma: no cover - abstract
        raise NotImplementedError

    def _set_common(self, moments: PairMoments, matrix, src_mean, tgt_mean, scale):
        self.matrix_ = matrix
        self.source_mean_ = src_mean
        self.target_mean_ = tgt_mean
        self.scale_ = float(scale)
        self.n_pairs_ = int(moments.n)
        self.n_features_in_ = moments.src_dim
        self.n_features_out_ = moments.tgt_dim


def apply_linear(X, matrix, mean_in, mean_out, scale, name="X"):
    """``scale * (X - mean_in) @ matrix + mean_out``, in float32 for float16/32 input and float64 otherwise.

    Only shape and dtype are checked (this is the hot path of a migration; NaN screening is the caller's job)."""
    X = _as_float(X)
    single = X.ndim == 1
    if single:
        X = X[None, :]
    if X.ndim != 2 or X.shape[1] != matrix.shape[0]:
        raise InputError(f"{name}: expected vectors of dimension {matrix.shape[0]}, got shape {X.shape}")
    dtype = X.dtype
    M = matrix.astype(dtype, copy=False)
    centred_in = bool(np.any(mean_in))
    out = (X - mean_in.astype(dtype)) @ M if centred_in else X @ M
    if scale != 1.0:
        out *= dtype.type(scale)
    if np.any(mean_out):
        out += mean_out.astype(dtype)
    return out[0] if single else out
