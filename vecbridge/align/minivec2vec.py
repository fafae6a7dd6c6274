"""Unsupervised alignment without any pairs: mini-vec2vec (the mini-vec2vec paper (Dar, 2025), Dar 2025), extended to
unequal dimensions.

Two collections embedded by two models share *no* item and *no* id; only their geometry is shared ("universal
geometry", the mini-vec2vec paper (Dar, 2025) section 2). :class:`MiniVec2Vec` finds a linear, (softly) orthogonal map
from the source space
to the target space from the two unpaired samples alone, step by step as in the paper (listings 1 and 2):

1. **Preprocessing** (section 3.1): centre each side on its own mean, scale every row to unit length.
2. **Approximate matching** (section 3.2): ``n_runs`` times, k-means with ``n_clusters`` on a fresh subsample of each
   side, centroid-centroid similarity matrices ``S_A``, ``S_B``, and the permutation maximising
   ``sum_ij S_A[i, j] S_B[p(i), p(j)]`` (a quadratic assignment problem, approximated by 2-opt local search from
   ``qap_restarts`` random starts, best objective kept). The matched centroids of all runs are the anchors.
3. **Relative representations and kNN pseudo-pairs** (sections 3.2 "Option 1" and 3.3): every vector becomes its
   cosines to its own side's anchors (``n_runs * n_clusters`` numbers); each source vector is paired with the
   uniform mean of the ``n_neighbors`` target vectors nearest to it in that shared relative space (mean taken in the
   absolute target space). ``anchor_mode="centroids"`` is the paper's "centroid-only" Option 2 (the matched
   centroids themselves are the pairs).
4. **Initial transformation** (section 3.3): orthogonal Procrustes on the pseudo-pairs
   (:class:`vecbridge.align.OrthogonalProcrustes`, row convention ``X @ W``; the paper's ``W* = V U^T`` is the same
   map in column convention).
5. **Refine-1** (section 3.4, listing 2): iterative closest point: map a random sample of ``refine1_sample`` source
   vectors, average their ``refine1_neighbors`` cosine-nearest target vectors (now in the absolute target space),
   Procrustes, and exponential smoothing ``W <- (1 - alpha) W + alpha W_new``; ``refine1_iter`` iterations.
6. **Refine-2** (section 3.4): k-means with ``refine2_clusters`` on the source, k-means on the target initialised
   at the mapped source centroids ``C_A @ W``, Procrustes on the centroid pairs, the same smoothing; **once**
   (``refine2_iter=1``; the paper finds two or more slightly worse).

The result ``W`` is an exponentially smoothed average of orthogonal matrices: softly orthogonal, never
re-orthogonalised (paper section 3, "Motivation"), unless ``orthogonalize=True``.

Applying the map (the paper maps ``normalize(x - mu_A) @ W`` into the *centred, normalised* target space; section
3.1 and the extraction's 6.1). To be a :class:`~vecbridge.align.base.LinearTransform` that a store migration and
the alignment artifact can apply to raw vectors, :meth:`transform` is the affine map
``y = scale_ * (x - mu_A) @ W + mu_B``: it adds the target mean back (not in the paper) and replaces the per-row
normalisation by one global ``scale_ = mean ||x_B - mu_B|| / mean ||(x_A - mu_A) W||`` over the training rows (not
in the paper; per-row normalisation is not linear). Cosine retrieval against raw target vectors is what a user gets;
the benchmark reports both that and the paper's centred protocol (``bench/minivec2vec.py``).

Extension to unequal dimensions (not in the paper, which assumes one dimension d and a square orthogonal W,
section 3 "Problem Formulation" and "Motivation"). Where it departs:

* Steps 1-3 never compare a source vector with a target vector directly: centroids, similarity matrices (C x C),
  the QAP and the relative representations (n x s*C) are computed *within* each space, so they are unchanged.
* Every Procrustes step (4, 5, 6) solves the padded problem of the Procrustes-bounds paper (2025) (thin SVD of the
  ``d_src x d_tgt`` matrix
  ``P^T Q``, as :class:`~vecbridge.align.OrthogonalProcrustes` does): ``W`` has orthonormal rows when
  ``d_src <= d_tgt`` (an isometric embedding, ``W W^T = I`` but not ``W^T W = I``) and orthonormal columns when
  ``d_src > d_tgt`` (a projection that drops ``d_src - d_tgt`` source directions, ``W^T W = I`` only). The paper's
  "W W^T = W^T W = I" therefore holds on one side only.
* Smoothing averages these rectangular matrices exactly as the square ones; Refine-2 initialises the target
  k-means at ``C_A @ W`` in the target dimension, unchanged.
* The inverse map is ``W^T`` (the smoothed average of the inverses of the averaged orthogonal maps; for a
  rectangular W the adjoint, as in the Procrustes-bounds paper's padding), and ``scale_`` measures the mapped norm
  after ``W``, so a
  projection's shrinkage is compensated.

Departures from the paper that are not about dimensions (each measured; numbers in ``bench/minivec2vec.py``'s
results and the class docstring):

* k-means is the package's own seeded Lloyd with greedy k-means++ seeding (:func:`vecbridge.numeric.kmeans.kmeans`:
  scikit-learn's algorithm, which the paper used; scikit-learn is not a dependency here), capped at
  ``kmeans_max_iter=30`` Lloyd iterations (scikit-learn: 300).
* The QAP is approximated by a vectorised *best*-improvement 2-opt over pairwise swaps, all restarts at once;
  scipy's ``quadratic_assignment(method="2opt")``, which the paper used, takes the *first* improving swap. Same
  neighbourhood, both end in a 2-opt local optimum; on 40 noisy 20-centroid problems the two found the planted
  matching equally often (12 vs 13 at 16-d, 15 vs 8 at 48-d) while this one was 60x faster (whole ensemble: ~0.5 s
  instead of ~45 s). ``qap_solver="scipy"`` runs scipy's.
* Ambiguities resolved as the extraction recommends: centroid similarity = cosine (the paper; the official code's
  double-centred Gram is ``similarity="gram"``); kNN in relative space = cosine between relative vectors (the code);
  k-means subsample = 10,000 rows per side and run (the code; the paper is silent); Refine-1 sample = 1,000 rows (the
  code; the paper says 10,000); each side's mean from its own rows only (the code mixes both halves).
* Refine-1 stops early once it has converged (``refine1_tol``; the paper always runs 50-100 iterations).
* ``max_samples`` caps the rows used by the quadratic steps on large collections (the paper ran 25,904 per side).
* The affine output (mean added back, one global scale) described above.

Robustness (ours, on by default; ``n_restarts=1, init="centroids", polish_iter=0`` is the paper's single run). The
centroid matching of step 2 is sometimes wrong as a whole, and Refine-1 then converges to a wrong map (top-1 of the
true partner 0.016 / 0.021 / 0.748 on FOLDOC minilm6 -> minilm3 for seeds 0-2, 0.006 / 0.020 / 0.004 the other way;
with restarts and VecMap starts 0.859 / 0.849 / 0.838 and 0.094 / 0.891 / 0.884; ``bench/unsupervised_restarts.py``).
So:

* **Restarts** (``n_restarts``, default 4): several starts, each through Refine-1, judged by the label-free criterion
  of :mod:`vecbridge.align.validation` on a sample of the fit's own rows (gain of the refined map over refined random
  maps, and agreement with its refined version; the null maps are computed once per fit). The first start that
  passes with ``gain >= restart_margin * GAIN_MIN`` stops the search; otherwise the best (passing first, then the
  larger gain) is kept, and only it goes through Refine-2. ``init="auto"`` alternates the paper's centroid matching
  (fresh k-means and QAP, ``n_clusters``, then 1.5x, 1x, 2x clusters) and VecMap starts: c, v, v, c, v, v, ...
* **Starts side by side** (``n_jobs``, default 2): once the first start has not settled the search, the others run
  two at a time (threads, one BLAS thread each); their results are taken in schedule order, so the kept start and
  its map are those of a one-after-another search. A start still running when an earlier one settles the search
  stops at its next check (every centroid matching run, self-learning or Refine-1 iteration).
* **VecMap starts** (:mod:`vecbridge.align.vecmap`; "A robust self-learning method for fully unsupervised
  cross-lingual mappings of word embeddings", Artetxe et al., ACL 2018): similarity-distribution profiles and
  stochastic self-learning, which need no centroid matching at all.
* **Polish** (``polish_iter``, default 10): after Refine-2, VecMap's final phase (Procrustes on the bidirectional
  CSLS dictionary, no dropout) on up to ``polish_sample`` rows per side, until its objective gains < 1e-4.
  Measured (4,000 + 4,000 disjoint items): top-1 0.939 -> 0.971 (WordNet minilm6 -> mpnet) and 0.863 -> 0.916
  (FOLDOC mpnet -> minilm6); ``mnn_refine`` (mutual pairs only) reached 0.961 and 0.894.
* **Stochastic polish** (``polish_stochastic_iter``, off by default; ``polish_keep``, ``polish_interval``): before
  that final phase, and only for a start the validation accepts, VecMap's stochastic dictionary induction (each
  similarity kept with probability 0.1, doubled after 3 iterations without an objective gain; the paper waits 50
  iterations, too slow for a polish), which lets the polish leave the first fixed point it meets. Measured at 45
  iterations on every sentence-encoder pair of both corpora, 3 seeds: 23 of 36 fits up (WordNet median +0.004,
  FOLDOC +0.011), 5 down by at most 0.004, for 36-47 s more per 10,000 + 10,000 fit. The transport phase below
  gains more in less time, so this phase was the default before it and is off now.
* **Transport polish** (``transport_iter``, default 10; ``transport_beta``, default 20): after the CSLS polish, for
  a start the validation accepts, Procrustes on the entropic optimal-transport plan between the mapped polish rows
  and the target's (Sinkhorn's scaling, "Sinkhorn Distances", Cuturi, 2013; the coupling of Wasserstein Procrustes,
  "Unsupervised Alignment of Embeddings with Wasserstein Procrustes", Grave et al., AISTATS 2019). A nearest-neighbour
  dictionary pairs each row with one similar item and lets hub rows take many matches; the plan spreads every row's
  mass over its plausible matches with each row's total fixed, so the refit averages out the error of any single
  match. Measured on the same 36 fits, against the stochastic polish it replaces as the default: 27 up, 2 down
  (WordNet minilm3 -> mpnet -0.022 on one seed, mpnet -> minilm3 -0.008), the 7 refused fits unchanged; medians
  WordNet 0.970 -> 0.978, FOLDOC 0.890 -> 0.912. It costs 4-8 s of a 10,000 + 10,000 fit.

What limits every label-free refinement here (measured, ``bench/unsupervised_restarts.py --ceiling``): with disjoint
items on the two sides, a dictionary pairs each row with a *similar* item, never its partner, so the fixed points of
self-learning sit below the supervised ceiling, and the gap shrinks as rows are added (WordNet minilm3 -> mpnet,
deterministic polish started at the ceiling map: 0.755 / 0.871 / 0.919 at 1,000 / 2,000 / 4,000 rows per side,
ceiling 0.937 / 0.960 / 0.970; FOLDOC minilm6 -> minilm3: 0.784 / 0.907 / 0.958, ceiling 0.986-0.990). Other
refinements started at the ceiling map stop no closer (WordNet minilm3 -> mpnet, ceiling 0.970): MUSE's Procrustes
on CSLS mutual nearest neighbours iterated to convergence ("Word Translation Without Parallel Data", Conneau et al.,
ICLR 2018) 0.894, an exact one-to-one assignment (Hungarian) 0.917, an entropic optimal-transport plan 0.894-0.907,
and VecMap's whitening, symmetric re-weighting and de-whitening on the final dictionary 0.870 in its own shared space
(it also transforms the target side, which a migration into the raw target space cannot do).
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
from .validation import GAIN_MIN, MAX_ROWS, MIN_ROWS, null_distribution, validate_map
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
    """Approximate QAP for symmetric A, B: 2-opt local search over pairwise swaps from ``n_restarts`` random
    permutations, best objective kept (the mini-vec2vec paper (Dar, 2025) section 4: "re-run the 2-OPT alignment
    algorithm 30 times and choose
    the permutation with the highest alignment score").

    All restarts run together and every step evaluates all ``n(n-1)/2`` swaps at once in closed form, then takes
    the best improving one (best-improvement 2-opt; scipy's ``method="2opt"`` takes the first improving swap: same
    neighbourhood, same stopping rule, i.e. both end in a 2-opt local optimum). Returns ``(perm, objective)`` with
    ``B[perm][:, perm]`` aligned to ``A``: row i of A's items matches row ``perm[i]`` of B's.
    """
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
    """The mini-vec2vec paper (Dar, 2025) section 3.2: cosine between centroids (paper); ``"gram"``: the official
    code's double-centred dot products ``H C C^T H`` with ``H = I - 11^T / C``."""
    C = np.asarray(C, dtype=np.float64)
    if kind == "cosine":
        Cn = l2_normalize(C)
        return Cn @ Cn.T
    G = C @ C.T
    G = G - G.mean(axis=0, keepdims=True)
    return G - G.mean(axis=1, keepdims=True)


def _neighbour_mean(Y: np.ndarray, idx: np.ndarray, block: int = 512) -> np.ndarray:
    """Row i = uniform mean of ``Y[idx[i]]`` (the pseudo-target of the mini-vec2vec paper (Dar, 2025) sections 3.3 and
    3.4), block by block."""
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
    """Which start wins: one that passes validation, then the larger gain over refined random maps (the basin that
    stands out most); among failed ones the higher score."""
    if "passed" not in record:
        return (0, 0.0)
    return (1, record["gain"]) if record["passed"] else (0, record["score"])


# ------------------------------------------------------------------------------------------------------------------
# The estimator
# ------------------------------------------------------------------------------------------------------------------
class MiniVec2Vec(LinearTransform):
    """Unsupervised linear alignment from two unpaired samples (the mini-vec2vec paper's mini-vec2vec; see the module
    docstring
    for every step, the paper sections and where this implementation departs).

    ``MiniVec2Vec(...).fit(X_src, X_tgt)``: ``X_src`` (n_src x d_src, source model) and ``X_tgt`` (n_tgt x d_tgt,
    target model) are embeddings of *different* items from one distribution; no row of one corresponds to a row of
    the other. ``transform(X)`` then maps source-model vectors into the target space, like
    :class:`~vecbridge.align.OrthogonalProcrustes`. Having no pairs, it has no ``partial_fit``, ``fit_stream`` or
    ``fit_moments`` (it is a :class:`~vecbridge.align.base.LinearTransform`, not a ``LinearAlignment``).

    Parameters (paper value in brackets where it differs or matters)
    ----------
    n_runs : int, default 30
        Ensemble size s of the cluster-and-match step [30].
    n_clusters : int, default 20
        Clusters per run c [20; 30 for the paper's gtr <-> gte pair].
    qap_restarts : int, default 30
        Random 2-opt restarts per run; the best objective is kept [30].
    qap_solver : {"2opt", "scipy"}, default "2opt"
        This module's vectorised 2-opt, or scipy's ``quadratic_assignment(method="2opt")`` as in the paper (same
        local-search neighbourhood; about 50 ms per restart on 2 busy cores, i.e. ~45 s for 30 x 30).
    similarity : {"cosine", "gram"}, default "cosine"
        Centroid similarity for the QAP: the paper's cosine, or the official code's double-centred Gram matrix.
    kmeans_sample : int, default 10000
        Rows subsampled (per side, fresh per run) for the anchor k-means [official code: 10,000; paper silent].
    anchor_mode : {"relative", "centroids"}, default "relative"
        Pseudo-pairs from kNN in relative space (paper's Option 1), or the matched centroids themselves ("centroid-
        only", Option 2, which the paper tested less).
    n_neighbors : int, default 50
        k of the kNN pseudo-targets in relative space [50].
    refine1_iter : int, default 100
        Maximum Refine-1 iterations [50-100; official code 100].
    refine1_sample : int, default 1000
        Source rows sampled per Refine-1 iteration [paper 10,000; official code 1,000]. Measured (minilm6 -> mpnet,
        4,000 rows per side, 2 seeds): all 4,000 rows gave top-1 0.950 / 0.948 against 0.942 / 0.948 at 1,000, for
        2.2x the CPU time (Refine-1 needed 70 iterations instead of 45-55).
    refine1_neighbors : int, default 50
        k' of Refine-1 [50]. Measured from one initial map (50 iterations): k' = 10 / 20 / 50 reached top-1
        0.876 / 0.932 / 0.953; k' = 100 gave 0.957 and 0.944 on two seeds (0.942 and 0.948 at 50): no clear gain.
    refine1_tol : float, default 5e-4
        Stop Refine-1 (after at least 20 iterations) once the mean cosine of a fixed probe of 1,000 mapped source
        rows to their nearest target row has gained less than this over 5 iterations (label-free; 0 disables the
        early stop and always runs ``refine1_iter`` iterations, as the paper does). Measured over 100 iterations
        (minilm6 -> mpnet): held-out top-1 0.939 / 0.945 / 0.947 / 0.949 at iterations 40 / 55 / 60 / 100 while the
        probe gained 0.0020, 0.0001, ... per window: the stop lands at 35-55 iterations and costs <= 0.005 top-1.
        The per-iteration objective (``refine1_objective_``) is too noisy for this (+-0.002 between iterations).
    refine2_clusters : int, default 500
        c' of Refine-2 [500].
    refine2_iter : int, default 1
        Refine-2 repetitions [exactly 1: "two or more lead to a slight deterioration"].
    alpha : float, default 0.5
        Exponential smoothing ``W <- (1 - alpha) W + alpha W_new`` in both refinements [0.5].
    kmeans_max_iter : int, default 30
        Lloyd iterations at most, for every k-means (scikit-learn's default is 300). Measured on wordnet
        (minilm6 -> mpnet, 4,000 rows per side): 20 clusters take 28-45 iterations to converge fully, yet capping at
        20 left the initial transformation as good (top-1 0.28 vs 0.25 and 0.15 vs 0.13 on two seeds) at half the
        matching time.
    max_samples : int or None, default 25000
        Cap on the rows of each side used by the quadratic steps (pseudo-pair kNN, Refine-1's search base, Refine-2's
        k-means), drawn at random once; None uses all rows. The paper ran 25,904 rows per side, so the default keeps
        its scale and bounds the cost on larger collections. Means are always computed on all rows. Measured
        (minilm6 -> mpnet, growth beyond 10,000 rows synthetic, 2 busy cores): 72 s CPU at 10,000 rows per side,
        94 s at 20,000, 124 s at 50,000, 122 s at 100,000.
    orthogonalize : bool, default False
        Replace the final smoothed W by its nearest (semi-)orthogonal matrix (not in the paper).
    backend : {"auto", "faiss", "numpy"}, default "auto"
        Nearest-neighbour backend of :func:`vecbridge.numeric.neighbors.knn`.
    random_state : int, numpy Generator or None
        Seeds every stochastic step (subsamples, k-means seeding, 2-opt starts, Refine-1 samples).
    mnn_refine : int, default 0
        Not in the paper: rounds of CSLS mutual-nearest-neighbour Procrustes after Refine-2 (refit on the pairs the
        map makes mutual, as unsupervised cross-lingual mapping does). 0 keeps the paper's method exactly; the
        benchmark reports what it adds.
    init : {"auto", "centroids", "vecmap"}, default "auto"
        Starts of the restarts (not in the paper): the paper's centroid matching, VecMap's similarity-distribution
        start, or both alternately (the centroid matching first).
    n_restarts : int, default 4
        Starts at most, each refined by Refine-1 and judged by the label-free validation criterion; 1 runs one start
        and no validation (with ``init="centroids"`` and ``polish_iter=0``: the paper's method).
    restart_margin : float, default 1.5
        Stop the restarts at the first start that passes validation with ``gain >= restart_margin * GAIN_MIN``
        (0.0675 cosine at the default: working maps gain 0.053-0.097, failed ones at most 0.045).
    vecmap_sample : int, default 3000
        Rows per side of a VecMap start (profiles and self-learning; 2,000 was too few on FOLDOC minilm6 -> mpnet:
        top-1 0.01 against 0.87 at 3,000).
    vecmap_iter : int, default 100
        Self-learning iterations of a VecMap start.
    polish_iter : int, default 10
        Iterations at most of the final polish (VecMap's last phase; 0: off, as in the paper).
    polish_sample : int, default 5000
        Rows per side of the polish (its similarity matrix is polish_sample^2).
    polish_stochastic_iter : int, default 0
        Iterations of the polish's stochastic phase (VecMap's stochastic dictionary induction), run only for a start
        the validation accepts (or the only start); 0: the deterministic polish alone. The transport phase gains
        more for less time, so it is off by default (45 was the previous default).
    polish_keep : float in (0, 1], default 0.1
        Initial keep probability of each similarity in that phase [VecMap: 0.1]; 1 turns the phase off.
    polish_interval : int, default 3
        Iterations without an objective gain (1e-6) after which the keep probability doubles [VecMap: 50].
    transport_iter : int, default 10
        Rounds of the polish's last phase (ours), run only for a start the validation accepts: orthogonal Procrustes
        on the entropic optimal-transport plan between the mapped polish rows and the target's (Sinkhorn's scaling,
        uniform mass per row). 0, or ``polish_iter=0``, turns it off.
    transport_beta : float, default 20
        Inverse temperature of that plan on cosine similarity (large: close to a one-to-one matching). Measured
        from the polished map on three fits of both corpora (FOLDOC minilm6 -> minilm3 and -> mpnet, WordNet
        minilm3 -> mpnet; ``bench/unsupervised_restarts.py --transport-sweep``), 10 rounds each: beta 20 gives
        top-1 0.916 / 0.943 / 0.842, beta 15 0.905 / 0.938 / 0.839, beta 25 0.906 / 0.938 / 0.835; 20 rounds at
        beta 20 0.914 / 0.947 / 0.852.
    n_jobs : int or None, default 2
        When the first start does not settle the search, the other starts run this many at a time (threads, at most
        one per core), each on one BLAS thread; their results are taken in schedule order, so the search keeps the
        start a one-after-another search keeps and the maps equal those of a one-thread run. The 10,000 + 10,000 fit
        that tries every start takes a median 110 s against 135 s one after another (2 cores, two BLAS threads).
        1 or None: one after another, on the BLAS threads the process has.

    Attributes
    ----------
    matrix_ : (d_src, d_tgt) the final W (rows orthonormal up to smoothing when d_src <= d_tgt).
    source_mean_, target_mean_ : mu_A and mu_B (the preprocessing means; added back by ``transform``).
    scale_ : global scale replacing the per-row normalisation (see the module docstring).
    procrustes_ : an :class:`~vecbridge.align.OrthogonalProcrustes` holding the nearest orthogonal version of the
        final map (``U V^T`` from ``W = U S V^T``; same means, its own global scale): ``Alignment.from_estimator(
        est.procrustes_)`` freezes it as an artifact of kind "orthogonal" (the artifact does not know this class).
        Measured on wordnet it retrieves as well as W itself (top-1 within 0.003 on every pair of the benchmark).
    anchors_src_, anchors_tgt_ : (n_runs * n_clusters, d) matched centroids (normalised spaces).
    qap_scores_ : best QAP objective of each run (a label-free diagnostic of the matching).
    history_ : list of dicts, one per stage (``initial``, ``refine1``, ``refine2``): the mean cosine of a source
        sample to its nearest target after the stage (label-free) and the change of W.
    stage_matrices_ : W after each stage (``initial``, ``refine1``, ``refine2``), for the paper's per-stage report.
    refine1_n_iter_ : Refine-1 iterations actually run.
    refine1_objective_ : the ICP objective of every Refine-1 iteration (mean cosine of the sample to its k' targets).
    refine1_probe_cosine_ : the probe's mean nearest-target cosine at the start and every 5 iterations.
    timings_ : wall seconds of each stage (matching, initial, refine1, refine2; with restarts also vecmap,
        validation, polish), summed over the restarts (starts run side by side count each).
    restarts_ : one dict per start the search took, in order: ``restart``, ``init``, ``n_clusters`` and, with more
        than one start, its validation ``score``, ``gain``, ``agreement``, ``passed``; ``seconds`` the start took.
    restart_, init_ : index and kind of the start kept; ``validation_``: its validation (None for a single start).
    polish_objective_ : the polish's CSLS objective per iteration (stochastic phase first, without dropout).
    polish_n_stochastic_ : iterations of the polish's stochastic phase (0 when it did not run).
    stage_matrices_["transport"] : the map after the transport phase, when it ran (``history_`` then ends with a
        ``transport`` stage and ``timings_`` has its seconds).
    vecmap_n_iter_ : self-learning iterations of the kept start when it is a VecMap start.
    kmeans_consistency_ : Refine-2's self-consistency, mean cos(C_A @ W, C_B) (the official code's diagnostic).
    singular_values_ : singular values of W (all 1 for an orthogonal map; smoothing shrinks the weakly determined
        directions).
    orthogonality_gap_ : max |singular value of W - 1| (0 for an exactly orthogonal map).
    n_pairs_ : number of pseudo-pairs of the initial Procrustes (no true pair is ever used).
    n_samples_src_, n_samples_tgt_ : rows seen on each side.
    n_features_in_, n_features_out_ : d_src, d_tgt.
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
        "n_jobs": optional(Integer(1)),
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
                 transport_beta: float = 20.0, n_jobs: int | None = 2):
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

        # 1. preprocessing (section 3.1): own mean per side, unit rows
        mu_a = X_src.mean(axis=0, dtype=np.float64)
        mu_b = X_tgt.mean(axis=0, dtype=np.float64)
        A = l2_normalize(X_src - mu_a.astype(np.float32))
        B = l2_normalize(X_tgt - mu_b.astype(np.float32))
        A, B = self._cap(A, r_cap), self._cap(B, r_cap)

        lap = _Laps()
        self.timings_ = lap.seconds

        # 2-5. starts (the paper's: matching, pseudo-pairs, initial transformation), each through Refine-1; with
        # restarts, the label-free validation picks one (ours, not in the paper)
        schedule = self._schedule()
        self.restarts_ = []
        if min(len(A), len(B)) < MIN_ROWS:
            schedule = schedule[:1]          # too few rows to validate: one start, no choice to make
        judge = _Judge(A, B, rng.spawn(1)[0], self.backend) if len(schedule) > 1 else None
        if judge is not None:
            lap("validation")
        # every start's random streams, drawn up front in the order a one-after-another search draws them, so that
        # starts run side by side give the same maps
        streams = [(r_anchor, r_refine1)] + [tuple(rng.spawn(2)) for _ in schedule[1:]]
        diag = [r_diag] + list(rng.spawn(len(schedule) - 1))
        best = None

        def decide(result) -> bool:
            """Take one start's result in schedule order; True when the search stops there."""
            nonlocal best
            W, state, record, seconds = result
            lap.add(seconds)
            self.restarts_.append(record)
            if best is None or _restart_key(record) > _restart_key(best[2]):
                best = (W, state, record)
            return judge is None or (record["passed"] and record["gain"] >= self.restart_margin * GAIN_MIN)

        def start(i, stop=None):
            return self._start(i, *schedule[i], A, B, *streams[i], diag[i], judge, stop)

        rest = range(1, len(schedule))
        if not decide(start(0)):
            with contextlib.ExitStack() as side_by_side:
                workers = min(self._workers(), len(rest))
                if workers > 1:
                    # the other starts side by side, one BLAS thread each (the second core mostly idles otherwise);
                    # their results are still taken in schedule order, so the search stops where it would one after
                    # another; on leaving, the starts not needed stop at their next check
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
        lap.restart()
        W, state, chosen = best
        self._restore_run_state(state)
        self.restart_ = int(chosen["restart"])
        self.init_ = chosen["init"]
        self.validation_ = {k: chosen[k] for k in ("score", "gain", "agreement", "passed")} if judge else None

        # 6. Refine-2: cluster-based correction, once
        self.kmeans_consistency_ = None
        for _ in range(self.refine2_iter):
            W_prev = W
            C_a = kmeans(A, self.refine2_clusters, r_refine2, max_iter=self.kmeans_max_iter, backend=self.backend)[0]
            C_b = kmeans(B, self.refine2_clusters, r_refine2, init=C_a @ W, max_iter=self.kmeans_max_iter,
                         backend=self.backend)[0]
            last = procrustes_rotation(C_a, C_b)
            W = (1.0 - self.alpha) * W + self.alpha * last
            self.kmeans_consistency_ = float(np.mean(np.einsum(
                "ij,ij->i", l2_normalize(C_a @ W), l2_normalize(C_b))))
            self.history_.append(self._diagnose("refine2", A, B, W, W_prev, r_diag))
        self.stage_matrices_["refine2"] = W
        lap("refine2")

        # 7. (ours, after VecMap's self-learning; polish_iter=0 turns it off) self-learning with the bidirectional CSLS
        # dictionary on up to polish_sample rows per side: a short stochastic phase, then VecMap's final phase
        # and 7b. (ours) Procrustes on an entropic optimal-transport plan. Both only for a start the validation
        # accepts (or the only start): a refused map sits in a wrong basin, which no polish leaves, so its time is saved
        self.polish_objective_ = []
        self.polish_n_stochastic_ = 0
        accepted = judge is None or bool(chosen.get("passed"))
        if self.polish_iter:
            a, b = self._polish_rows(A, r_refine2), self._polish_rows(B, r_refine2)
            W_prev = W
            W = self._polish(a, b, W, r_refine2, stochastic=accepted)
            self.history_.append(self._diagnose("polish", A, B, W, W_prev, r_diag))
            self.stage_matrices_["polish"] = W
            lap("polish")
        if self.polish_iter and self.transport_iter and accepted:
            W_prev = W
            W = transport_procrustes(a, b, W, n_iter=self.transport_iter, beta=self.transport_beta)
            self.history_.append(self._diagnose("transport", A, B, W, W_prev, r_diag))
            self.stage_matrices_["transport"] = W
            lap("transport")

        # 8. (ours, not in the paper; off by default) CSLS mutual-nearest-neighbour Procrustes refinement, the classic
        # last step of unsupervised cross-lingual mapping: refit on the pairs the current map makes mutual
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
        if self.orthogonalize:
            W = polar(W)
        self._finish(W, X_src, X_tgt, mu_a, mu_b, r_diag)
        return self

    def _polish_rows(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Up to ``polish_sample`` rows of one side, drawn once for the polish and the transport refinement."""
        return X if len(X) <= self.polish_sample else X[rng.choice(len(X), self.polish_sample, replace=False)]

    def _polish(self, a, b, W, rng, stochastic: bool):
        """VecMap's self-learning from ``W`` on the polish rows ``a`` and ``b``: Procrustes on every row's CSLS
        best match in both directions. With ``stochastic`` (and ``polish_keep < 1``), first ``polish_stochastic_iter``
        iterations of stochastic dictionary induction (keep probability ``polish_keep``, doubled after
        ``polish_interval`` iterations without an objective gain); then its final phase at keep probability 1, until
        the objective gains less than 1e-4 (at most ``polish_iter`` iterations). Returns the map."""
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

    def _check_stop(self):
        if self._stop is not None and self._stop.is_set():
            raise _Stopped

    def _workers(self) -> int:
        return max(1, min(int(self.n_jobs or 1), os.cpu_count() or 1))

    def _schedule(self) -> list:
        """``(init, n_clusters)`` of every start, in order: the paper's start first; ``"auto"`` then alternates
        two VecMap starts and a centroid matching with other cluster counts (1.5x, 1x, 2x ``n_clusters``)."""
        counts = [self.n_clusters, int(round(1.5 * self.n_clusters)), self.n_clusters, 2 * self.n_clusters]
        out, c = [], 0
        for i in range(self.n_restarts):
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
        """Section 3.4 Refine-1 (listing 2), with the optional early stop.

        Every ``REFINE1_WINDOW`` iterations the mean cosine of a fixed probe of source rows (mapped) to their nearest
        target row is measured (label-free, and free of the sampling noise of the per-iteration objective). With
        ``refine1_tol > 0`` the loop stops once that has gained less than ``refine1_tol`` over one window (the paper
        reports Refine-1 as monotone and converging to a stationary point; measured on wordnet, the held-out top-1
        stops rising where this gain falls below about 5e-4).
        """
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
        return op

    # --- applying -------------------------------------------------------------------------------------------------
    @property
    def inverse_matrix_(self) -> np.ndarray:
        """Target -> source: ``W^T``. W is an exponentially smoothed average of orthogonal maps, so ``W^T`` is the same
        average of their inverses (a pseudo-inverse would blow up the directions the smoothing shrank)."""
        self._check_fitted()
        return self.matrix_.T
