"""Polar factors: the nearest orthogonal matrix, the core of every Procrustes fit in the package."""
from __future__ import annotations

import numpy as np

from .._blas import one_blas_thread


def polar(W: np.ndarray) -> np.ndarray:
    """The nearest (semi-)orthogonal matrix to ``W`` in Frobenius norm: ``U V^T`` from the thin SVD ``W = U S V^T``
    (on one BLAS thread: small SVDs run faster that way on a busy machine)."""
    with one_blas_thread():
        U, _, Vt = np.linalg.svd(W, full_matrices=False)
    return U @ Vt


def procrustes_rotation(X, Y) -> np.ndarray:
    """Only the map of orthogonal Procrustes (no centring, no diagnostics): the polar factor of ``X^T Y`` in
    float64, row convention ``X @ R ~ Y``. For inner loops that refit many times (mini-vec2vec's refinements, GEH's
    refinement) and need nothing else."""
    return polar(np.asarray(X, dtype=np.float64).T @ np.asarray(Y, dtype=np.float64))
