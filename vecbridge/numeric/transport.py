"""Entropic optimal transport between two samples: a soft, balanced matching where a nearest-neighbour dictionary
is hard and lets a few hub rows take most of the matches."""
from __future__ import annotations

import numpy as np


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
