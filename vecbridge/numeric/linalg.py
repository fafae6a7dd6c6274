"""Polar factors (the nearest orthogonal matrix, the core of every Procrustes fit in the package) and the cheapest
product of mapped rows with target rows."""
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


def mapped_factors(A: np.ndarray, B: np.ndarray, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(P, Q)`` with ``P @ Q.T == (A @ W) @ B.T``, each side in the smaller of the two dimensions (``W``: d_src x
    d_tgt), so the similarities of mapped source rows to target rows cost the least."""
    W32 = np.asarray(W, dtype=np.float32)
    return (A, B @ W32.T) if A.shape[1] <= B.shape[1] else (A @ W32, B)
