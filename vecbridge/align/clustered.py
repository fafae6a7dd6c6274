"""Local maps: one orthogonal map per region of the source space (clustered Procrustes).

The protocol the Vector Linking paper (2026) uses to integrate two vector databases, after Yang, Cao & Ren,
"Integrating vector databases across embedding models" (SIGMOD 2025): k-means on the source space, one orthogonal
map per cluster fitted on its anchors, the global map for clusters with too few. Why local: two contrastive encoders
are isometric up to a *local* scale (the Vector Linking paper's Theorem 1), so one rotation per neighbourhood can
fit better than one global rotation. Neither text gives the details; ours (spherical k-means, shrinkage of each
cluster towards the global cross-covariance, soft assignment, centring, a translation-only family) and their
measurements are in docs/design.md, "Local maps: clustered Procrustes".

The fitted state follows the package's estimator style: ``centroids_``, ``rotations_`` (k, d_src, d_tgt),
``translations_`` (k, d_tgt), ``cluster_sizes_``, ``fallback_``, plus what every alignment has (``matrix_`` is the
global rotation, ``source_mean_``, ``target_mean_``, ``scale_``, ``n_pairs_``, ``n_features_in_``,
``n_features_out_``, ``residual_``), so :class:`~vecbridge.align.Alignment` can save it (kind ``"clustered"``).
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..numeric.estimator import ArrayLike, Boolean, Estimator, Integer, OneOf, RandomState, Real, optional
from ..numeric.kmeans import assign_labels, spherical_kmeans
from ..validation import check_paired
from ..vectors import l2_normalize
from .base import _as_float

ASSIGNMENTS = ("soft", "hard")
FAMILIES = ("rotation", "translation")


# --- polar factor ---------------------------------------------------------------------------------------------------
def polar_factor(A: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """The orthogonal factor ``U V^T`` of ``A = U S V^T`` (the Procrustes solution for cross-covariance A), via the
    symmetric eigenproblem of the smaller Gram matrix ``A A^T`` instead of an SVD: 3-6x faster at 384 x 768 on this
    project's machine, which matters with one polar factor per cluster.

    Directions with ``s_i^2 < rtol * s_max^2`` (s_i below 1e-6 s_max: the dead dimensions of raw MiniLM outputs,
    or the null space of a cluster with fewer pairs than dimensions, where the data do not determine the map) get
    an orthonormal completion, as an SVD would give an arbitrary one; one Newton-Schulz step then restores
    orthonormality to float precision. Checked against the SVD on wordnet cross-covariances: same objective
    ``tr(R^T A)`` to 1e-15 relative, ``R R^T = I`` to 1e-13.
    """
    d1, d2 = A.shape
    if d1 > d2:
        return polar_factor(A.T, rtol).T
    lam, U = np.linalg.eigh(A @ A.T)
    if lam[-1] <= 0:
        return np.eye(d1, d2)
    good = lam > rtol * lam[-1]
    Vg = (A.T @ U[:, good]) / np.sqrt(lam[good])
    if good.all():
        V = Vg
    else:
        # Householder QR of [Vg, A^T U_bad]: its trailing columns are orthonormal and orthogonal to span(Vg),
        # even where A^T U_bad is (numerically) zero
        Vb = np.linalg.qr(np.hstack([Vg, A.T @ U[:, ~good]]))[0][:, Vg.shape[1]:]
        V = np.hstack([Vg, Vb])
        U = np.hstack([U[:, good], U[:, ~good]])
    R = U @ V.T
    return 1.5 * R - 0.5 * (R @ R.T) @ R


# --- applying ------------------------------------------------------------------------------------------------------
def blas_product(V, M, offset=None):
    """``V @ M (+ offset)`` by BLAS: the default product of :func:`apply_clustered`."""
    out = V @ M
    return out if offset is None else out + offset


def cluster_weights(X, centroids, *, assignment: str = "soft", temperature: float = 0.05, top_m: int = 3,
                    product=blas_product):
    """(n, k) weights of each row over the clusters: one-hot nearest centroid (hard) or a softmax of cosines
    restricted to the ``top_m`` nearest centroids (soft). Rows sum to 1."""
    C = np.asarray(centroids, dtype=X.dtype)
    S = product(l2_normalize(X), C.T)
    n, k = S.shape
    W = np.zeros((n, k), dtype=X.dtype)
    if assignment == "hard" or k == 1:
        W[np.arange(n), np.argmax(S, axis=1)] = 1
        return W
    m = min(top_m, k)
    top = np.argpartition(-S, m - 1, axis=1)[:, :m] if m < k else np.tile(np.arange(k), (n, 1))
    s = np.take_along_axis(S, top, axis=1)
    e = np.exp((s - s.max(axis=1, keepdims=True)) / temperature)
    np.put_along_axis(W, top, e / e.sum(axis=1, keepdims=True), axis=1)
    return W


def _blend(V, W, rotations, translations, *, inverse: bool, with_translation: bool = True, product=blas_product):
    """``sum_c W[:, c] * (V R_c + t_c)`` (forward) or ``sum_c W[:, c] * ((V - t_c) R_c^T)`` (inverse)."""
    dtype = V.dtype
    d_out = rotations.shape[1] if inverse else rotations.shape[2]
    out = np.zeros((V.shape[0], d_out), dtype=dtype)
    for c in range(W.shape[1]):
        rows = np.flatnonzero(W[:, c] > 0)
        if rows.size == 0:
            continue
        R = rotations[c].astype(dtype, copy=False)
        w = W[rows, c][:, None]
        t = translations[c].astype(dtype, copy=False) if with_translation else None
        if inverse:
            out[rows] += w * product(V[rows] if t is None else V[rows] - t, R.T)
        else:
            out[rows] += w * product(V[rows], R, t)
    return out


def apply_clustered(X, centroids, rotations, translations, mean_in, mean_out, *, assignment="soft",
                    temperature=0.05, top_m=3, inverse=False, global_rotation=None, refine: int = 3, name="X",
                    product=blas_product):
    """The clustered map (or its inverse) on rows of ``X``; float32 in -> float32 out, float64 -> float64.

    Forward: ``f(x) = sum_c w_c(x) [(x - mu_x) R_c + t_c] + mu_y`` with weights from the source direction of x.
    Inverse (target -> source): the weights belong to the unknown source point, and a blend of rotations is not
    inverted by the blend of their transposes, so: start from the blended inverse with the weights of the global
    inverse ``mu_x + (y - mu_y) R_g^T``, then ``refine`` residual corrections ``x += sum_c w_c(x) (y - f(x)) R_c^T``
    (measured on the bundled sample: worst round-trip cosine 0.978 without, 0.999 after 3). Exact inversion needs
    ``d_src <= d_tgt`` (a projection loses what it drops).

    ``product(V, M, offset)`` computes every matrix product: BLAS by default; an artifact passes one whose rows do
    not depend on their batch (:mod:`vecbridge.numeric.rowwise`), every other step being row by row already.
    """
    X = _as_float(X)
    single = X.ndim == 1
    if single:
        X = X[None, :]
    d_in = rotations.shape[2] if inverse else rotations.shape[1]
    if X.ndim != 2 or X.shape[1] != d_in:
        raise InputError(f"{name}: expected vectors of dimension {d_in}, got shape {X.shape}")
    dtype = X.dtype
    mean_in, mean_out = mean_in.astype(dtype), mean_out.astype(dtype)
    kw = dict(assignment=assignment, temperature=temperature, top_m=top_m, product=product)
    blend = dict(product=product)
    Xc = X - mean_in
    if not inverse:
        out = _blend(Xc, cluster_weights(X, centroids, **kw), rotations, translations, inverse=False,
                     **blend) + mean_out
        return out[0] if single else out
    guess = product(Xc, global_rotation.astype(dtype, copy=False).T, mean_out)
    out = _blend(Xc, cluster_weights(guess, centroids, **kw), rotations, translations, inverse=True,
                 **blend) + mean_out
    for _ in range(max(int(refine), 0)):
        W = cluster_weights(out, centroids, **kw)
        fwd = _blend(out - mean_out, W, rotations, translations, inverse=False, **blend) + mean_in
        out = out + _blend(X - fwd, W, rotations, translations, inverse=True, with_translation=False, **blend)
    return out[0] if single else out


# --- the estimator ---------------------------------------------------------------------------------------------------
class ClusteredProcrustes(Estimator):
    """Clustered orthogonal Procrustes (the Vector Linking paper's integration protocol, Yang et al. SIGMOD 2025), with
    shrinkage towards the global map, a fallback for thin clusters and a soft (continuous) assignment.

    Parameters
    ----------
    n_clusters : int, default 16
        k of the spherical k-means on the source anchors (measured: 8-32 within 0.3 points on wordnet).
    shrinkage : float, default 1000
        ``n0``: the global cross-covariance enters every cluster's fit as ``n0`` pseudo-pairs. 0 = each cluster on
        its own anchors only (the literal protocol; over-fits at a few hundred anchors per cluster).
    min_cluster_size : int, default 50
        Clusters with fewer anchors use the global map (the protocol's fallback).
    assignment : "soft" (default) or "hard"
    temperature : float, default 0.05
        Softmax temperature on cosines to the centroids (soft assignment).
    top_m : int, default 3
        Soft assignment blends at most this many nearest clusters (bounds the cost of ``transform``).
    family : "rotation" (default) or "translation"
        One rotation per cluster, or the global rotation plus one (shrunk) translation per cluster.
    center : bool, default True
        Centre both sides on the anchors' means (affine map).
    n_iter : int, default 25
        k-means iterations.
    init : None or array (n_clusters, d_src)
        Fixed centroids instead of k-means (e.g. to refit on more pairs with the same clusters).
    random_state : int, default 0
        Seeds k-means (the only stochastic step).

    ``fit(X, Y)`` clusters and fits; ``partial_fit(X, Y)`` clusters on its first batch, then keeps the centroids and
    adds later batches to the per-cluster sums (so a stream refines the maps, never the clusters); ``transform`` maps
    source vectors to the target space, ``inverse_transform`` maps target vectors (e.g. new-model queries) back.
    """

    _parameter_constraints = {
        "n_clusters": Integer(1), "shrinkage": Real(0), "min_cluster_size": Integer(0),
        "assignment": OneOf(*ASSIGNMENTS), "temperature": Real(0, low_open=True), "top_m": Integer(1),
        "family": OneOf(*FAMILIES), "center": Boolean(), "n_iter": Integer(0), "init": optional(ArrayLike()),
        "random_state": RandomState(),
    }

    def __init__(self, n_clusters: int = 16, shrinkage: float = 1000.0, min_cluster_size: int = 50,
                 assignment: str = "soft", temperature: float = 0.05, top_m: int = 3, family: str = "rotation",
                 center: bool = True, n_iter: int = 25, init=None, random_state=0):
        self.n_clusters = n_clusters
        self.shrinkage = shrinkage
        self.min_cluster_size = min_cluster_size
        self.assignment = assignment
        self.temperature = temperature
        self.top_m = top_m
        self.family = family
        self.center = center
        self.n_iter = n_iter
        self.init = init
        self.random_state = random_state

    # --- fitting ---------------------------------------------------------------------------------------------------
    def fit(self, X_src, Y_tgt):
        """Cluster the source anchors and fit one (shrunk) orthogonal map per cluster. Returns self."""
        self._validate_params()
        for attr in ("_sums", "centroids_"):
            if hasattr(self, attr):
                delattr(self, attr)
        return self.partial_fit(X_src, Y_tgt)

    def partial_fit(self, X_src, Y_tgt):
        """Add a batch of pairs. The first batch fixes the clusters (k-means, or ``init``); later batches only add
        to the per-cluster sums, and every call refits the maps (k SVDs of d_src x d_tgt)."""
        self._validate_params()
        first = not hasattr(self, "_sums")
        X, Y = check_paired(X_src, Y_tgt, src_dim=None if first else self.n_features_in_,
                            tgt_dim=None if first else self.n_features_out_)
        X = np.asarray(X, dtype=np.float64)
        Y = np.asarray(Y, dtype=np.float64)
        if first:
            k = int(self.n_clusters)
            if self.init is not None:
                C = l2_normalize(np.asarray(self.init, dtype=np.float64))
                if C.shape != (k, X.shape[1]):
                    raise InputError(f"init must have shape ({k}, {X.shape[1]}), got {C.shape}")
            else:
                if X.shape[0] < k:
                    raise InputError(f"{X.shape[0]} pairs cannot form {k} clusters: give more pairs or fewer "
                                     f"clusters")
                C = spherical_kmeans(X, k, n_iter=self.n_iter, random_state=self.random_state)
            self.centroids_ = C
            self._sums = {"n": np.zeros(k), "sx": np.zeros((k, X.shape[1])), "sy": np.zeros((k, Y.shape[1])),
                          "xty": np.zeros((k, X.shape[1], Y.shape[1])), "sqx": np.zeros(k), "sqy": np.zeros(k)}
            if X.shape[1] > Y.shape[1]:  # a projection loses norm: its residual needs each cluster's Gram matrix
                self._sums["xtx"] = np.zeros((k, X.shape[1], X.shape[1]))
        labels = assign_labels(l2_normalize(X), self.centroids_, metric="cosine")
        s = self._sums
        for c in np.unique(labels):
            rows = labels == c
            Xc, Yc = X[rows], Y[rows]
            s["n"][c] += Xc.shape[0]
            s["sx"][c] += Xc.sum(axis=0)
            s["sy"][c] += Yc.sum(axis=0)
            s["xty"][c] += Xc.T @ Yc
            s["sqx"][c] += float(np.einsum("ij,ij->", Xc, Xc))
            s["sqy"][c] += float(np.einsum("ij,ij->", Yc, Yc))
            if "xtx" in s:
                s["xtx"][c] += Xc.T @ Xc
        return self._refit()

    def _refit(self):
        s = self._sums
        n = float(s["n"].sum())
        d_src, d_tgt = s["sx"].shape[1], s["sy"].shape[1]
        mu_x = s["sx"].sum(axis=0) / n if self.center else np.zeros(d_src)
        mu_y = s["sy"].sum(axis=0) / n if self.center else np.zeros(d_tgt)
        # the global cross-covariance is the sum of the clusters' (nothing else is accumulated)
        C_glob = s["xty"].sum(axis=0) - n * np.outer(mu_x, mu_y)
        R_glob = polar_factor(C_glob)
        k = len(s["n"])
        rotations = np.empty((k, d_src, d_tgt))
        translations = np.zeros((k, d_tgt))
        fallback = s["n"] < max(int(self.min_cluster_size), 1)
        resid = 0.0
        for c in range(k):
            nc = s["n"][c]
            # centred cross-covariance of the cluster, about the global means
            Cc = s["xty"][c] - np.outer(s["sx"][c], mu_y) - np.outer(mu_x, s["sy"][c]) + nc * np.outer(mu_x, mu_y)
            if fallback[c]:
                R = R_glob
            elif self.family == "rotation":
                R = polar_factor(Cc + (self.shrinkage / n) * C_glob) if self.shrinkage > 0 else polar_factor(Cc)
            else:
                R = R_glob
            rotations[c] = R
            if self.family == "translation" and not fallback[c]:
                mean_resid = (s["sy"][c] - nc * mu_y) - (s["sx"][c] - nc * mu_x) @ R_glob
                translations[c] = mean_resid / (nc + self.shrinkage)
            if nc:
                # in-sample sum of squared residuals under the hard assignment, from the sums alone
                sqx = s["sqx"][c] - 2 * s["sx"][c] @ mu_x + nc * mu_x @ mu_x
                sqy = s["sqy"][c] - 2 * s["sy"][c] @ mu_y + nc * mu_y @ mu_y
                t = translations[c]
                sx_c = s["sx"][c] - nc * mu_x
                sy_c = s["sy"][c] - nc * mu_y
                if "xtx" in s:  # ||(x - mu_x) R||^2 summed = tr(R^T G_c R), G_c the cluster's Gram about mu_x
                    G = (s["xtx"][c] - np.outer(s["sx"][c], mu_x) - np.outer(mu_x, s["sx"][c])
                         + nc * np.outer(mu_x, mu_x))
                    xr_sq = float(np.sum((G @ R) * R))
                else:  # rows of R orthonormal: the rotation keeps norms
                    xr_sq = sqx
                resid += xr_sq + sqy - 2 * np.sum(R * Cc) + nc * t @ t + 2 * (sx_c @ R) @ t - 2 * sy_c @ t
        self.matrix_ = R_glob
        self.global_rotation_ = R_glob
        self.rotations_ = rotations
        self.translations_ = translations
        self.source_mean_ = mu_x
        self.target_mean_ = mu_y
        self.scale_ = 1.0
        self.cluster_sizes_ = s["n"].astype(np.int64)
        self.fallback_ = fallback
        self.n_pairs_ = int(n)
        self.n_features_in_ = d_src
        self.n_features_out_ = d_tgt
        self.residual_ = float(resid / n)
        self.is_projection_ = d_src > d_tgt
        return self

    # --- applying ----------------------------------------------------------------------------------------------------
    def _check_fitted(self):
        if not hasattr(self, "rotations_"):
            raise InputError(f"{type(self).__name__} is not fitted yet: call fit() first")

    def cluster_weights(self, X) -> np.ndarray:
        """(n, n_clusters) assignment weights of source vectors (rows sum to 1)."""
        self._check_fitted()
        return cluster_weights(_as_float(X), self.centroids_, assignment=self.assignment,
                               temperature=self.temperature, top_m=self.top_m)

    def transform(self, X):
        """Source-model vectors -> target space (float32 in, float32 out; float64 in, float64 out)."""
        self._check_fitted()
        return apply_clustered(X, self.centroids_, self.rotations_, self.translations_, self.source_mean_,
                               self.target_mean_, assignment=self.assignment, temperature=self.temperature,
                               top_m=self.top_m, name="X")

    def inverse_transform(self, Y):
        """Target-space vectors (e.g. new-model queries) -> source space."""
        self._check_fitted()
        return apply_clustered(Y, self.centroids_, self.rotations_, self.translations_, self.target_mean_,
                               self.source_mean_, assignment=self.assignment, temperature=self.temperature,
                               top_m=self.top_m, inverse=True, global_rotation=self.global_rotation_, name="Y")

    @property
    def inverse_matrix_(self) -> np.ndarray:
        """The global rotation's inverse (its transpose): what a wrapper translates queries with before re-scoring."""
        return self.global_rotation_.T
