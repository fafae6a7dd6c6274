"""k-means for the whole package, seeded: Euclidean Lloyd (mini-vec2vec) and spherical k-means (clustered Procrustes).

Both are Lloyd's algorithm (assign every point to its nearest centre, move each centre to its points, stop when no
label changes) and share the steps here: :func:`assign_labels`, :func:`sum_by_label`, :func:`sq_dists`. They stay
two code paths because they differ in ways that change their results, and each caller's figures depend on them:

* :func:`kmeans` (Euclidean, float32): greedy k-means++ seeding (several candidates per step, as scikit-learn does,
  which mini-vec2vec (Dar, 2025) used), a centre-shift tolerance, an empty cluster keeps its centre, sparse sums.
* :func:`spherical_kmeans` (cosine on unit vectors, float64): plain k-means++ seeding, unit centroids, an empty
  cluster is re-seeded on the worst-served point, dense one-hot sums (a BLAS product sums in another order than the
  sparse one, so the two round differently at the last bit).

One parameterised loop could not reproduce both: the two seedings draw from the generator differently, and the two
sums differ in the last bits on the bundled sample, so either caller's centroids (and maps) would change. scikit-learn
and faiss are not needed (faiss, when installed, only speeds up the Euclidean assignment to many centres).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from ..vectors import l2_normalize
from .neighbors import knn

SMALL_K = 64    # k-means with at most this many centres assigns with numpy even when faiss is available
METRICS = ("euclidean", "cosine")


# --- shared steps ---------------------------------------------------------------------------------------------------
def sq_dists(C: np.ndarray, X: np.ndarray, x_sq: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances between every row of C and every row of X (len(C) x len(X)), clipped at 0."""
    D = C @ X.T
    D *= -2.0
    D += x_sq[None, :]
    D += np.einsum("ij,ij->i", C, C)[:, None]
    np.maximum(D, 0.0, out=D)
    return D


def assign_labels(X: np.ndarray, centers: np.ndarray, *, metric: str = "euclidean", backend: str = "numpy",
                  X_aug: np.ndarray | None = None) -> np.ndarray:
    """Index of each row's nearest centre (ties to the lowest index).

    ``cosine``: largest ``x . c`` (rows and centres already unit). ``euclidean``: largest ``x . c - ||c||^2 / 2``,
    with numpy, or as a 1-nearest-neighbour search by inner product on augmented vectors ``[x, 1] . [c, -||c||^2/2]``
    through :func:`~vecbridge.numeric.neighbors.knn` when ``backend`` is not ``"numpy"`` (``X_aug`` = ``[X, 1]``,
    built once by the caller)."""
    if metric == "cosine":
        return np.argmax(X @ centers.T, axis=1)
    half_sq = 0.5 * np.einsum("ij,ij->i", centers, centers)
    if backend != "numpy":
        if X_aug is None:
            X_aug = np.hstack([X, np.ones((X.shape[0], 1), X.dtype)])
        C_aug = np.hstack([centers, -half_sq[:, None]])
        return knn(X_aug, C_aug, 1, normalize=False, backend=backend)[0][:, 0]
    S = X @ centers.T
    S -= half_sq[None, :]
    return np.argmax(S, axis=1)


def sum_by_label(labels: np.ndarray, X: np.ndarray, n_clusters: int, *, dense: bool = False) -> np.ndarray:
    """Row c = sum of the rows of X labelled c: a sparse one-hot product (O(n d), no BLAS threads to contend for),
    or with ``dense=True`` a dense one-hot matrix product (what spherical k-means has always used; it rounds
    differently)."""
    if dense:
        return np.eye(n_clusters)[labels].T @ X
    from scipy.sparse import csr_matrix

    onehot = csr_matrix((np.ones(labels.size, dtype=X.dtype), (labels, np.arange(labels.size))),
                        shape=(n_clusters, labels.size))
    return np.asarray(onehot @ X)


# --- Euclidean: Lloyd with greedy k-means++ --------------------------------------------------------------------------
def kmeans_plusplus(X: np.ndarray, n_clusters: int, rng: np.random.Generator, n_local_trials: int | None = None):
    """Greedy k-means++ seeding (Arthur & Vassilvitskii, "k-means++: the advantages of careful seeding", 2007;
    ``2 + ln k`` candidates per step, keep the one that lowers the potential most, as scikit-learn does). Returns the
    initial centres (n_clusters x d)."""
    n = X.shape[0]
    if n_local_trials is None:
        n_local_trials = 2 + int(math.log(n_clusters))
    x_sq = np.einsum("ij,ij->i", X, X)
    centers = np.empty((n_clusters, X.shape[1]), dtype=X.dtype)
    first = int(rng.integers(n))
    centers[0] = X[first]
    closest = sq_dists(X[first:first + 1], X, x_sq)[0]
    potential = float(closest.sum())
    for c in range(1, n_clusters):
        if potential <= 0:  # every point already coincides with a centre: duplicates, take random rows
            centers[c] = X[int(rng.integers(n))]
            continue
        cand = np.searchsorted(np.cumsum(closest, dtype=np.float64), rng.random(n_local_trials) * potential)
        cand = np.minimum(cand, n - 1)
        d_cand = np.minimum(closest[None, :], sq_dists(X[cand], X, x_sq))
        pots = d_cand.sum(axis=1, dtype=np.float64)
        best = int(np.argmin(pots))
        centers[c] = X[cand[best]]
        closest = d_cand[best]
        potential = float(pots[best])
    return centers


