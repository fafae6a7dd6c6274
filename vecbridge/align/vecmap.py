"""VecMap's fully unsupervised start and self-learning ("A robust self-learning method for fully unsupervised
cross-lingual mappings of word embeddings", Artetxe, Labaka & Agirre, ACL 2018), adapted to sentence embeddings of
two unpaired collections.

Why: mini-vec2vec starts from a matching of k-means centroids and converges to a wrong map when that matching is
wrong; VecMap's start depends on no centroid matching, so it fails on other data, and
:class:`~vecbridge.align.MiniVec2Vec` uses both as restarts. The method follows the paper's section 3:
normalisation (centre, unit rows), the similarity-distribution initialisation (sorted rows of ``sqrt(X X^T)``,
compared across spaces by CSLS; dimension-free), then self-learning (Procrustes on the current dictionary, a new
bidirectional CSLS dictionary with stochastic dictionary induction) until the objective stalls at keep probability
1. Where it departs (random samples instead of frequency-ranked vocabularies, an orthogonal map, a capped
schedule), and the measurements behind each choice: docs/design.md, "mini-vec2vec".
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .._blas import one_blas_thread
from ..errors import InputError
from ..numeric.estimator import Integer, RandomState, Real
from ..numeric.linalg import mapped_factors, procrustes_rotation
from ..validation import check_vectors
from ..vectors import l2_normalize
from .base import LinearTransform


def _unit_centre_unit(X: np.ndarray) -> np.ndarray:
    """VecMap's normalisation: unit rows, centre the columns, unit rows again."""
    X = l2_normalize(np.asarray(X, dtype=np.float32))
    return l2_normalize(X - X.mean(axis=0, dtype=np.float64).astype(np.float32))


def similarity_profiles(X: np.ndarray) -> np.ndarray:
    """VecMap's dimension-free description of each row (the paper's section 3.2): the rows of ``sqrt(X X^T)``, each
    sorted in decreasing order, normalised (unit, centre, unit). ``X``: (n, d), unit rows. Returns (n, n) float32."""
    with one_blas_thread():
        U, s, _ = np.linalg.svd(np.asarray(X, dtype=np.float64), full_matrices=False)
    M = ((U * s) @ U.T).astype(np.float32)      # sqrt(X X^T) = U S U^T
    M = -np.sort(-M, axis=1)
    return _unit_centre_unit(M)


def _transposed(S: np.ndarray, block: int = 256) -> np.ndarray:
    """A C-contiguous copy of ``S.T``, tile by tile: the same values as ``np.ascontiguousarray(S.T)``, whose strided
    copy of a whole similarity matrix misses the cache on almost every element (several times slower at 3,000 x
    3,000, a large share of one self-learning iteration)."""
    n, m = S.shape
    out = np.empty((m, n), dtype=S.dtype)
    for i in range(0, n, block):
        for j in range(0, m, block):
            out[j:j + block, i:i + block] = S[i:i + block, j:j + block].T
    return out


def _top_mean(S: np.ndarray, k: int) -> np.ndarray:
    """Mean of the ``k`` largest entries of each row (CSLS's hubness term)."""
    n = S.shape[1]
    k = max(1, min(int(k), n))
    return np.partition(S, n - k, axis=1)[:, n - k:].mean(axis=1)


def csls_dictionary(P: np.ndarray, Q: np.ndarray, *, k: int = 10, keep: float = 1.0,
                    rng: np.random.Generator | None = None):
    """Bidirectional CSLS dictionary induction between the rows of ``P`` (source side) and ``Q`` (target side),
    similarities ``S = P Q^T``, as VecMap does: every source row's best target row and every target row's best
    source row by ``CSLS(i, j) = 2 S_ij - r_T(i) - r_S(j)``. With ``keep < 1`` each similarity survives with that
    probability before the argmax (stochastic dictionary induction, independently in the two directions as in the
    paper's code; the hubness terms use all entries). Returns ``(src_idx, tgt_idx, objective)``, the objective
    being the mean best CSLS score of both directions without dropout."""
    P = np.asarray(P, dtype=np.float32)
    Q = np.asarray(Q, dtype=np.float32)
    if keep < 1.0 and rng is None:
        raise InputError("stochastic dictionary induction needs a random generator")
    S = P @ Q.T
    St = _transposed(S)              # one product, its transpose copied (row-wise reductions in both directions)
    r_t = _top_mean(S, k)            # r_T(i): mean similarity of source row i to its k nearest target rows
    r_s = _top_mean(St, k)           # r_S(j)
    objective = 0.0
    best = []
    for M, r_own, r_other in ((S, r_t, r_s), (St, r_s, r_t)):
        C = np.multiply(M, 2.0, out=M)        # in place: M is not needed again (saves two n^2 temporaries)
        C -= r_other[None, :]
        objective += 0.5 * float((C.max(axis=1) - r_own).mean())
        if keep < 1.0:
            np.putmask(C, rng.random(C.shape, dtype=np.float32) >= keep, -np.inf)
        best.append(C.argmax(axis=1))
    fwd, bwd = best
    src = np.concatenate([np.arange(len(P)), bwd])
    tgt = np.concatenate([fwd, np.arange(len(Q))])
    return src, tgt, objective


