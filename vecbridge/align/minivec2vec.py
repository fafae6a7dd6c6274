"""mini-vec2vec: a linear map between two embedding spaces learnt from two unpaired samples ("mini-vec2vec: Scaling
Universal Geometry Alignment with Linear Transformations", Dar, 2025).

Two collections embedded by two models share no item and no id, only their geometry. :class:`MiniVec2Vec` runs the
paper's listings 1 and 2 as named steps: preprocessing (section 3.1), matched k-means centroids by a quadratic
assignment (3.2), kNN pseudo-pairs in relative space and an initial Procrustes (3.3), Refine-1 and Refine-2 (3.4).
It extends them to unequal dimensions (every Procrustes step solves the padded problem of "When Embedding Models
Meet: Procrustes Bounds and Applications", 2025, so W embeds or projects) and makes them robust: several starts
judged by the label-free validation of :mod:`vecbridge.align.validation`, VecMap starts ("A robust self-learning
method for fully unsupervised cross-lingual mappings of word embeddings", Artetxe et al., 2018), a CSLS polish and
Procrustes on an entropic transport plan ("Sinkhorn Distances", Cuturi, 2013; "Unsupervised Alignment of Embeddings
with Wasserstein Procrustes", Grave et al., 2019). Each departure and its measurement: docs/design.md
("mini-vec2vec") and bench/README.md (``bench/minivec2vec.py``, ``bench/unsupervised_restarts.py``).
"""
from __future__ import annotations

import contextlib
import copy
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._blas import one_blas_thread
from ..errors import InputError
from ..numeric.estimator import Boolean, Integer, OneOf, RandomState, Real, optional
from ..numeric.kmeans import kmeans
from ..numeric.linalg import mapped_factors, polar, procrustes_rotation
from ..numeric.neighbors import BACKENDS, knn, mutual_nearest_neighbours
from ..numeric.transport import transport_procrustes
from ..validation import check_vectors
from ..vectors import l2_normalize
from .base import LinearTransform
from .procrustes import OrthogonalProcrustes
from .validation import (
    GAIN_MIN,
    MAX_ROWS,
    MIN_ROWS,
    REPRODUCTION_MIN,
    confirmable,
    null_distribution,
    reproduction,
    validate_map,
)
from .vecmap import csls_dictionary, fit_vecmap, self_learning

QAP_SOLVERS = ("2opt", "scipy")
SIMILARITIES = ("cosine", "gram")
ANCHOR_MODES = ("relative", "centroids")
INITS = ("auto", "centroids", "vecmap")
REFINE1_WINDOW = 5      # Refine-1 convergence is checked every this many iterations ...
REFINE1_PROBE = 1000    # ... on this many fixed source rows ...
REFINE1_MIN_ITER = 20   # ... and never before this many iterations


# ------------------------------------------------------------------------------------------------------------------
# Quadratic assignment by 2-opt
# ------------------------------------------------------------------------------------------------------------------
def qap_objective(A: np.ndarray, B: np.ndarray, perm: np.ndarray) -> float:
    """``sum_ij A[i, j] B[perm[i], perm[j]]`` (the quantity the matching maximises)."""
    return float(np.sum(A * B[np.ix_(perm, perm)]))


def qap_2opt(A, B, *, n_restarts: int = 30, rng: np.random.Generator, maximize: bool = True, max_steps: int = 10_000):
    """Approximate QAP for symmetric A, B: 2-opt from ``n_restarts`` random permutations, the best kept (the paper's
    section 4). All restarts at once, each step scoring every swap in closed form and taking the best (scipy takes the
    first improving one; both end in a 2-opt local optimum). Returns ``(perm, objective)``: A's row i matches B's
    row ``perm[i]``."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    n = A.shape[0]
    if A.shape != (n, n) or B.shape != (n, n):
        raise InputError(f"QAP needs two square matrices of one size, got {A.shape} and {B.shape}")
    if not (np.allclose(A, A.T) and np.allclose(B, B.T)):
        raise InputError("qap_2opt needs symmetric matrices")
    sign = 1.0 if maximize else -1.0
    R = max(1, int(n_restarts))
    perms = np.stack([rng.permutation(n) for _ in range(R)])
    if n < 2:
        return perms[0], qap_objective(A, B, perms[0])
    iu, ju = np.triu_indices(n, 1)
    dA = np.diag(A)
    active = np.ones(R, dtype=bool)
    for _ in range(max_steps):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        P = perms[idx]
        E = B[P[:, :, None], P[:, None, :]]                       # permuted B, (r, n, n)
        G = np.einsum("ik,rjk->rij", A, E)                        # G[r, i, j] = sum_k A[i, k] E[r, j, k]
        g = np.einsum("ik,rik->ri", A, E)                         # diag of G
        dE = np.einsum("rii->ri", E)
        # swap i <-> j: delta = 2 * sum_{k != i, j} (A_ik - A_jk)(E_jk - E_ik) + (A_ii - A_jj)(E_jj - E_ii)
        T = G + np.swapaxes(G, 1, 2) - g[:, :, None] - g[:, None, :]
        Ai_j = A[None, :, :]                                      # A[i, j]
        Eij = E
        c_i = (dA[None, :, None] - Ai_j) * (Eij - dE[:, :, None])    # k = i term: (A_ii - A_ji)(E_ji - E_ii)
        c_j = (Ai_j - dA[None, None, :]) * (dE[:, None, :] - Eij)    # k = j term: (A_ij - A_jj)(E_jj - E_ij)
        delta = 2.0 * (T - c_i - c_j) + (dA[None, :, None] - dA[None, None, :]) * (dE[:, None, :] - dE[:, :, None])
        cand = sign * delta[:, iu, ju]                            # (r, n_pairs)
        best = np.argmax(cand, axis=1)
        gain = cand[np.arange(idx.size), best]
        improve = gain > 1e-12 * max(1.0, float(np.abs(A).sum() * np.abs(B).max()))
        for r_local in np.flatnonzero(improve):
            r = idx[r_local]
            i, j = iu[best[r_local]], ju[best[r_local]]
            perms[r, i], perms[r, j] = perms[r, j], perms[r, i]
        active[idx[~improve]] = False
    scores = np.array([qap_objective(A, B, p) for p in perms])
    k = int(np.argmax(sign * scores))
    return perms[k].copy(), float(scores[k])


def _qap_scipy(A, B, n_restarts: int, rng: np.random.Generator):
    from scipy.optimize import quadratic_assignment

    best = None
    for _ in range(max(1, int(n_restarts))):
        seed = int(rng.integers(2**32 - 1))
        res = quadratic_assignment(A, B, method="2opt", options={"maximize": True, "rng": np.random.default_rng(seed)})
        if best is None or res.fun > best.fun:
            best = res
    return np.asarray(best.col_ind), float(best.fun)


def _centroid_similarity(C: np.ndarray, kind: str) -> np.ndarray:
    """Section 3.2: cosine between centroids; ``"gram"``: the official code's double-centred ``H C C^T H``."""
    C = np.asarray(C, dtype=np.float64)
    if kind == "cosine":
        Cn = l2_normalize(C)
        return Cn @ Cn.T
    G = C @ C.T
    G = G - G.mean(axis=0, keepdims=True)
    return G - G.mean(axis=1, keepdims=True)