def kmeans(X, n_clusters: int, rng: np.random.Generator, *, init=None, max_iter: int = 100, tol: float = 1e-4,
           backend: str = "auto"):
    """Lloyd's k-means (Euclidean, float32), seeded. ``init``: initial centres, or None for greedy k-means++.

    Stops when no label changes or the total squared centre shift falls below ``tol`` times the mean per-feature
    variance (scikit-learn's criterion). An empty cluster keeps its previous centre. With more than ``SMALL_K``
    centres and ``backend`` not ``"numpy"`` the assignment goes through the shared nearest-neighbour search.
    Returns ``(centers, labels, n_iter)``.
    """
    X = np.ascontiguousarray(X, dtype=np.float32)
    n, d = X.shape
    if n < n_clusters:
        raise InputError(f"k-means: {n} points cannot form {n_clusters} clusters")
    centers = kmeans_plusplus(X, n_clusters, rng) if init is None else np.array(init, dtype=np.float32, copy=True)
    if centers.shape != (n_clusters, d):
        raise InputError(f"k-means: init must have shape {(n_clusters, d)}, got {centers.shape}")
    threshold = tol * float(np.mean(X.var(axis=0, dtype=np.float64)))
    if backend == "auto" and n_clusters <= SMALL_K:
        backend = "numpy"  # a handful of centres: faiss's per-call overhead dominates (measured 2x slower at k = 20)
    X_aug = np.hstack([X, np.ones((n, 1), np.float32)]) if backend != "numpy" else None
    labels = np.full(n, -1, dtype=np.int64)
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        new_labels = assign_labels(X, centers, metric="euclidean", backend=backend, X_aug=X_aug)
        counts = np.bincount(new_labels, minlength=n_clusters)
        sums = sum_by_label(new_labels, X, n_clusters)
        new_centers = centers.copy()
        filled = counts > 0
        new_centers[filled] = sums[filled] / counts[filled, None].astype(np.float32)
        shift = float(np.sum((new_centers - centers) ** 2))
        changed = bool(np.any(new_labels != labels))
        centers, labels = new_centers, new_labels
        if not changed or shift <= threshold:
            break
    return centers, labels, n_iter


# --- cosine: spherical k-means with plain k-means++ ------------------------------------------------------------------
def _cosine_plusplus(U: np.ndarray, n_clusters: int, rng: np.random.Generator) -> np.ndarray:
    """Plain k-means++ on unit rows: each new centre drawn with probability proportional to its cosine distance
    ``1 - cos`` to the nearest chosen one (half the squared chord, so this is k-means++'s D^2 rule)."""
    n = U.shape[0]
    centres = [U[rng.integers(n)]]
    dist = 1.0 - U @ centres[0]
    for _ in range(1, n_clusters):
        p = np.clip(dist, 0, None)
        total = p.sum()
        idx = rng.choice(n, p=p / total) if total > 0 else rng.integers(n)
        centres.append(U[idx])
        dist = np.minimum(dist, 1.0 - U @ U[idx])
    return np.stack(centres)


def spherical_kmeans(X, n_clusters: int, *, n_iter: int = 25, random_state=0, max_points: int = 50_000):
    """Centroids (unit rows) of spherical k-means on the directions of ``X``; k-means++ start, seeded.

    At most ``max_points`` rows (a seeded random subset) are used to fit; the caller assigns every row afterwards.
    """
    rng = np.random.default_rng(random_state)
    U = l2_normalize(np.asarray(X, dtype=np.float64))
    if U.shape[0] > max_points:
        U = U[np.sort(rng.choice(U.shape[0], max_points, replace=False))]
    n = U.shape[0]
    if n < n_clusters:
        raise InputError(f"k-means needs at least n_clusters={n_clusters} points, got {n}")
    C = _cosine_plusplus(U, n_clusters, rng)
    labels = None
    for _ in range(n_iter):
        new = assign_labels(U, C, metric="cosine")
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        sums = sum_by_label(labels, U, n_clusters, dense=True)
        empty = np.flatnonzero(np.linalg.norm(sums, axis=1) == 0)
        if empty.size:  # re-seed an empty cluster on the point worst served by its centroid
            worst = np.argsort(np.einsum("ij,ij->i", U, C[labels]))[:empty.size]
            sums[empty] = U[worst]
        C = l2_normalize(sums)
    return C