def profile_dictionary(A: np.ndarray, B: np.ndarray, *, k: int = 10):
    """VecMap's initial dictionary between two samples of unit rows (any dimensions): CSLS on their similarity
    profiles (:func:`similarity_profiles`). Returns ``(src_idx, tgt_idx)``."""
    Pa, Pb = similarity_profiles(A), similarity_profiles(B)
    if Pa.shape[1] != Pb.shape[1]:
        raise InputError(f"similarity profiles need samples of one size, got {len(A)} and {len(B)} rows")
    src, tgt, _ = csls_dictionary(Pa, Pb, k=k)
    return src, tgt


def self_learning(A: np.ndarray, B: np.ndarray, W: np.ndarray, rng: np.random.Generator, *, max_iter: int = 80,
                  k: int = 10, stochastic_initial: float = 0.1, stochastic_multiplier: float = 2.0,
                  stochastic_interval: int = 50, threshold: float = 1e-6, check: Callable[[], None] | None = None):
    """VecMap's self-learning from the map ``W`` (d_src x d_tgt) between samples ``A`` and ``B`` (unit rows):
    Procrustes on the dictionary, stochastic bidirectional CSLS induction, ``p`` raised when the objective stalls.
    ``check`` runs before every iteration; an exception it raises abandons the run (a caller's cancellation point).
    Returns ``(W, objectives, n_iter)``."""
    p, best, stall, objectives = float(stochastic_initial), -np.inf, 0, []
    for _ in range(int(max_iter)):
        if check is not None:
            check()
        src, tgt, obj = csls_dictionary(*mapped_factors(A, B, W), k=k, keep=p, rng=rng)
        objectives.append(obj)
        W = procrustes_rotation(A[src], B[tgt])
        if obj > best + threshold:
            best, stall = obj, 0
            continue
        stall += 1
        if stall >= stochastic_interval:
            if p >= 1.0:
                break
            p, stall = min(1.0, p * stochastic_multiplier), 0
    return W, np.asarray(objectives), len(objectives)


