"""Entropic optimal transport between two samples: a soft, balanced matching where a nearest-neighbour dictionary
is hard and lets a few hub rows take most of the matches."""
from __future__ import annotations

import numpy as np

from .linalg import mapped_factors, procrustes_rotation


def sinkhorn_plan(S: np.ndarray, beta: float, *, n_iter: int = 30) -> np.ndarray:
    """The entropic transport plan between the rows and the columns of the similarity matrix ``S`` (n x m), uniform
    mass on each side: ``P = diag(u) exp(beta S) diag(v)`` scaled by Sinkhorn's iterations ("Sinkhorn Distances:
    Lightspeed Computation of Optimal Transport", Cuturi, 2013) so that every row carries ``1/n`` and every column
    ``1/m``. ``beta`` is the inverse temperature on the similarity scale (large: close to a one-to-one matching).
    Each row is shifted by its maximum before the exponential, so no row underflows whatever ``beta``; the shift is
    a row scaling, which ``u`` absorbs. Returns the plan, float32, n x m."""
    n, m = S.shape
    S = np.asarray(S, dtype=np.float32)
    K = S - S.max(axis=1, keepdims=True)
    K *= np.float32(beta)
    np.exp(K, out=K)
    u = np.full(n, 1.0 / n, dtype=np.float32)
    v = np.full(m, 1.0 / m, dtype=np.float32)
    tiny = np.float32(np.finfo(np.float32).tiny)
    for _ in range(int(n_iter)):
        u = np.float32(1.0 / n) / np.maximum(K @ v, tiny)
        v = np.float32(1.0 / m) / np.maximum(K.T @ u, tiny)
    K *= u[:, None]
    K *= v[None, :]
    return K


def transport_procrustes(A: np.ndarray, B: np.ndarray, W: np.ndarray, *, n_iter: int = 10,
                         beta: float = 20.0) -> np.ndarray:
    """``n_iter`` rounds of orthogonal Procrustes on the entropic transport plan between the mapped rows ``A @ W``
    and the rows of ``B`` (unit rows; inverse temperature ``beta`` on their cosines): the coupling of "Unsupervised
    Alignment of Embeddings with Wasserstein Procrustes" (Grave et al., AISTATS 2019) with Sinkhorn's plan. Each row
    is matched softly to its plausible partners, every row's total mass fixed, instead of to its single nearest
    row, so a refit averages out the error of any one match. ``W``: d_src x d_tgt. Returns the refined map."""
    for _ in range(int(n_iter)):
        P, Q = mapped_factors(A, B, W)
        W = procrustes_rotation(A, sinkhorn_plan(P @ Q.T, beta) @ B)
    return W