def _neighbour_mean(Y: np.ndarray, idx: np.ndarray, block: int = 512) -> np.ndarray:
    """Row i = the mean of ``Y[idx[i]]`` (the pseudo-target of sections 3.3 and 3.4), block by block."""
    out = np.empty((idx.shape[0], Y.shape[1]), dtype=np.float32)
    for lo in range(0, idx.shape[0], block):
        out[lo:lo + block] = Y[idx[lo:lo + block]].mean(axis=1)
    return out


class _Fixed:
    """A bare linear map ``X @ W`` for :func:`~vecbridge.align.validation.validate_map` (inputs already centred)."""

    def __init__(self, W):
        self.W = np.asarray(W, dtype=np.float32)

    def transform(self, X):
        return np.asarray(X, dtype=np.float32) @ self.W


class _Judge:
    """The label-free criterion of :mod:`vecbridge.align.validation` on a fixed sample of the fit's own rows (at most
    ``MAX_ROWS`` per side), its null distribution computed once for all restarts."""

    def __init__(self, A, B, rng: np.random.Generator, backend: str):
        self.X = A[np.sort(rng.choice(len(A), min(MAX_ROWS, len(A)), replace=False))]
        self.Y = B[np.sort(rng.choice(len(B), min(MAX_ROWS, len(B)), replace=False))]
        self.seed, self.backend = int(rng.integers(2**31)), backend
        self.null = null_distribution(self.X, self.Y, random_state=self.seed, backend=backend)

    def validate(self, W):
        return validate_map(_Fixed(W), self.X, self.Y, null=self.null, random_state=self.seed, backend=self.backend)

    def reproduction(self, W1, W2) -> float:
        """:func:`~vecbridge.align.validation.reproduction` of two starts' maps on the judged rows."""
        return reproduction(self.X, self.Y, W1, W2, backend=self.backend)