class VecMap(LinearTransform):
    """Unsupervised orthogonal map from two unpaired samples by VecMap's similarity-distribution initialisation and
    stochastic self-learning (see the module docstring for the paper's steps and the departures).

    ``VecMap(...).fit(X_src, X_tgt)``: rows of the two arrays are different items (no pairs). ``transform`` maps
    source vectors into the target space, ``y = scale_ * (x - mu_src) @ W + mu_tgt`` with an orthogonal (or, across
    dimensions, semi-orthogonal) ``W``. On its own it is a starting point (top-1 0.5-0.8 on 4,000 + 4,000 real
    sentence embeddings); :class:`~vecbridge.align.MiniVec2Vec` refines it (``init="vecmap"``).

    Parameters
    ----------
    n_init : int, default 3000
        Rows per side (the first of the self-learning sample) whose similarity profiles give the initial dictionary
        [paper: 4,000 most frequent words].
    n_sample : int, default 3000
        Rows per side of the self-learning [paper: 20,000-word cut-off].
    csls_k : int, default 10
        CSLS neighbourhood [10].
    max_iter : int, default 80
        Self-learning iterations at most [unbounded].
    stochastic_initial, stochastic_multiplier, stochastic_interval, threshold
        Stochastic dictionary induction: start keeping each similarity with probability 0.1, double it after 50
        iterations without an objective gain above 1e-6 [the paper's 0.1, 2, 50, 1e-6].
    random_state : int, numpy Generator or None
        Seeds the samples and the dropout.

    Attributes
    ----------
    matrix_, source_mean_, target_mean_, scale_ : the affine map (see :class:`~vecbridge.align.base.LinearTransform`).
    initial_matrix_ : the map fitted on the initial (profile) dictionary, before self-learning.
    objective_ : the self-learning objective per iteration; ``n_iter_`` its length.
    timings_ : seconds of the initialisation and of self-learning.
    n_features_in_, n_features_out_ : d_src, d_tgt.
    """

    _parameter_constraints = {
        "n_init": Integer(10), "n_sample": Integer(10), "csls_k": Integer(1), "max_iter": Integer(0),
        "stochastic_initial": Real(0, 1, low_open=True), "stochastic_multiplier": Real(1, low_open=True),
        "stochastic_interval": Integer(1), "threshold": Real(0), "random_state": RandomState(),
    }

    def __init__(self, n_init: int = 3000, n_sample: int = 3000, csls_k: int = 10, max_iter: int = 80,
                 stochastic_initial: float = 0.1, stochastic_multiplier: float = 2.0, stochastic_interval: int = 50,
                 threshold: float = 1e-6, random_state=None):
        self.n_init = n_init
        self.n_sample = n_sample
        self.csls_k = csls_k
        self.max_iter = max_iter
        self.stochastic_initial = stochastic_initial
        self.stochastic_multiplier = stochastic_multiplier
        self.stochastic_interval = stochastic_interval
        self.threshold = threshold
        self.random_state = random_state

    def fit(self, X_src, X_tgt):
        """Fit from two *unpaired* samples (rows of X_src and X_tgt are different items). Returns self."""
        self._validate_params()
        X_src = check_vectors(X_src, "X_src", dtype=np.float32)
        X_tgt = check_vectors(X_tgt, "X_tgt", dtype=np.float32)
        if min(len(X_src), len(X_tgt)) < 2 * self.csls_k:
            raise InputError(f"VecMap needs at least {2 * self.csls_k} vectors per side (csls_k={self.csls_k}), "
                             f"got {len(X_src)} and {len(X_tgt)}")
        rng = np.random.default_rng(self.random_state)
        mu_a = X_src.mean(axis=0, dtype=np.float64)
        mu_b = X_tgt.mean(axis=0, dtype=np.float64)
        A = l2_normalize(X_src - mu_a.astype(np.float32))
        B = l2_normalize(X_tgt - mu_b.astype(np.float32))
        W, info = fit_vecmap(A, B, rng, **self._settings())
        self.initial_matrix_ = info["initial"]
        self.objective_ = info["objective"]
        self.n_iter_ = info["n_iter"]
        self.timings_ = info["timings"]
        self.matrix_ = W
        self.source_mean_, self.target_mean_ = mu_a, mu_b
        mapped = np.linalg.norm((X_src - mu_a.astype(np.float32)) @ W.astype(np.float32), axis=1).mean()
        target = np.linalg.norm(X_tgt - mu_b.astype(np.float32), axis=1).mean()
        self.scale_ = float(target / mapped) if mapped > 0 else 1.0
        self.n_features_in_, self.n_features_out_ = int(W.shape[0]), int(W.shape[1])
        return self

    def _settings(self) -> dict:
        return {k: getattr(self, k) for k in ("n_init", "n_sample", "csls_k", "max_iter", "stochastic_initial",
                                               "stochastic_multiplier", "stochastic_interval", "threshold")}

    @property
    def inverse_matrix_(self) -> np.ndarray:
        """Target -> source: ``W^T`` (W is orthogonal, or semi-orthogonal across dimensions)."""
        self._check_fitted()
        return self.matrix_.T


def fit_vecmap(A: np.ndarray, B: np.ndarray, rng: np.random.Generator, *, n_init: int = 3000, n_sample: int = 3000,
               csls_k: int = 10, max_iter: int = 80, stochastic_initial: float = 0.1,
               stochastic_multiplier: float = 2.0, stochastic_interval: int = 50, threshold: float = 1e-6,
               check: Callable[[], None] | None = None):
    """The whole method on centred unit rows ``A`` (source) and ``B`` (target): profile initialisation on
    ``n_init`` sampled rows per side, then self-learning on ``n_sample`` rows per side (``check``: as
    :func:`self_learning`'s). Returns ``(W, info)``."""
    t0 = time.perf_counter()
    sa = rng.choice(len(A), min(int(n_sample), len(A)), replace=False)
    sb = rng.choice(len(B), min(int(n_sample), len(B)), replace=False)
    a, b = A[sa], B[sb]
    n0 = min(int(n_init), len(a), len(b))
    src, tgt = profile_dictionary(a[:n0], b[:n0], k=csls_k)
    W0 = procrustes_rotation(a[src], b[tgt])
    t1 = time.perf_counter()
    W, objective, n_iter = self_learning(
        a, b, W0, rng, max_iter=max_iter, k=csls_k, stochastic_initial=stochastic_initial,
        stochastic_multiplier=stochastic_multiplier, stochastic_interval=stochastic_interval, threshold=threshold,
        check=check)
    timings = {"init": t1 - t0, "self_learning": time.perf_counter() - t1}
    return W, {"initial": W0, "objective": objective, "n_iter": n_iter, "timings": timings}
