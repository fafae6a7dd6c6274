"""Statistics of distribution drift between two samples of vectors, with no pairs: a kernel two-sample test
(maximum mean discrepancy with a permutation p-value) and the shift of the mean in units of the spread.
"""
from __future__ import annotations

import numpy as np


def mmd_test(A: np.ndarray, B: np.ndarray, *, max_n: int = 500, n_permutations: int = 100, seed: int = 0
             ) -> tuple[float, float]:
    """Squared MMD (unbiased, RBF kernel with the median-distance bandwidth of the pooled sample) and its
    permutation p-value: small p means the two samples do not come from one distribution."""
    rng = np.random.default_rng(seed)
    A = A[rng.choice(len(A), min(max_n, len(A)), replace=False)].astype(np.float64)
    B = B[rng.choice(len(B), min(max_n, len(B)), replace=False)].astype(np.float64)
    Z = np.concatenate([A, B])
    sq = np.einsum("ij,ij->i", Z, Z)
    D2 = np.maximum(sq[:, None] + sq[None, :] - 2 * Z @ Z.T, 0)
    K = np.exp(-D2 / max(float(np.median(D2[np.triu_indices(len(Z), 1)])), 1e-12))
    np.fill_diagonal(K, 0.0)
    n, N = len(A), len(Z)

    def stat(idx):
        a, b = idx[:n], idx[n:]
        return (K[np.ix_(a, a)].sum() / (n * (n - 1)) + K[np.ix_(b, b)].sum() / ((N - n) * (N - n - 1))
                - 2 * K[np.ix_(a, b)].mean())

    observed = stat(np.arange(N))
    exceed = sum(stat(rng.permutation(N)) >= observed for _ in range(n_permutations))
    return float(observed), float((1 + exceed) / (1 + n_permutations))


def centroid_shift(ref: np.ndarray, cur: np.ndarray) -> float:
    """Distance between the two sample means in units of its sampling noise
    (``sqrt(tr S_ref / n_ref + tr S_cur / n_cur)``): about 1 for two samples of one distribution."""
    noise = np.sqrt(ref.var(axis=0).sum() / len(ref) + cur.var(axis=0).sum() / len(cur))
    return float(np.linalg.norm(cur.mean(axis=0) - ref.mean(axis=0)) / max(noise, 1e-12))