class _Laps:
    """Wall seconds per stage, summed: ``lap(stage)`` charges the time since the previous lap (or ``restart``)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.restart()

    def restart(self):
        self._clock = time.perf_counter()

    def __call__(self, stage: str):
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._clock
        self._clock = now

    def add(self, seconds: dict):
        for stage, t in seconds.items():
            self.seconds[stage] = self.seconds.get(stage, 0.0) + t


class _Stopped(Exception):
    """A start that runs beside others is abandoned: the search already stopped at an earlier start."""


def _restart_key(record: dict) -> tuple:
    """Which start wins: one that passes validation or is confirmed by another start, then the larger gain over
    refined random maps (the basin that stands out most); among failed ones the higher score."""
    if "passed" not in record:
        return (0, 0.0)
    accepted = record["passed"] or record.get("confirmed_by") is not None
    return (1, record["gain"]) if accepted else (0, record["score"])


def _confirm(record: dict, W, earlier: list, judge) -> bool:
    """Compare a start with every earlier one that might confirm it (both :func:`confirmable`): where their maps
    reproduce each other on :data:`REPRODUCTION_MIN` of the judged rows, each records the other (``confirmed_by``,
    ``reproduction``, the first such start kept). ``earlier``: ``(W, record)`` of the earlier starts. True when a
    start that fails the gain rule is now confirmed."""
    if not confirmable(record["gain"], record["agreement"]):
        return False
    newly = False
    for W_j, rec_j in earlier:
        if not confirmable(rec_j["gain"], rec_j["agreement"]):
            continue
        share = judge.reproduction(W, W_j)
        record.setdefault("reproductions", {})[rec_j["restart"]] = round(share, 4)
        if share < REPRODUCTION_MIN:
            continue
        for rec, other in ((record, rec_j), (rec_j, record)):
            if rec.get("confirmed_by") is None:
                rec.update(confirmed_by=other["restart"], reproduction=share)
                newly = newly or not rec["passed"]
    return newly


# ------------------------------------------------------------------------------------------------------------------
# The estimator
# ------------------------------------------------------------------------------------------------------------------
class MiniVec2Vec(LinearTransform):
    """Unsupervised linear alignment: ``fit(X_src, X_tgt)`` on embeddings of *different* items by two models
    (dimensions may differ), then ``transform(X)`` into the target space like
    :class:`~vecbridge.align.OrthogonalProcrustes` (no ``partial_fit``, ``fit_stream`` or ``fit_moments``: there are
    no pairs). Steps and papers: the module docstring. ``n_restarts=1, init="centroids", polish_iter=0`` is the
    paper's single run.

    Parameters (the paper's value in brackets where it differs or matters)
    ----------
    n_runs, n_clusters, qap_restarts : int, default 30, 20, 30
        Matching: runs, clusters per run [30 for gtr <-> gte], 2-opt restarts per run (the best objective kept).
    qap_solver : {"2opt", "scipy"}, default "2opt"
        Vectorised best-improvement 2-opt, or scipy's ``quadratic_assignment(method="2opt")`` [paper; 60x slower].
    similarity : {"cosine", "gram"}, default "cosine"
        Centroid similarity: cosine [paper] or the official code's double-centred Gram matrix.
    kmeans_sample, kmeans_max_iter : int, default 10000, 30
        Rows per side and run of the matching k-means [code: 10,000]; Lloyd iterations of every k-means
        [scikit-learn: 300].
    anchor_mode, n_neighbors : {"relative", "centroids"}, int, default "relative", 50
        Pseudo-targets: the mean of the ``n_neighbors`` nearest in relative space, or the matched centroids.
    refine1_iter, refine1_sample, refine1_neighbors : int, default 100, 1000, 50
        Refine-1: iterations at most [50-100], source rows per iteration [10,000; code 1,000], targets averaged.
    refine1_tol : float, default 5e-4
        Stop Refine-1 (after 20 iterations) once the mean nearest-target cosine of 1,000 fixed mapped rows gains
        less than this over 5 iterations; 0: never [the paper always runs them all].
    refine2_clusters, refine2_iter : int, default 500, 1
        Refine-2: clusters and repetitions [exactly 1].
    alpha : float, default 0.5
        Smoothing ``W <- (1 - alpha) W + alpha W_new`` in both refinements.
    max_samples : int or None, default 25000
        Rows per side for the quadratic steps, drawn once (None: all) [25,904 in the paper]; means use all rows.
    orthogonalize : bool, default False
        Replace the final W by its nearest (semi-)orthogonal matrix.
    backend : {"auto", "faiss", "numpy"}, default "auto"
        Nearest-neighbour backend of :func:`vecbridge.numeric.neighbors.knn`.
    random_state : int, numpy Generator or None
        Seeds every stochastic step.
    init, n_restarts, restart_margin : {"auto", "centroids", "vecmap"}, int, float, default "auto", 4, 1.5
        Starts (ours), each through Refine-1 and judged by the label-free validation (not with one start): centroid
        matching, VecMap or both ("auto": c, v, v, c, ... at 1x, 1.5x, 1x, 2x ``n_clusters``); the first to pass
        with ``gain >= restart_margin * GAIN_MIN`` ends the search, else the best is kept.
    confirm : bool, default True
        Accept a start short of the gain rule (gain at least ``GAIN_MIN / 2``, agreement met) when another start's
        map reproduces it: sends at least ``REPRODUCTION_MIN`` of the judged rows to the same nearest target row
        (ours: independent starts reach the true map again, wrong ones did not reach each other's on either corpus;
        docs/design.md). Such a start ends the search; False: the gain rule alone.
    confirm_starts : int, default 2
        Ours: when the search ends on a start that passed the gain rule only narrowly (below ``restart_margin *
        GAIN_MIN``) and no other start reproduced it, up to this many more starts (the schedule continued) look for
        one that does. A narrow pass none reproduces is kept but recorded in ``doubt_``, and
        :func:`vecbridge.pairing.learned.check_map` refuses it: the best of several starts can clear the gain rule
        by chance where the rows are few (a 2,500-row fit of top-1 0.28 did). 0: no extra starts.
    confirm_below : int, default 2500
        Ours: with fewer rows a side than this, every pass is narrow: it counts only when another start reproduces it
        (on 1,000 rows a side, wrong starts cleared even ``restart_margin * GAIN_MIN`` on the fit's own rows and
        never reproduced each other). 0: off.
    vecmap_sample, vecmap_iter : int, default 3000, 100
        Rows per side and self-learning iterations of a VecMap start.
    polish_iter, polish_sample : int, default 10, 5000
        CSLS polish (VecMap's final phase; ours): iterations at most (0: off, as the paper) and rows per side.
    polish_stochastic_iter, polish_keep, polish_interval : int, float, int, default 0, 0.1, 3
        VecMap's stochastic dictionary induction before it (accepted start only; 0: off): iterations, initial keep
        probability [VecMap: 0.1], iterations without gain before it doubles [VecMap: 50].
    transport_iter, transport_beta : int, float, default 10, 20
        Last polish phase (ours; accepted start only; 0: off): rounds and inverse temperature of Procrustes on the
        entropic optimal-transport plan of the polish rows.
    mnn_refine : int, default 0
        Rounds of Procrustes on CSLS mutual nearest neighbours at the end (ours).
    n_jobs : int or None, default 2
        Later starts run this many at a time (threads, one BLAS thread each); the kept map is a one-by-one search's.

    Attributes
    ----------
    matrix_, source_mean_, target_mean_, scale_ : ``transform(x) = scale_ * (x - mu_A) @ W + mu_B``; the global
        ``scale_`` stands in for the paper's per-row normalisation (not linear).
    procrustes_ : an :class:`~vecbridge.align.OrthogonalProcrustes` of ``U V^T`` (``W = U S V^T``), for the artifact.
    history_, stage_matrices_, timings_ : per stage, the mean nearest-target cosine and change of W, W, seconds.
    restarts_, restart_, init_, validation_ : every start tried, and the kept one with its validation
        (``confirmed_by``: the start that reproduced it, ``reproduction``: the share of rows; ``reproductions`` of a
        start: its share with each earlier start compared).
    confirmation_ : None, or the evidence that an independent start reproduced the kept one (``start``, ``by``,
        ``reproduction``); ``procrustes_`` carries it to :func:`vecbridge.pairing.learned.check_map`.
    doubt_ : None, or why the kept start is in doubt: it passed the gain rule only narrowly (``gain`` below
        ``clear_gain``) and none of the other ``starts`` reproduced it, or no start passed at all (``passed``
        False: the best of the failures is kept, and its polish can lift it past the rule on the fit's own rows);
        ``procrustes_`` carries it to ``check_map``.
    anchors_src_, anchors_tgt_, qap_scores_, n_pairs_ : the matched centroids, each run's assignment objective, the
        number of pseudo-pairs of the initial Procrustes.
    refine1_n_iter_, refine1_objective_, refine1_probe_cosine_, kmeans_consistency_, polish_objective_,
    polish_n_stochastic_, vecmap_n_iter_, n_mnn_pairs_ : per-step diagnostics (iterations, objectives, pairs).
    singular_values_, orthogonality_gap_ : of W, and max |singular value - 1|.
    n_samples_src_, n_samples_tgt_, n_features_in_, n_features_out_ : rows seen per side; d_src, d_tgt.
    """

    _parameter_constraints = {
        "n_runs": Integer(1), "n_clusters": Integer(2), "qap_restarts": Integer(1), "qap_solver": OneOf(*QAP_SOLVERS),
        "similarity": OneOf(*SIMILARITIES), "kmeans_sample": Integer(1), "anchor_mode": OneOf(*ANCHOR_MODES),
        "n_neighbors": Integer(1), "refine1_iter": Integer(0), "refine1_sample": Integer(1),
        "refine1_neighbors": Integer(1), "refine1_tol": Real(0), "refine2_clusters": Integer(0),
        "refine2_iter": Integer(0), "alpha": Real(0, 1, low_open=True), "kmeans_max_iter": Integer(1),
        "max_samples": optional(Integer(1)), "orthogonalize": Boolean(), "backend": OneOf(*BACKENDS),
        "random_state": RandomState(), "mnn_refine": Integer(0), "init": OneOf(*INITS), "n_restarts": Integer(1),
        "restart_margin": Real(0), "vecmap_sample": Integer(20), "vecmap_iter": Integer(0), "polish_iter": Integer(0),
        "polish_sample": Integer(20), "polish_stochastic_iter": Integer(0), "polish_keep": Real(0, 1, low_open=True),
        "polish_interval": Integer(1), "transport_iter": Integer(0), "transport_beta": Real(0, low_open=True),
        "n_jobs": optional(Integer(1)), "confirm": Boolean(), "confirm_starts": Integer(0),
        "confirm_below": Integer(0),
    }

    def __init__(self, n_runs: int = 30, n_clusters: int = 20, qap_restarts: int = 30, qap_solver: str = "2opt",
                 similarity: str = "cosine", kmeans_sample: int = 10_000, anchor_mode: str = "relative",
                 n_neighbors: int = 50, refine1_iter: int = 100, refine1_sample: int = 1_000,
                 refine1_neighbors: int = 50, refine1_tol: float = 5e-4, refine2_clusters: int = 500,
                 refine2_iter: int = 1, alpha: float = 0.5, kmeans_max_iter: int = 30,
                 max_samples: int | None = 25_000, orthogonalize: bool = False, backend: str = "auto",
                 random_state=None, mnn_refine: int = 0, init: str = "auto", n_restarts: int = 4,
                 restart_margin: float = 1.5, vecmap_sample: int = 3000, vecmap_iter: int = 100,
                 polish_iter: int = 10, polish_sample: int = 5000, polish_stochastic_iter: int = 0,
                 polish_keep: float = 0.1, polish_interval: int = 3, transport_iter: int = 10,
                 transport_beta: float = 20.0, n_jobs: int | None = 2, confirm: bool = True,
                 confirm_starts: int = 2, confirm_below: int = 2500):
        self.n_runs = n_runs
        self.n_clusters = n_clusters
        self.qap_restarts = qap_restarts
        self.qap_solver = qap_solver
        self.similarity = similarity
        self.kmeans_sample = kmeans_sample
        self.anchor_mode = anchor_mode
        self.n_neighbors = n_neighbors
        self.refine1_iter = refine1_iter
        self.refine1_sample = refine1_sample
        self.refine1_neighbors = refine1_neighbors
        self.refine1_tol = refine1_tol
        self.refine2_clusters = refine2_clusters
        self.refine2_iter = refine2_iter
        self.alpha = alpha
        self.kmeans_max_iter = kmeans_max_iter
        self.max_samples = max_samples
        self.orthogonalize = orthogonalize
        self.backend = backend
        self.random_state = random_state
        self.mnn_refine = mnn_refine
        self.init = init
        self.n_restarts = n_restarts
        self.restart_margin = restart_margin
        self.vecmap_sample = vecmap_sample
        self.vecmap_iter = vecmap_iter
        self.polish_iter = polish_iter
        self.polish_sample = polish_sample
        self.polish_stochastic_iter = polish_stochastic_iter
        self.polish_keep = polish_keep
        self.polish_interval = polish_interval
        self.transport_iter = transport_iter
        self.transport_beta = transport_beta
        self.n_jobs = n_jobs
        self.confirm = confirm
        self.confirm_starts = confirm_starts
        self.confirm_below = confirm_below

    # --- checks -----------------------------------------------------------------------------------------------------
    def _validate_params(self):
        """The declared constraints, then the two that tie parameters together."""
        super()._validate_params()
        if self.refine2_iter > 0 and self.refine2_clusters < 2:
            raise InputError("MiniVec2Vec: refine2_clusters must be at least 2 when refine2_iter > 0")
        if self.kmeans_sample < 2 * self.n_clusters:
            raise InputError(f"MiniVec2Vec: kmeans_sample={self.kmeans_sample} is too small for "
                             f"n_clusters={self.n_clusters} (needs at least {2 * self.n_clusters})")

    def _check_sizes(self, n: int, side: str):
        """Every clustering and neighbour step needs enough rows; name the parameter that asks for the most."""
        needs = {"n_clusters": 2 * self.n_clusters, "n_neighbors": self.n_neighbors,
                 "refine1_neighbors": self.refine1_neighbors if self.refine1_iter else 0,
                 "refine2_clusters": self.refine2_clusters if self.refine2_iter else 0}
        name, need = max(needs.items(), key=lambda kv: kv[1])
        usable = min(n, self.max_samples) if self.max_samples else n
        if usable < need:
            capped = "" if usable == n else f" (max_samples={self.max_samples})"
            raise InputError(f"{side} has {n} vectors{capped}: too few for {name}={getattr(self, name)} (mini-vec2vec "
                             f"needs at least {need} per side here; lower {name} or give more vectors)")

    # --- fitting ------------------------------------------------------------------------------------------------------
    def fit(self, X_src, X_tgt):
        """Fit from two *unpaired* samples (rows of X_src and X_tgt are different items). Returns self."""
        self._validate_params()
        X_src = check_vectors(X_src, "X_src", dtype=np.float32)
        X_tgt = check_vectors(X_tgt, "X_tgt", dtype=np.float32)
        self._check_sizes(X_src.shape[0], "X_src")
        self._check_sizes(X_tgt.shape[0], "X_tgt")
        rng = np.random.default_rng(self.random_state)
        # independent streams per step, so changing one step's settings does not reshuffle the others
        r_cap, r_anchor, r_refine1, r_refine2, r_diag = rng.spawn(5)
        mu_a, mu_b, A, B = self._preprocess(X_src, X_tgt, r_cap)
        lap = _Laps()
        self.timings_ = lap.seconds
        W, accepted = self._search(A, B, rng, (r_anchor, r_refine1), r_diag, lap)
        W = self._refine2(A, B, W, r_refine2, r_diag)
        lap("refine2")
        W = self._polish_stages(A, B, W, r_refine2, r_diag, accepted, lap)
        W = self._mnn_refine(A, B, W, r_diag, lap)
        if self.orthogonalize:
            W = polar(W)
        self._finish(W, X_src, X_tgt, mu_a, mu_b, r_diag)
        return self

    def _preprocess(self, X_src, X_tgt, rng):
        """Section 3.1: each side centred on its own mean, rows scaled to unit length, then capped at ``max_samples``
        rows. Returns ``(mu_a, mu_b, A, B)``."""
        mu_a = X_src.mean(axis=0, dtype=np.float64)
        mu_b = X_tgt.mean(axis=0, dtype=np.float64)
        A = l2_normalize(X_src - mu_a.astype(np.float32))
        B = l2_normalize(X_tgt - mu_b.astype(np.float32))
        return mu_a, mu_b, self._cap(A, rng), self._cap(B, rng)

    def _search(self, A, B, rng, first_streams, r_diag, lap):
        """Sections 3.2-3.4 up to Refine-1 for each start of the schedule; with several starts the label-free
        validation keeps one (ours). Restores the kept start's run state; returns ``(W, accepted)``."""
        schedule = self._schedule()
        self.restarts_ = []
        if min(len(A), len(B)) < MIN_ROWS:
            schedule = schedule[:1]          # too few rows to validate: one start, no choice to make
        judge = _Judge(A, B, rng.spawn(1)[0], self.backend) if len(schedule) > 1 else None
        self._few = bool(self.confirm and min(len(A), len(B)) < self.confirm_below)
        if judge is not None:
            lap("validation")
        # every start's random streams, drawn up front in the order a one-after-another search draws them, so that
        # starts run side by side give the same maps
        streams = [first_streams] + [tuple(rng.spawn(2)) for _ in schedule[1:]]
        diag = [r_diag] + list(rng.spawn(len(schedule) - 1))
        done = []

        def decide(result) -> bool:
            """Take one start's result in schedule order; True when the search stops there: a clear pass, or a
            start short of the gain rule that another start reproduces (``confirm``)."""
            W, state, record, seconds = result
            lap.add(seconds)
            self.restarts_.append(record)
            newly = (judge is not None and self.confirm and _confirm(record, W, [(d[0], d[2]) for d in done], judge))
            done.append((W, state, record))
            if self._few:    # few rows: only a reproduced pass settles the search
                return judge is None or newly or (record["passed"] and record.get("confirmed_by") is not None)
            return judge is None or newly or (record["passed"] and record["gain"] >= self.restart_margin * GAIN_MIN)

        def start(i, stop=None):
            return self._start(i, *schedule[i], A, B, *streams[i], diag[i], judge, stop)

        if not decide(start(0)):
            self._later_starts(start, decide, range(1, len(schedule)))
        if judge is not None and self.confirm and self.confirm_starts and self._narrow(self._kept(done)):
            # a narrow pass nothing reproduced: more starts (the schedule continued, streams drawn as a longer
            # search would draw them next) look for one that reproduces it or passes clearly
            more = self._schedule(len(schedule) + self.confirm_starts)[len(schedule):]
            streams += [tuple(rng.spawn(2)) for _ in more]
            diag += list(rng.spawn(len(more)))
            first = len(schedule)
            schedule = schedule + more

            def settled(result) -> bool:
                decide(result)
                return not self._narrow(self._kept(done))

            self._later_starts(start, settled, range(first, len(schedule)))
        lap.restart()
        W, state, chosen = self._kept(done)
        self._restore_run_state(state)
        self.restart_ = int(chosen["restart"])
        self.init_ = chosen["init"]
        self.validation_ = self.confirmation_ = self.doubt_ = None
        failed = judge is not None and _restart_key(chosen)[0] == 0   # no start passed: the best of the failures
        if failed or (judge is not None and self.confirm and self._narrow((W, state, chosen))):
            self.doubt_ = {"start": f"{chosen['init']} start #{chosen['restart']}", "gain": round(chosen["gain"], 4),
                           "clear_gain": None if self._few else round(self.restart_margin * GAIN_MIN, 4),
                           "starts": len(done), "rows": int(min(len(A), len(B))), "passed": not failed}
        if judge is not None:
            self.validation_ = {k: chosen.get(k) for k in ("score", "gain", "agreement", "passed", "confirmed_by",
                                                           "reproduction")}
            if chosen.get("confirmed_by") is not None:
                by = self.restarts_[chosen["confirmed_by"]]
                self.confirmation_ = {"start": f"{chosen['init']} start #{chosen['restart']}",
                                      "by": f"{by['init']} start #{by['restart']}",
                                      "reproduction": round(float(chosen["reproduction"]), 4)}
        return W, judge is None or _restart_key(chosen)[0] == 1

    def _kept(self, done: list) -> tuple:
        """The start a search keeps among ``done`` (``(W, state, record)``): :func:`_restart_key`'s best, the first
        of equals; where that one is a narrow pass no start reproduced, the best start another one reproduced."""
        best = max(done, key=lambda d: _restart_key(d[2]))
        sure = [d for d in done if d[2].get("confirmed_by") is not None]
        return max(sure, key=lambda d: _restart_key(d[2])) if sure and self._narrow(best) else best

    def _narrow(self, kept: tuple) -> bool:
        """A kept start that passed the gain rule, but not by ``restart_margin``, and that no other start
        reproduced."""
        record = kept[2]
        return bool(record.get("passed")) and record.get("confirmed_by") is None and \
            (self._few or record["gain"] < self.restart_margin * GAIN_MIN)

    def _later_starts(self, start, decide, rest: range):
        """The starts ``rest`` until ``decide`` stops the search: side by side with ``n_jobs > 1`` (one BLAS thread
        each; results taken in schedule order, so it stops where one after another would); unneeded starts stop at
        their next check."""
        with contextlib.ExitStack() as side_by_side:
            workers = min(self._workers(), len(rest))
            if workers > 1:
                stop = threading.Event()
                side_by_side.enter_context(one_blas_thread())
                pool = side_by_side.enter_context(ThreadPoolExecutor(workers))
                futures = [pool.submit(start, i, stop) for i in rest]

                def abandon():
                    stop.set()
                    for future in futures:
                        future.cancel()

                side_by_side.callback(abandon)
                results = (f.result() for f in futures)
            else:
                results = (start(i) for i in rest)
            for result in results:
                if decide(result):
                    break

    def _refine2(self, A, B, W, rng, r_diag):
        """Section 3.4 Refine-2: k-means on the source, k-means on the target started at the mapped source centroids
        ``C_A @ W``, Procrustes on the centroid pairs, smoothed; ``refine2_iter`` times (the paper: once)."""
        self.kmeans_consistency_ = None
        for _ in range(self.refine2_iter):
            W_prev = W
            C_a = kmeans(A, self.refine2_clusters, rng, max_iter=self.kmeans_max_iter, backend=self.backend)[0]
            C_b = kmeans(B, self.refine2_clusters, rng, init=C_a @ W, max_iter=self.kmeans_max_iter,
                         backend=self.backend)[0]
            last = procrustes_rotation(C_a, C_b)
            W = (1.0 - self.alpha) * W + self.alpha * last
            self.kmeans_consistency_ = float(np.mean(np.einsum(
                "ij,ij->i", l2_normalize(C_a @ W), l2_normalize(C_b))))
            self.history_.append(self._diagnose("refine2", A, B, W, W_prev, r_diag))
        self.stage_matrices_["refine2"] = W
        return W

    def _polish_stages(self, A, B, W, rng, r_diag, accepted: bool, lap):
        """Ours: the CSLS polish, then Procrustes on an entropic transport plan; the stochastic phase and the
        transport only for an accepted start (a refused map sits in a wrong basin no polish leaves)."""
        self.polish_objective_ = []
        self.polish_n_stochastic_ = 0
        if self.polish_iter:
            a, b = self._polish_rows(A, rng), self._polish_rows(B, rng)
            W_prev = W
            W = self._polish(a, b, W, rng, stochastic=accepted)
            self.history_.append(self._diagnose("polish", A, B, W, W_prev, r_diag))
            self.stage_matrices_["polish"] = W
            lap("polish")
        if self.polish_iter and self.transport_iter and accepted:
            W_prev = W
            W = transport_procrustes(a, b, W, n_iter=self.transport_iter, beta=self.transport_beta)
            self.history_.append(self._diagnose("transport", A, B, W, W_prev, r_diag))
            self.stage_matrices_["transport"] = W
            lap("transport")
        return W

    def _mnn_refine(self, A, B, W, r_diag, lap):
        """Ours, off by default: ``mnn_refine`` rounds of Procrustes on the CSLS mutual nearest neighbours the current
        map makes (the classic last step of unsupervised cross-lingual mapping)."""
        self.n_mnn_pairs_ = []
        for _ in range(int(self.mnn_refine)):
            W_prev = W
            pairs = mutual_nearest_neighbours(A @ W.astype(np.float32), B, k_csls=10)[0]
            self.n_mnn_pairs_.append(int(len(pairs)))
            if len(pairs) < min(A.shape[1], B.shape[1]):
                break
            W = procrustes_rotation(A[pairs[:, 0]], B[pairs[:, 1]])
            self.history_.append(self._diagnose("mnn", A, B, W, W_prev, r_diag))
        if self.n_mnn_pairs_:
            self.stage_matrices_["mnn"] = W
            lap("mnn")
        return W

    def _polish_rows(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Up to ``polish_sample`` rows of one side, drawn once for the polish and the transport refinement."""
        return X if len(X) <= self.polish_sample else X[rng.choice(len(X), self.polish_sample, replace=False)]

    def _polish(self, a, b, W, rng, stochastic: bool):
        """VecMap's self-learning from ``W`` on the polish rows: Procrustes on every row's CSLS best match both ways;
        with ``stochastic``, stochastic dictionary induction first; then until the objective gains < 1e-4."""
        n_stochastic = self.polish_stochastic_iter if stochastic and self.polish_keep < 1.0 else 0
        if n_stochastic:   # VecMap's self-learning with a short stall interval, bounded to n_stochastic iterations
            W, objectives, _ = self_learning(a, b, W, rng, max_iter=n_stochastic, k=10,
                                             stochastic_initial=self.polish_keep,
                                             stochastic_interval=self.polish_interval)
            self.polish_objective_.extend(objectives.tolist())
        self.polish_n_stochastic_ = len(self.polish_objective_)
        last = -np.inf
        for _ in range(self.polish_iter):   # VecMap's final phase: no dropout, until the objective stops gaining
            src, tgt, obj = csls_dictionary(*mapped_factors(a, b, W), k=10)
            self.polish_objective_.append(obj)
            if obj < last + 1e-4:
                break
            last = obj
            W = procrustes_rotation(a[src], b[tgt])
        return W

    # --- restarts (ours) ----------------------------------------------------------------------------------------
    def _start(self, i, kind, n_clusters, A, B, r_start, r_ref, r_diag, judge, stop):
        """Start ``i`` through Refine-1 and its validation, on a copy of the estimator (its own run state, so starts
        can run side by side). Returns ``(W, run state, record, seconds per stage)``; raises :class:`_Stopped` once
        ``stop`` is set."""
        run = copy.copy(self)
        run._stop = stop
        lap = _Laps()
        run._reset_run_state()
        if kind == "centroids":
            W = run._centroid_start(A, B, n_clusters, r_start, r_diag, lap)
        else:
            W = run._vecmap_start(A, B, r_start, r_diag)
            lap("vecmap")
        W = run._refine1(A, B, W, r_ref, r_diag)
        run.stage_matrices_["refine1"] = W
        lap("refine1")
        record = {"restart": i, "init": kind, "n_clusters": n_clusters if kind == "centroids" else None}
        if judge is not None:
            run._check_stop()
            v = judge.validate(W)
            lap("validation")
            record.update(score=v.score, gain=v.gain, agreement=v.agreement, passed=v.passed)
        record["seconds"] = float(sum(lap.seconds.values()))
        return W, run._run_state(), record, lap.seconds

    _stop = None   # the event a start running beside others checks (set on its copy of the estimator)
    _few = False   # fewer rows a side than ``confirm_below``: a pass counts only when reproduced

    def _check_stop(self):
        if self._stop is not None and self._stop.is_set():
            raise _Stopped

    def _workers(self) -> int:
        return max(1, min(int(self.n_jobs or 1), os.cpu_count() or 1))

    def _schedule(self, n_starts: int | None = None) -> list:
        """``(init, n_clusters)`` of the first ``n_starts`` starts (default ``n_restarts``), in order: the paper's
        start first; ``"auto"`` then alternates two VecMap starts and a centroid matching with other cluster counts
        (1.5x, 1x, 2x ``n_clusters``)."""
        counts = [self.n_clusters, int(round(1.5 * self.n_clusters)), self.n_clusters, 2 * self.n_clusters]
        out, c = [], 0
        for i in range(self.n_restarts if n_starts is None else n_starts):
            if self.init == "vecmap" or (self.init == "auto" and i % 3 != 0):
                out.append(("vecmap", None))
            else:
                out.append(("centroids", counts[c % len(counts)]))
                c += 1
        return out

    _RUN_STATE = ("history_", "stage_matrices_", "anchors_src_", "anchors_tgt_", "qap_scores_", "n_pairs_",
                  "refine1_n_iter_", "refine1_objective_", "refine1_probe_cosine_", "vecmap_n_iter_")

    def _reset_run_state(self):
        self.history_, self.stage_matrices_ = [], {}
        self.anchors_src_ = self.anchors_tgt_ = self.qap_scores_ = self.vecmap_n_iter_ = None

    def _run_state(self) -> dict:
        return {k: getattr(self, k, None) for k in self._RUN_STATE}

    def _restore_run_state(self, state: dict):
        for k, v in state.items():
            setattr(self, k, v)

    def _centroid_start(self, A, B, n_clusters, rng, r_diag, lap):
        """Sections 3.2-3.3: matched centroids, pseudo-pairs, initial Procrustes."""
        anc_a, anc_b, scores = self._anchors(A, B, rng, n_clusters)
        lap("matching")
        self.anchors_src_, self.anchors_tgt_, self.qap_scores_ = anc_a, anc_b, np.asarray(scores)
        if self.anchor_mode == "relative":
            R_a = A @ l2_normalize(anc_a).T
            R_b = B @ l2_normalize(anc_b).T
            nbr = knn(R_a, R_b, self.n_neighbors, backend=self.backend)[0]
            P, Q = A, _neighbour_mean(B, nbr)
        else:
            P, Q = anc_a, anc_b
        W = procrustes_rotation(P, Q)
        self.n_pairs_ = int(P.shape[0])
        self.history_.append(self._diagnose("initial", A, B, W, None, r_diag))
        self.stage_matrices_["initial"] = W
        lap("initial")
        return W

    def _vecmap_start(self, A, B, rng, r_diag):
        """VecMap's similarity-distribution initialisation and stochastic self-learning (:mod:`.vecmap`)."""
        W, info = fit_vecmap(A, B, rng, n_init=self.vecmap_sample, n_sample=self.vecmap_sample,
                             max_iter=self.vecmap_iter, check=self._check_stop)
        self.vecmap_n_iter_ = info["n_iter"]
        self.n_pairs_ = int(2 * min(self.vecmap_sample, len(A), len(B)))
        self.history_.append(self._diagnose("initial", A, B, W, None, r_diag))
        self.stage_matrices_["initial"] = W
        return W

    def _cap(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.max_samples is None or X.shape[0] <= self.max_samples:
            return X
        return X[np.sort(rng.choice(X.shape[0], self.max_samples, replace=False))]

    def _anchors(self, A: np.ndarray, B: np.ndarray, rng: np.random.Generator, n_clusters: int):
        """Section 3.2: ``n_runs`` x (k-means on each side, centroid similarities, QAP), matched centroids stacked."""
        anc_a, anc_b, scores = [], [], []
        n_clusters = min(n_clusters, len(A) // 2, len(B) // 2)
        for _ in range(self.n_runs):
            self._check_stop()
            sub_a, sub_b = self._subsample(A, rng), self._subsample(B, rng)
            C_a = kmeans(sub_a, n_clusters, rng, max_iter=self.kmeans_max_iter, backend=self.backend)[0]
            C_b = kmeans(sub_b, n_clusters, rng, max_iter=self.kmeans_max_iter, backend=self.backend)[0]
            S_a, S_b = _centroid_similarity(C_a, self.similarity), _centroid_similarity(C_b, self.similarity)
            if self.qap_solver == "2opt":
                perm, score = qap_2opt(S_a, S_b, n_restarts=self.qap_restarts, rng=rng)
            else:
                perm, score = _qap_scipy(S_a, S_b, self.qap_restarts, rng)
            anc_a.append(C_a)
            anc_b.append(C_b[perm])
            scores.append(score)
        return np.vstack(anc_a), np.vstack(anc_b), scores

    def _subsample(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if X.shape[0] <= self.kmeans_sample:
            return X
        return X[rng.choice(X.shape[0], self.kmeans_sample, replace=False)]

    def _refine1(self, A, B, W, rng, r_diag):
        """Section 3.4 Refine-1 (listing 2), stopping early once a fixed probe's mean nearest-target cosine gains
        less than ``refine1_tol`` over ``REFINE1_WINDOW`` iterations (label-free, without the sampling noise of the
        per-iteration objective; the paper reports Refine-1 monotone, converging to a stationary point)."""
        n_s = min(self.refine1_sample, A.shape[0])
        probe = A[rng.choice(A.shape[0], min(REFINE1_PROBE, A.shape[0]), replace=False)]

        def probe_cosine(W):
            return float(knn(probe @ W.astype(np.float32), B, 1, backend=self.backend)[1].mean())

        objective = []
        checks = [probe_cosine(W)] if self.refine1_iter else []
        W_start = W
        for t in range(self.refine1_iter):
            self._check_stop()
            idx = rng.choice(A.shape[0], n_s, replace=False)
            Xs = A[idx]
            nbr, sims = knn(Xs @ W.astype(np.float32), B, self.refine1_neighbors, backend=self.backend)
            objective.append(float(sims.mean()))
            W_new = procrustes_rotation(Xs, _neighbour_mean(B, nbr))
            W = (1.0 - self.alpha) * W + self.alpha * W_new
            if self.refine1_tol > 0 and (t + 1) % REFINE1_WINDOW == 0:
                checks.append(probe_cosine(W))
                if t + 1 >= REFINE1_MIN_ITER and checks[-1] - checks[-2] < self.refine1_tol:
                    break
        self.refine1_n_iter_ = len(objective)
        self.refine1_objective_ = np.asarray(objective)
        self.refine1_probe_cosine_ = np.asarray(checks)
        if self.refine1_iter:
            self.history_.append(self._diagnose("refine1", A, B, W, W_start, r_diag))
        return W

    def _diagnose(self, stage, A, B, W, W_prev, rng, n: int = 1000) -> dict:
        """Label-free progress: mean cosine of mapped source rows to their nearest target row (extraction 6.10)."""
        idx = rng.choice(A.shape[0], min(n, A.shape[0]), replace=False)
        sims = knn(A[idx] @ W.astype(np.float32), B, 1, backend=self.backend)[1][:, 0]
        out = {"stage": stage, "mean_nn_cosine": float(sims.mean())}
        if W_prev is not None:
            out["w_change"] = float(np.linalg.norm(W - W_prev) / math.sqrt(min(W.shape)))
        return out

    def _finish(self, W, X_src, X_tgt, mu_a, mu_b, rng, n: int = 20_000):
        W = np.asarray(W, dtype=np.float64)
        with one_blas_thread():
            U, svals, Vt = np.linalg.svd(W, full_matrices=False)
        self.singular_values_ = svals
        self.orthogonality_gap_ = float(np.max(np.abs(svals - 1.0)))
        # The paper maps normalize(x - mu_A) @ W. Linear stand-in for the per-row normalisation: one global scale
        # giving the mapped centred source rows the mean centred norm of the target rows (measured on <= n rows).
        ia = rng.choice(X_src.shape[0], min(n, X_src.shape[0]), replace=False)
        ib = rng.choice(X_tgt.shape[0], min(n, X_tgt.shape[0]), replace=False)
        mapped_norm = np.linalg.norm((X_src[ia] - mu_a.astype(np.float32)) @ W.astype(np.float32), axis=1).mean()
        target_norm = np.linalg.norm(X_tgt[ib] - mu_b.astype(np.float32), axis=1).mean()
        self.matrix_ = W
        self.source_mean_ = mu_a
        self.target_mean_ = mu_b
        self.scale_ = float(target_norm / mapped_norm) if mapped_norm > 0 else 1.0
        self.n_samples_src_ = int(X_src.shape[0])
        self.n_samples_tgt_ = int(X_tgt.shape[0])
        self.n_features_in_ = int(W.shape[0])
        self.n_features_out_ = int(W.shape[1])
        self.procrustes_ = self._orthogonal_version(U @ Vt, svals, X_src, X_tgt, mu_a, mu_b, ia, ib)

    def _orthogonal_version(self, R, svals, X_src, X_tgt, mu_a, mu_b, ia, ib) -> OrthogonalProcrustes:
        """An OrthogonalProcrustes holding the nearest orthogonal map to W (``R = U V^T``) with this map's means and
        its own global scale, so that ``Alignment.from_estimator`` (which knows the package's estimator kinds) can
        freeze it. No pair was fitted: ``n_pairs_`` is the number of pseudo-pairs of the initial transformation."""
        op = OrthogonalProcrustes(center=True, scale=True)
        mapped_norm = np.linalg.norm((X_src[ia] - mu_a.astype(np.float32)) @ R.astype(np.float32), axis=1).mean()
        target_norm = np.linalg.norm(X_tgt[ib] - mu_b.astype(np.float32), axis=1).mean()
        op.matrix_ = op.rotation_ = R
        op.source_mean_, op.target_mean_ = mu_a, mu_b
        op.scale_ = float(target_norm / mapped_norm) if mapped_norm > 0 else 1.0
        op.n_pairs_ = self.n_pairs_
        op.n_features_in_, op.n_features_out_ = self.n_features_in_, self.n_features_out_
        op.singular_values_ = svals
        op.rank_ = int(np.sum(svals > svals[0] * max(R.shape) * np.finfo(float).eps))
        op.is_projection_ = self.n_features_in_ > self.n_features_out_
        op.confirmation_ = getattr(self, "confirmation_", None)
        op.doubt_ = getattr(self, "doubt_", None)
        return op

    # --- applying -------------------------------------------------------------------------------------------------
    @property
    def inverse_matrix_(self) -> np.ndarray:
        """Target -> source: ``W^T``. W is an exponentially smoothed average of orthogonal maps, so ``W^T`` is the same
        average of their inverses (a pseudo-inverse would blow up the directions the smoothing shrank)."""
        self._check_fitted()
        return self.matrix_.T
