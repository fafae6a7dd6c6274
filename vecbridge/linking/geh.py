"""GEH: grow a few seed pairs into one-to-one links between two collections ("Vector Linking via Cross-Model Local
Isometric Consistency", ICML 2026, "the Vector Linking paper").

Two collections embedded by two models (dimensions may differ) share some items, and a user knows 15-30 true pairs.
GEH never maps one space into the other: items are compared through their kernelised distances to paired anchors,
which two good encoders agree on up to a scale. The fit follows the paper's section 4: views by farthest point
sampling over the link pool, distance-to-anchor hashes, CSLS mutual-nearest-neighbour proposals voted over views,
Otsu promotion to a one-to-one pool, until a stopping rule holds; appendix B.3's local path for large collections.
:class:`GEH` lists where it departs (an optional Procrustes refinement with calibrated confidences among them);
the measurements are in docs/design.md and bench/README.md (``bench/geh.py``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .._blas import one_blas_thread, thread_limit
from ..errors import CheckFailed, InputError
from ..numeric.estimator import Boolean, Estimator, InstanceOf, Integer, OneOf, RandomState, Real, optional
from ..numeric.linalg import procrustes_rotation
from ..numeric.neighbors import KnnIndex, csls_mutual_from_knn, knn, runner_up_margin
from ..validation import check_vectors
from ..vectors import l2_normalize

MIN_SEEDS = 5

_SIGMA_SAMPLE = 128
_PROJ_SAMPLE = 512
_REFINE_MIN_LINKS = 100   # below this many GEH links a fitted map is not trusted: no refinement
_EXACT_MAX = 20_000        # above this many rows, neighbour searches use an inverted file (approximate)
_CROSS_FOLDS = 5           # cross-fitting folds of the calibrated refinement
_DECOY_FRACTION = 0.25     # links whose partner is removed, per side, to make decoys
_MIN_SEED_AGREEMENT = 0.5  # held-out seed agreement below which the links are refused
_ADVICE = ("give more or better seed pairs (check that they are true pairs) or re-embed a sample of texts with the "
           "new model")


# ------------------------------------------------------------------------------------------------------------------
# small numerical pieces
# ------------------------------------------------------------------------------------------------------------------
class _AnchorDistances:
    """Cosine distances from every row of one cloud to anchor rows of the same cloud, each anchor computed once.

    Cache rows are anchors (``slot_[i]`` is the cache row of cloud row i); new anchors cost one matrix product per
    batch. Past ``max_bytes`` the cache is dropped and distances are computed per request.
    """

    def __init__(self, X: np.ndarray, max_bytes: int):
        self.X = X
        self.max_rows = max(0, int(max_bytes // (4 * X.shape[0])))
        self.slot_ = np.full(X.shape[0], -1, dtype=np.int64)
        self.rows = np.empty((0, X.shape[0]), dtype=np.float32)
        self.used = 0
        self.cached = self.max_rows > 0

    def ensure(self, anchors: np.ndarray):
        if not self.cached:
            return
        new = np.unique(anchors[self.slot_[anchors] < 0])
        if len(new) == 0:
            return
        if self.used + len(new) > self.max_rows:
            self.cached = False
            self.rows = np.empty((0, self.X.shape[0]), dtype=np.float32)
            self.slot_[:] = -1
            return
        if self.used + len(new) > self.rows.shape[0]:
            cap = min(self.max_rows, max(2 * self.rows.shape[0], self.used + len(new), 64))
            grown = np.empty((cap, self.X.shape[0]), dtype=np.float32)
            grown[:self.used] = self.rows[:self.used]
            self.rows = grown
        block = self.X[new] @ self.X.T
        np.subtract(1.0, block, out=block)
        self.rows[self.used:self.used + len(new)] = block
        self.slot_[new] = np.arange(self.used, self.used + len(new))
        self.used += len(new)

    def get(self, rows: np.ndarray | None, anchors: np.ndarray) -> np.ndarray:
        """(len(rows), len(anchors)) cosine distances, C-contiguous float32 (``rows=None``: every row)."""
        self.ensure(anchors)
        if self.cached:
            A = self.rows[self.slot_[anchors]]
            if rows is not None:
                A = A[:, rows]
            return np.ascontiguousarray(A.T)
        Xr = self.X if rows is None else self.X[rows]
        D = Xr @ self.X[anchors].T
        np.subtract(1.0, D, out=D)
        return np.ascontiguousarray(D, dtype=np.float32)


def _median_bandwidth(D: np.ndarray, sample: np.ndarray) -> float:
    """Median of the nonzero pairwise L2 distances between raw distance-to-anchor hashes (rows of ``D``)."""
    sub = D[sample[sample < D.shape[0]]] if D.shape[0] > len(sample) else D
    sq = np.einsum("ij,ij->i", sub, sub)
    G = sq[:, None] + sq[None, :] - 2.0 * (sub @ sub.T)
    d = np.sqrt(np.maximum(G[np.triu_indices(len(sub), 1)], 0.0))
    d = d[d > 1e-9]
    return float(np.median(d)) if d.size else 1.0


def _otsu(values: np.ndarray, bins: int = 256) -> float:
    """Otsu's threshold (Otsu 1979): the cut of the histogram of ``values`` maximising between-class variance.

    Integer-valued inputs with few distinct values are binned exactly (one bin per value). Returns the smallest value
    of the upper class; with a single distinct value, that value (nothing to separate).
    """
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return np.inf
    uniq = np.unique(v)
    if len(uniq) == 1:
        return float(uniq[0])
    if len(uniq) <= bins:
        centers, counts = uniq, np.unique(v, return_counts=True)[1].astype(np.float64)
        edges_hi = uniq[1:]
    else:
        counts, edges = np.histogram(v, bins=bins)
        counts = counts.astype(np.float64)
        centers = 0.5 * (edges[:-1] + edges[1:])
        edges_hi = edges[1:-1]
    w0 = np.cumsum(counts)[:-1]
    m0 = np.cumsum(counts * centers)[:-1]
    w1 = counts.sum() - w0
    m1 = (counts * centers).sum() - m0
    ok = (w0 > 0) & (w1 > 0)
    between = np.zeros_like(w0)
    between[ok] = w0[ok] * w1[ok] * (m0[ok] / w0[ok] - m1[ok] / w1[ok]) ** 2
    return float(edges_hi[int(np.argmax(between))])


def _fps(D: np.ndarray, size: int, start: int, init_min: np.ndarray | None) -> np.ndarray:
    """Greedy farthest point sampling (Gonzalez 1985) on a precomputed distance matrix, from ``start``.

    ``init_min`` holds each point's distance to points already chosen outside ``D`` (the seeds of the view)."""
    n = D.shape[0]
    size = min(size, n)
    mind = np.full(n, np.inf) if init_min is None else init_min.astype(np.float64, copy=True)
    sel = np.empty(size, dtype=np.int64)
    j = start
    for i in range(size):
        sel[i] = j
        np.minimum(mind, D[j], out=mind)
        mind[sel[:i + 1]] = -np.inf
        j = int(np.argmax(mind))
    return sel


def _greedy_one_to_one(u: np.ndarray, v: np.ndarray, used1: np.ndarray, used2: np.ndarray) -> np.ndarray:
    """Positions of the pairs a greedy pass keeps, in the given order (each row of either side used once)."""
    keep = np.zeros(len(u), dtype=bool)
    for i in range(len(u)):
        a, b = u[i], v[i]
        if not used1[a] and not used2[b]:
            used1[a] = used2[b] = True
            keep[i] = True
    return np.flatnonzero(keep)


def _gmm_high_posterior(x: np.ndarray, iters: int = 200) -> np.ndarray:
    """Posterior of the upper component of a two-Gaussian mixture fitted to ``x`` by EM (1-D)."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < 4 or np.ptp(x) <= 0:
        return np.ones(len(x))
    mu = np.percentile(x, [25, 75]).astype(np.float64)
    sd = np.full(2, max(x.std() / 2, 1e-6))
    w = np.array([0.5, 0.5])
    r = np.full((len(x), 2), 0.5)
    for _ in range(iters):
        ll = -0.5 * ((x[:, None] - mu) / sd) ** 2 - np.log(sd) + np.log(np.maximum(w, 1e-12))
        ll -= ll.max(axis=1, keepdims=True)
        r = np.exp(ll)
        r /= r.sum(axis=1, keepdims=True)
        nk = r.sum(axis=0) + 1e-12
        new_mu = (r * x[:, None]).sum(axis=0) / nk
        sd = np.sqrt((r * (x[:, None] - new_mu) ** 2).sum(axis=0) / nk) + 1e-6
        w = nk / len(x)
        if np.allclose(new_mu, mu, atol=1e-9):
            mu = new_mu
            break
        mu = new_mu
    return r[:, int(np.argmax(mu))]


def _increasing_fit(y: np.ndarray) -> np.ndarray:
    """Least-squares nondecreasing fit of ``y`` (pool-adjacent-violators, equal weights)."""
    vals, sizes = [], []
    for v in np.asarray(y, dtype=np.float64):
        vals.append(v)
        sizes.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            n = sizes[-2] + sizes[-1]
            vals[-2] = (vals[-2] * sizes[-2] + vals[-1] * sizes[-1]) / n
            sizes[-2] = n
            vals.pop()
            sizes.pop()
    return np.repeat(vals, sizes)


def _decoy_calibration(scores: np.ndarray, decoys: np.ndarray, n_decoy_rows: int, n_unlinked: int):
    """Label-free error rates of CSLS mutual-nearest-neighbour links from partner-removal decoys.

    ``decoys`` are the scores of the new mutual pairs formed by ``n_decoy_rows`` linked rows once their linked
    partner is removed: each such row has no partner left, so ``r = len(decoys) / n_decoy_rows`` is the chance that a
    partnerless row forms a (wrong) link, and ``r(t)`` the chance that it does so with a score >= t. The number of
    partnerless rows is ``N = n_unlinked / (1 - r)`` (every partnered row assumed linked), so ``N r(t)`` wrong links
    are expected above ``t``. This is the target-decoy estimate of the false discovery rate (Elias & Gygi, "Target-
    decoy search strategy for increased confidence in large-scale protein identifications by mass spectrometry",
    2007) with decoys made by deleting partners instead of reversing sequences.

    Returns, in the order of ``scores``: the local probability that each link is right (1 - the slope of the
    expected-wrong count along the ranking, made monotone), the predicted precision of all links scoring at least as
    high (1 - q-value), and ``(N, r)``."""
    L = len(scores)
    if L == 0:
        return np.empty(0), np.empty(0), (0.0, 0.0)
    dec = np.sort(np.asarray(decoys, dtype=np.float64))
    r = len(dec) / max(n_decoy_rows, 1)
    N = max(n_unlinked, 0) / max(1.0 - r, 0.05)
    o = np.argsort(-scores, kind="stable")
    W = N * (len(dec) - np.searchsorted(dec, scores[o], side="left")) / max(n_decoy_rows, 1)
    W = np.minimum(W, np.arange(1, L + 1))                  # at most every link is wrong
    h = max(10, L // 50)
    hi = np.minimum(np.arange(L) + h, L - 1)
    lo = np.maximum(np.arange(L) - h, 0)
    slope = np.clip((W[hi] - W[lo]) / np.maximum(hi - lo, 1), 0.0, 1.0)
    lfdr = np.clip(_increasing_fit(slope), 0.0, 1.0)      # later ranks are never more likely right
    q = np.minimum.accumulate((W / np.arange(1, L + 1))[::-1])[::-1]
    post, prec = np.empty(L), np.empty(L)
    post[o], prec[o] = 1.0 - lfdr, 1.0 - q
    return post, prec, (float(N), float(r))


def check_seed_pairs(seed_pairs, n1: int, n2: int, min_seeds: int = MIN_SEEDS) -> np.ndarray:
    """Validate seed pairs: an (s, 2) integer array of row indices, in range, one-to-one, at least ``min_seeds``."""
    S = np.asarray(seed_pairs)
    if S.ndim != 2 or S.shape[1] != 2:
        raise InputError(f"seed_pairs: expected an (s, 2) array of row indices, got shape {S.shape}")
    if S.size and not np.issubdtype(S.dtype, np.integer):
        if not (np.issubdtype(S.dtype, np.floating) and np.all(np.isfinite(S)) and np.all(S == np.round(S))):
            raise InputError(f"seed_pairs: expected integer row indices, got dtype {S.dtype}")
    S = S.astype(np.int64)
    if len(S) < min_seeds:
        raise InputError(f"seed_pairs: GEH needs at least {min_seeds} seed pairs, got {len(S)} (the paper uses 15-30)")
    for col, n, name in ((0, n1, "X1"), (1, n2, "X2")):
        bad = (S[:, col] < 0) | (S[:, col] >= n)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"seed_pairs: pair {i} refers to {name} row {int(S[i, col])}, outside 0..{n - 1}")
        vals, counts = np.unique(S[:, col], return_counts=True)
        if (counts > 1).any():
            raise InputError(f"seed_pairs: {name} row {int(vals[counts > 1][0])} appears in more than one seed pair "
                             "(links are one-to-one)")
    return S


# ------------------------------------------------------------------------------------------------------------------
# GEH's options, grouped. Field names are unique across the groups, so each is also a flat parameter name:
# ``GEH().set_params(shortlist=32)`` (how the command line's flat keys arrive) replaces ``search`` with that field
# changed.
@dataclass(frozen=True)
class GEHViews:
    """Views and their hashes (the paper's components 1-3): the schedule ``sf = 1 + c log g``,
    ``m_t = max(ceil(m0 sf), min_views)`` views of ``s_t = min(ceil(rho0 |L| / sf), max_view_size)`` anchors, FPS
    (``view_sampling="fps"``) on a ``fps_pool_factor`` x view-size subsample, the seeds in every view, the view's own
    anchors excluded from its proposals, kernelised hashes (``kernel``). ``multi_view=False``: one view, the whole
    pool."""

    c: float = 0.3
    rho0: float = 0.4
    m0: int = 5
    min_views: int = 10
    max_view_size: int | None = 256
    view_sampling: str = "fps"
    seeds_in_views: bool = True
    multi_view: bool = True
    fps_pool_factor: float | None = 2.0
    exclude_view_anchors: bool = True
    kernel: bool = True


@dataclass(frozen=True)
class GEHVotes:
    """From proposals to links (component 5): ``bootstrap`` (iterate; False = one iteration on the seeds), a link
    needs ``min_votes`` as well as Otsu's threshold, the pool grows at most ``max_growth`` x per iteration (None: no
    cap), votes decay by ``vote_decay`` per iteration (1: cumulative, as the paper).

    Output (ours): with ``calibrate`` the refinement is cross-fitted and every link gets a calibrated, label-free
    confidence (see :class:`GEH`); links below ``min_confidence`` are dropped; ``runner_up_margin`` scores the
    refinement's links by CSLS plus their margin over the runner-ups (False: CSLS alone). ``min_grown``: fewer links
    than this beyond the seeds (after the cut) means bootstrapping never took off, and ``fit`` raises
    ``CheckFailed`` (0 disables the check)."""

    bootstrap: bool = True
    min_votes: float = 3.0
    max_growth: float | None = 2.0
    vote_decay: float = 0.5
    calibrate: bool = True
    runner_up_margin: bool = True
    min_confidence: float = 0.7
    min_grown: int = 20


@dataclass(frozen=True)
class GEHStopping:
    """When to stop (besides ``max_iter``): the MNN ratio moved less than ``tol`` over ``t_min`` iterations
    (appendix C.2.1), or the pool size and its vote support moved less than ``churn_tol`` for ``patience``
    iterations after ``min_iter`` (the main text's "L_t stabilises"; None disables it)."""

    t_min: int = 10
    tol: float = 0.01
    churn_tol: float | None = 0.05
    patience: int = 2
    min_iter: int = 5


@dataclass(frozen=True)
class GEHSearch:
    """Speed and scale: each point's ``shortlist`` candidates (None: dense CSLS, as the paper) from a whole-pool hash
    space of ``shortlist_anchors`` anchors projected to ``proj_dim``, refreshed when ``shortlist_refresh`` of the pool
    changed; above ``large_threshold`` rows the local path of appendix B.3 (``k_nn``, ``local_size``, ``coverage``);
    at most ``max_cache_bytes`` of cached anchor distances."""

    shortlist: int | None = 16
    shortlist_anchors: int = 512
    proj_dim: int = 64
    shortlist_refresh: float = 0.1
    large_threshold: int = 500_000
    k_nn: int = 16
    local_size: int = 2048
    coverage: float = 3.0
    max_cache_bytes: int = 1 << 30


@dataclass(frozen=True)
class _Inputs:
    """One fit's unit rows and checked seeds, with what is built on them once (anchor-distance caches, bandwidth
    samples, and on the large path one neighbour index per side plus their anchor-list caches)."""

    X1: np.ndarray
    X2: np.ndarray
    S: np.ndarray
    d1: _AnchorDistances
    d2: _AnchorDistances
    samp1: np.ndarray
    samp2: np.ndarray
    loc: tuple | None

    @property
    def n1(self) -> int:
        return self.X1.shape[0]

    @property
    def n2(self) -> int:
        return self.X2.shape[0]


@dataclass
class _Pool:
    """The bootstrap's state: the link pool L_t (seeds first), the candidate universe C_t with its votes (pairs packed
    as ``u * n2 + v``, sorted), N_{<=t}, the shortlists and how much the pool changed since they were computed, and
    the per-iteration MNN ratio, pool size and mean vote support the stopping rules read."""

    link1: np.ndarray
    link2: np.ndarray
    is_seed: np.ndarray
    n2: int
    keys: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    votes: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float64))
    n_views: float = 0.0
    C12: np.ndarray | None = None
    C21: np.ndarray | None = None
    changed: int = 0
    ratios: list = field(default_factory=list)
    sizes: list = field(default_factory=list)
    support: list = field(default_factory=list)

    def posterior(self, l1: np.ndarray, l2: np.ndarray, seed_mask: np.ndarray):
        """Votes nu of each link and their Beta(1, 1) posterior mean (1 + nu) / (2 + N) (section 4; 1 for seeds)."""
        packed = l1 * self.n2 + l2
        nu = np.zeros(len(packed))
        if len(self.keys):
            kidx = np.minimum(np.searchsorted(self.keys, packed), len(self.keys) - 1)
            nu = np.where(self.keys[kidx] == packed, self.votes[kidx], 0.0)
        return nu, np.where(seed_mask, 1.0, (1.0 + nu) / (2.0 + self.n_views))


class GEH(Estimator):
    """Grow seed pairs into one-to-one links between two collections (the Vector Linking paper's GEH), scikit-learn
    style.

    ``GEH(...).fit(X1, X2, seed_pairs)`` leaves ``links_`` (an ``(n, 2)`` array of row indices into ``X1`` and
    ``X2``, the seeds first) and ``confidence_`` (the Beta-Bernoulli posterior mean of each link's votes; 1 for the
    seeds). Rows are L2-normalised internally (distance = 1 - cosine); dimensions may differ.

    The paper's defaults: ``c=0.3``, ``rho0=0.4``, ``m0=5`` (the extraction's derived value), ``t_min=10``,
    ``tol=0.01``, ``max_iter=100``, natural log in ``sf``, Beta(1, 1) prior, Otsu over the candidates' votes (on
    vote counts, which the extraction shows is equivalent to Otsu on theta), seeds locked in and winning every
    one-to-one conflict, ``L_t`` recomputed from the cumulative posterior every iteration (the extraction's
    recommended reading of the accumulate-or-recompute ambiguity), views at ``t = 1`` drawn as FPS subsets of the
    seeds (its recommended reading of the seeds-in-views ambiguity).

    Where we depart (why, with the measurements on both corpora: docs/design.md, "GEH"): read literally the first
    iteration promotes hundreds of mostly wrong links that later iterations never remove, so

    * **Stabilised early iterations**: at least ``min_views`` views per iteration, a link needs ``min_votes`` votes
      as well as Otsu's threshold, the pool grows at most ``max_growth`` x per iteration, and votes decay by
      ``vote_decay`` per iteration so that stale early votes stop holding links in place (``min_views=0,
      min_votes=1, max_growth=None, vote_decay=1`` is the literal reading).
    * ``k_csls=10`` (the paper: 50, inside its stable range [4, 50]): as good, a fifth of the neighbour lists.
    * **Speed**: views of at most ``max_view_size`` anchors (above the intrinsic dimension the paper asks for), FPS
      on a ``fps_pool_factor`` x view-size subsample, ``shortlist`` candidates per point from a projected whole-pool
      hash space (the paper: dense CSLS), anchor distances cached.
    * **Stopping**: besides the MNN-ratio rule, once the pool size and its mean vote support both settle
      (``churn_tol``, ``patience``, ``min_iter``; the main text's "L_t stabilises").
    * **Large collections** (``> large_threshold`` rows, appendix B.3): FPS views, not k-means clusters; local sets
      from the anchors' ``k_nn`` ambient neighbours (the paper leaves k_NN open), ``coverage`` views per point.
    * **Refinement** (``refine="procrustes"``, ours): once GEH has 100 links, an orthogonal Procrustes map fitted on
      them proposes CSLS mutual nearest neighbours over the full collections, ``refine_iter`` rounds, scored with
      their runner-up margin, calibrated against partner-removal decoys and cut at ``min_confidence``
      (:class:`GEHVotes`). The bootstrap-only links stay in ``geh_links_`` / ``geh_confidence_``; ``refine=None``
      is the paper's output.

    Every stochastic step draws from ``random_state``. ``history_`` records each iteration (views, proposals,
    candidates, MNN ratio, Otsu threshold, links, seconds); ``stop_reason_`` says which rule stopped it.

    Parameters: ``k_csls``, ``max_iter``, ``refine``, ``refine_iter``, ``n_threads``, ``random_state`` and
    ``verbose`` directly; the rest in four groups, :class:`GEHViews` (``views``), :class:`GEHVotes` (``votes``),
    :class:`GEHStopping` (``stopping``) and :class:`GEHSearch` (``search``), e.g.
    ``GEH(votes=GEHVotes(vote_decay=1.0))``. ``set_params`` also takes a group's field by its own name:
    ``GEH().set_params(vote_decay=1.0)`` is the same estimator.
    """

    _parameter_constraints = {
        "views": InstanceOf(GEHViews), "votes": InstanceOf(GEHVotes), "stopping": InstanceOf(GEHStopping),
        "search": InstanceOf(GEHSearch), "k_csls": Integer(1), "max_iter": Integer(1),
        "refine": OneOf(None, "procrustes"), "refine_iter": Integer(1), "n_threads": optional(Integer(1)),
        "random_state": RandomState(), "verbose": Boolean(),
        # GEHViews
        "c": Real(0), "rho0": Real(0, low_open=True), "m0": Integer(1), "min_views": Integer(0),
        "max_view_size": optional(Integer(1)), "view_sampling": OneOf("fps", "random"), "seeds_in_views": Boolean(),
        "multi_view": Boolean(), "fps_pool_factor": optional(Real(0, low_open=True)),
        "exclude_view_anchors": Boolean(), "kernel": Boolean(),
        # GEHVotes
        "bootstrap": Boolean(), "min_votes": Real(0), "max_growth": optional(Real(0, low_open=True)),
        "vote_decay": Real(0, 1), "calibrate": Boolean(), "runner_up_margin": Boolean(), "min_confidence": Real(0, 1),
        "min_grown": Integer(0),
        # GEHStopping
        "t_min": Integer(1), "tol": Real(0), "churn_tol": optional(Real(0)), "patience": Integer(1),
        "min_iter": Integer(0),
        # GEHSearch
        "shortlist": optional(Integer(1)), "shortlist_anchors": Integer(1), "proj_dim": Integer(1),
        "shortlist_refresh": Real(0), "large_threshold": Real(0), "k_nn": Integer(1), "local_size": Integer(1),
        "coverage": Real(0, low_open=True), "max_cache_bytes": Real(0),
    }

    def __init__(self, *, views: GEHViews = GEHViews(), votes: GEHVotes = GEHVotes(),
                 stopping: GEHStopping = GEHStopping(), search: GEHSearch = GEHSearch(), k_csls: int = 10,
                 max_iter: int = 100, refine: str | None = "procrustes", refine_iter: int = 2,
                 n_threads: int | None = None, random_state=None, verbose: bool = False):
        self.views = views
        self.votes = votes
        self.stopping = stopping
        self.search = search
        self.k_csls = k_csls
        self.max_iter = max_iter
        self.refine = refine
        self.refine_iter = refine_iter
        self.n_threads = n_threads
        self.random_state = random_state
        self.verbose = verbose

    # --------------------------------------------------------------------------------------------------------------
    def _schedule(self, n_pool: int, n_seeds: int) -> tuple[int, int, float]:
        """Section 4 / App. B.2: sf = 1 + c log g, m_t = ceil(m0 sf), s_t = ceil(rho0 |L| / sf), g = |L| / |S|."""
        g = n_pool / max(n_seeds, 1)
        sf = 1.0 + self.views.c * math.log(max(g, 1.0))
        return int(math.ceil(self.views.m0 * sf)), int(math.ceil(self.views.rho0 * n_pool / sf)), sf

    def _hashes(self, d: _AnchorDistances, anchors: np.ndarray, sample: np.ndarray) -> np.ndarray:
        """Kernelised distance-to-anchor hashes of every row, L2-normalised: exp(-dist / sigma), sigma by the median
        heuristic on this side's raw hashes (so the inter-model scale kappa cancels: sigma1 = kappa sigma2)."""
        D = d.get(None, anchors)
        if self.views.kernel:
            sigma = max(_median_bandwidth(D, sample), 1e-6)
            np.multiply(D, np.float32(-1.0 / sigma), out=D)
            np.exp(D, out=D)
        return l2_normalize(D)

    def _views(self, rng, link1, is_seed, s_t, m_t, dist: Callable, pool_factor: float | None) -> list[np.ndarray]:
        """View generation (section 4): FPS on the E1 side of the bootstrapped pool from a random start, seeds added.

        Each view's FPS runs on a fresh random subsample of ``pool_factor * s_t`` eligible anchors (all of them with
        ``pool_factor=None``); ``dist(rows, cols)`` gives cosine distances between E1 points, from the anchor cache
        on the global path and computed for the subsample only on the large path.
        """
        if not self.views.multi_view:
            return [np.arange(len(link1))]
        seeds = np.flatnonzero(is_seed)
        boot = np.flatnonzero(~is_seed)
        if len(boot) == 0:            # t = 1: only the seeds exist, so views are subsets of S (see notes)
            eligible, forced = seeds, seeds[:0]
        else:
            eligible, forced = boot, seeds if self.views.seeds_in_views else seeds[:0]
        size = min(s_t, len(eligible))
        if self.views.view_sampling == "random":
            return [np.concatenate([forced, rng.choice(eligible, size, replace=False)]) for _ in range(m_t)]
        views = []
        for _ in range(m_t):
            if pool_factor is None or pool_factor * size >= len(eligible):
                sub = eligible
            else:
                sub = np.sort(rng.choice(eligible, int(math.ceil(pool_factor * size)), replace=False))
            a = link1[sub]
            init = dist(a, link1[forced]).min(axis=1) if len(forced) else None
            sel = _fps(dist(a, a), size, int(rng.integers(0, len(sub))), init)
            views.append(np.concatenate([forced, sub[sel]]))
        return views

    def _shortlists(self, rng, fit: _Inputs, link1: np.ndarray, link2: np.ndarray):
        """Each point's ``shortlist`` nearest neighbours on the other side in the hash space of the whole pool
        (FPS-capped at ``shortlist_anchors``; projected on its top ``proj_dim`` principal directions)."""
        d1, d2, samp1, samp2 = fit.d1, fit.d2, fit.samp1, fit.samp2
        n1, n2 = fit.n1, fit.n2
        pos = np.arange(len(link1))
        if len(pos) > self.search.shortlist_anchors:
            a = link1
            D = d1.get(a, a)
            pos = _fps(D, self.search.shortlist_anchors, int(rng.integers(0, len(a))), None)
        H1 = self._hashes(d1, link1[pos], samp1)
        H2 = self._hashes(d2, link2[pos], samp2)
        if H1.shape[1] > self.search.proj_dim:
            sub = np.concatenate([H1[rng.choice(n1, min(n1, _PROJ_SAMPLE), replace=False)],
                                  H2[rng.choice(n2, min(n2, _PROJ_SAMPLE), replace=False)]])
            sub = sub.astype(np.float64)
            with one_blas_thread():
                _, vecs = np.linalg.eigh(sub.T @ sub)             # principal directions, ascending
            P = np.ascontiguousarray(vecs[:, ::-1][:, :self.search.proj_dim], dtype=np.float32)
            H1, H2 = H1 @ P, H2 @ P
        K = min(self.search.shortlist, n1, n2)
        seed = int(rng.integers(1 << 30)) if max(n1, n2) > _EXACT_MAX else 0   # (no draw when searches are exact)
        C12 = KnnIndex(H2, normalize=False, exact_max=_EXACT_MAX, seed=seed).search(H1, K)[0]
        C21 = KnnIndex(H1, normalize=False, exact_max=_EXACT_MAX, seed=seed).search(H2, K)[0]
        return C12, C21

    @staticmethod
    def _edge_sims(Hq: np.ndarray, Hb: np.ndarray, C: np.ndarray) -> np.ndarray:
        """Exact inner products of every row of ``Hq`` with its listed rows of ``Hb`` (one column at a time)."""
        out = np.empty(C.shape, dtype=np.float32)
        for j in range(C.shape[1]):
            out[:, j] = np.einsum("ij,ij->i", Hq, Hb[C[:, j]])
        return out

    def _propose(self, a1, a2, d1, d2, samp1, samp2, C12, C21):
        """Per-view link proposal (section 4): hashes, CSLS, mutual nearest neighbours in hash space."""
        H1 = self._hashes(d1, a1, samp1)
        H2 = self._hashes(d2, a2, samp2)
        k = int(self.k_csls)
        if C12 is None:
            if self.views.exclude_view_anchors:
                H1[a1] = 0.0
                H2[a2] = 0.0
            i12, s12 = knn(H1, H2, k, normalize=False)
            i21, s21 = knn(H2, H1, k, normalize=False)
            if self.views.exclude_view_anchors:
                bad1 = np.zeros(len(H1), bool)
                bad1[a1] = True
                bad2 = np.zeros(len(H2), bool)
                bad2[a2] = True
                i12[bad1] = -1
                i21[bad2] = -1
                i12[np.isin(i12, a2)] = -1
                i21[np.isin(i21, a1)] = -1
        else:
            s12 = self._edge_sims(H1, H2, C12)
            s21 = self._edge_sims(H2, H1, C21)
            i12, i21 = C12.copy(), C21.copy()
            if not self.views.exclude_view_anchors:
                m12, m21 = C12 < 0, C21 < 0
                i12[m12], s12[m12] = -1, -np.inf
                i21[m21], s21[m21] = -1, -np.inf
            else:
                bad1 = np.zeros(len(H1), bool)
                bad1[a1] = True
                bad2 = np.zeros(len(H2), bool)
                bad2[a2] = True
                m12 = bad1[:, None] | bad2[C12] | (C12 < 0)
                m21 = bad2[:, None] | bad1[C21] | (C21 < 0)
                i12[m12], s12[m12] = -1, -np.inf
                i21[m21], s21[m21] = -1, -np.inf
            o = np.argsort(-s12, axis=1, kind="stable")
            i12, s12 = np.take_along_axis(i12, o, 1), np.take_along_axis(s12, o, 1)
            o = np.argsort(-s21, axis=1, kind="stable")
            i21, s21 = np.take_along_axis(i21, o, 1), np.take_along_axis(s21, o, 1)
        return csls_mutual_from_knn(i12, s12, i21, s21, k)[0]

    def _local_set(self, X, idx, cache: dict, anchors: np.ndarray) -> np.ndarray:
        """App. B.3 local set: the union of the ambient neighbours of the view's anchors, ``k_nn`` each (more for
        small views, so that a view covers about ``local_size`` points); each anchor's list is looked up once."""
        k = int(min(max(self.search.k_nn, math.ceil(self.search.local_size / max(len(anchors), 1))), X.shape[0]))
        need = [a for a in anchors.tolist() if len(cache.get(a, ())) < k]
        if need:
            for a, row in zip(need, idx.search(X[need], k)[0]):
                cache[a] = row[row >= 0]
        return np.unique(np.concatenate([cache[a][:k] for a in anchors.tolist()]))

    def _propose_local(self, a1, a2, X1, X2, loc, C12, C21):
        """App. B.3 per-view proposal: hashes only for the view's local sets, CSLS mutual nearest neighbours over the
        shortlist edges that stay inside them."""
        c1 = self._local_set(X1, loc[0], loc[2], a1)
        c2 = self._local_set(X2, loc[1], loc[3], a2)
        if self.views.exclude_view_anchors:
            c1 = c1[~np.isin(c1, a1)]
            c2 = c2[~np.isin(c2, a2)]
        if len(c1) < 2 or len(c2) < 2:
            return np.empty((0, 2), np.int64)
        H = []
        for X, c, a in ((X1, c1, a1), (X2, c2, a2)):
            D = X[c] @ X[a].T
            np.subtract(1.0, D, out=D)
            if self.views.kernel:
                sample = np.linspace(0, len(D) - 1, min(len(D), _SIGMA_SAMPLE)).astype(np.int64)
                np.multiply(D, np.float32(-1.0 / max(_median_bandwidth(D, sample), 1e-6)), out=D)
                np.exp(D, out=D)
            H.append(l2_normalize(D))
        local1 = np.full(X1.shape[0], -1, np.int64)
        local2 = np.full(X2.shape[0], -1, np.int64)
        local1[c1] = np.arange(len(c1))
        local2[c2] = np.arange(len(c2))
        lists = []
        for Hq, Hb, C, c, to_local in ((H[0], H[1], C12, c1, local2), (H[1], H[0], C21, c2, local1)):
            E = C[c]
            E = np.where(E >= 0, to_local[np.maximum(E, 0)], -1)
            sims = self._edge_sims(Hq, Hb, np.maximum(E, 0))
            sims[E < 0] = -np.inf
            o = np.argsort(-sims, axis=1, kind="stable")
            lists += [np.take_along_axis(E, o, 1), np.take_along_axis(sims, o, 1)]
        pairs = csls_mutual_from_knn(*lists, int(self.k_csls))[0]
        return np.stack([c1[pairs[:, 0]], c2[pairs[:, 1]]], axis=1)

    def _mnn(self, A: np.ndarray, B: np.ndarray):
        """CSLS mutual nearest neighbours between two L2-normalised clouds of one dimension: (pairs, scores); with
        ``runner_up_margin`` a pair's score adds how far it beats both rows' runner-ups."""
        k = int(self.k_csls)
        i12, s12 = KnnIndex(B, normalize=False, exact_max=_EXACT_MAX).search(A, k)
        i21, s21 = KnnIndex(A, normalize=False, exact_max=_EXACT_MAX).search(B, k)
        pairs, scores, r_y, r_x = csls_mutual_from_knn(i12, s12, i21, s21, k)
        if self.votes.runner_up_margin:
            scores = scores + runner_up_margin(i12, s12, i21, s21, pairs, r_y, r_x)
        return pairs, scores

    def _mapped(self, X1, X2, L1, L2, folds):
        """``X1`` mapped into ``X2``'s space by orthogonal Procrustes on the links; with ``folds``, each row by the map
        fitted on the links whose E1 row lies in another fold (cross-fitting: no row is scored by a map fitted on its
        own link, so a wrong link cannot raise its own score)."""
        if folds is None:
            return l2_normalize(X1 @ procrustes_rotation(X1[L1], X2[L2]))
        Y = np.empty((X1.shape[0], X2.shape[1]), dtype=np.float32)
        for f in range(int(folds.max()) + 1):
            train = folds[L1] != f
            rows = folds == f
            Y[rows] = X1[rows] @ procrustes_rotation(X1[L1[train]], X2[L2[train]])
        return l2_normalize(Y)

    def _refine(self, X1, X2, link1, link2, S, rng=None):
        """Optional last stage (ours, not in the paper): fit an orthogonal Procrustes map on the GEH links, take CSLS
        mutual nearest neighbours under it; ``refine_iter`` rounds, seeds always kept. Intermediate rounds keep the
        pairs whose score lies in the upper mode of a two-Gaussian mixture (posterior >= 0.5).

        ``calibrate=False``: the last round keeps the same mixture's upper mode (the previous default); its posterior
        is returned. ``calibrate=True``: every map is cross-fitted (``_CROSS_FOLDS`` folds of E1 rows), and the last
        round's pairs get a label-free calibrated confidence from partner-removal decoys (:func:`_decoy_calibration`);
        no cut is applied here. Returns ``(L1, L2, scores, posterior, precision_at, info)``."""
        n1, n2 = X1.shape[0], X2.shape[0]
        # a held-out map needs links spanning its dimension; below that, the previous (uncalibrated) refinement
        calibrate = bool(self.votes.calibrate) and len(link1) >= min(X1.shape[1], X2.shape[1])
        folds = rng.integers(0, _CROSS_FOLDS, n1) if calibrate else None
        L1, L2 = link1, link2
        rounds = max(1, int(self.refine_iter))
        info = {}
        for it in range(rounds):
            Y = self._mapped(X1, X2, L1, L2, folds)
            pairs, sc = self._mnn(Y, X2)
            last = it == rounds - 1
            if last and calibrate:
                post, prec, info = self._calibrate(Y, X2, pairs, sc, rng)
                # held-out seed agreement: each seed's E1 row is mapped by a map fitted without it (cross-fitting);
                # a seed agrees when its partner is among that row's k_csls nearest E2 rows
                sims = Y[S[:, 0]] @ X2.T
                own = sims[np.arange(len(S)), S[:, 1]]
                info["seed_agreement"] = float(np.mean((sims > own[:, None]).sum(axis=1) < int(self.k_csls)))
                keep = np.ones(len(pairs), bool)
            else:
                post = _gmm_high_posterior(sc)
                prec = post
                keep = post >= 0.5
            pairs, sc, post, prec = pairs[keep], sc[keep], post[keep], prec[keep]
            order = np.argsort(-sc, kind="stable")
            used1 = np.zeros(n1, bool)
            used2 = np.zeros(n2, bool)
            used1[S[:, 0]] = True
            used2[S[:, 1]] = True
            acc = order[_greedy_one_to_one(pairs[order, 0], pairs[order, 1], used1, used2)]
            L1 = np.concatenate([S[:, 0], pairs[acc, 0]])
            L2 = np.concatenate([S[:, 1], pairs[acc, 1]])
            scores = np.concatenate([np.full(len(S), np.inf), sc[acc]])
            posts = np.concatenate([np.ones(len(S)), post[acc]])
            precs = np.concatenate([np.ones(len(S)), prec[acc]])
        return L1, L2, scores, posts, precs, info

    def _calibrate(self, Y, X2, pairs, sc, rng):
        """Partner-removal decoys (ours): for a random quarter of the links, delete the E2 partner and see which of
        those E1 rows form a new mutual pair (and with which score); then the same with E1 partners deleted. Feeds
        :func:`_decoy_calibration`; about two extra neighbour searches."""
        n1, n2 = Y.shape[0], X2.shape[0]
        decoys, n_rows = [], 0
        if len(pairs) >= 8:
            for side in (0, 1):
                H = rng.choice(len(pairs), max(1, int(_DECOY_FRACTION * len(pairs))), replace=False)
                n_rows += len(H)
                if side == 0:
                    keep = np.ones(n2, bool)
                    keep[pairs[H, 1]] = False
                    p2, s2 = self._mnn(Y, X2[keep])
                    hit = np.isin(p2[:, 0], pairs[H, 0])
                else:
                    keep = np.ones(n1, bool)
                    keep[pairs[H, 0]] = False
                    p2, s2 = self._mnn(Y[keep], X2)
                    hit = np.isin(p2[:, 1], pairs[H, 1])
                decoys.append(s2[hit])
        dec = np.concatenate(decoys) if decoys else np.empty(0)
        n_unlinked = (n1 + n2) / 2.0 - len(pairs)
        post, prec, (N, r) = _decoy_calibration(sc.astype(np.float64), dec, n_rows, int(round(n_unlinked)))
        if not decoys:
            post, prec = np.zeros(len(pairs)), np.zeros(len(pairs))
        return post, prec, {"n_partnerless": N, "decoy_rate": r, "n_decoys": int(len(dec)),
                            "n_candidates": int(len(pairs))}

    def _trace(self, record: dict, link1: np.ndarray, link2: np.ndarray):
        """Hook called after every iteration (no-op; subclasses may record the pool for diagnostics)."""

    # --------------------------------------------------------------------------------------------------------------
    def fit(self, X1, X2, seed_pairs):
        """Link rows of ``X1`` (n1, d1) to rows of ``X2`` (n2, d2) from ``seed_pairs`` ((s, 2) row indices, s >= 5);
        returns self with ``links_``, ``confidence_`` and the diagnostics above."""
        self._validate_params()
        with thread_limit(self.n_threads):
            return self._fit(X1, X2, seed_pairs)

    def _fit(self, X1, X2, seed_pairs):
        t_start = time.perf_counter()
        fit, rng = self._inputs(X1, X2, seed_pairs)
        pool, history, stop = self._bootstrap(fit, rng)
        n_seeds = len(fit.S)
        nu, theta = pool.posterior(pool.link1, pool.link2, pool.is_seed)
        self.geh_links_ = np.stack([pool.link1, pool.link2], axis=1)
        self.geh_confidence_ = theta
        self._check_grown(len(pool.link1) - n_seeds, n_seeds, len(history))
        self.refined_ = False
        self.estimated_precision_ = None
        self.calibration_ = None
        self.seed_agreement_ = None
        link1, link2, is_seed, post, prec = pool.link1, pool.link2, pool.is_seed, None, None
        if self.refine == "procrustes" and len(link1) >= _REFINE_MIN_LINKS:
            link1, link2, is_seed, post, prec = self._refined(fit, link1, link2, rng)
            nu, theta = pool.posterior(link1, link2, is_seed)
        self.links_ = np.stack([link1, link2], axis=1)
        self.vote_confidence_ = theta
        calibrated = self.calibration_ is not None
        self.confidence_ = post if calibrated else theta
        self.precision_at_ = prec if calibrated else None
        if self.refined_:
            self.refine_posterior_ = post
        self.votes_ = nu
        self.is_seed_ = is_seed
        self.n_iter_ = len(history)
        self.n_views_ = pool.n_views
        self.history_ = history
        self.stop_reason_ = stop
        self.fit_seconds_ = time.perf_counter() - t_start
        return self

    def _inputs(self, X1, X2, seed_pairs):
        """Unit rows, checked seeds, the anchor-distance caches, the bandwidth samples and, above
        ``large_threshold`` rows, one neighbour index per side (App. B.3, built once). Returns ``(_Inputs, rng)``."""
        X1 = l2_normalize(check_vectors(X1, "X1", dtype=np.float32))
        X2 = l2_normalize(check_vectors(X2, "X2", dtype=np.float32))
        n1, n2 = X1.shape[0], X2.shape[0]
        S = check_seed_pairs(seed_pairs, n1, n2)
        rng = np.random.default_rng(self.random_state)
        d1 = _AnchorDistances(X1, self.search.max_cache_bytes // 2)
        d2 = _AnchorDistances(X2, self.search.max_cache_bytes // 2)
        samp1 = rng.permutation(n1)[:_SIGMA_SAMPLE]
        samp2 = rng.permutation(n2)[:_SIGMA_SAMPLE]
        loc = None
        if max(n1, n2) > self.search.large_threshold:   # each anchor's k_nn list is then looked up once
            idx1 = KnnIndex(X1, normalize=False, exact_max=_EXACT_MAX, seed=int(rng.integers(1 << 30)))
            idx2 = KnnIndex(X2, normalize=False, exact_max=_EXACT_MAX, seed=int(rng.integers(1 << 30)))
            loc = (idx1, idx2, {}, {})
        return _Inputs(X1, X2, S, d1, d2, samp1, samp2, loc), rng

    def _bootstrap(self, fit: _Inputs, rng):
        """Section 4 iterated: views, proposals, votes, promotion, until a stopping rule holds (one iteration on the
        seeds without ``bootstrap``). Returns ``(pool, history, stop reason)``."""
        pool = _Pool(fit.S[:, 0].copy(), fit.S[:, 1].copy(), np.ones(len(fit.S), dtype=bool), fit.n2,
                     sizes=[len(fit.S)], support=[0.0])
        history = []
        for t in range(1, (self.max_iter if self.votes.bootstrap else 1) + 1):
            t0 = time.perf_counter()
            views, P = self._proposals(fit, pool, rng)
            self._count_votes(pool, P, len(views))
            pool.ratios.append((len(np.unique(P[:, 0])) + len(np.unique(P[:, 1]))) / max(fit.n1, fit.n2))
            thr, thr_eff, n_promoted, n_new, n_dropped = self._promote(fit, pool)
            rec = dict(iteration=t, n_views=len(views), view_size=int(len(views[0])) if views else 0,
                       n_proposals=int(len(P)), n_candidates=int(len(pool.keys)), mnn_ratio=float(pool.ratios[-1]),
                       otsu_votes=float(thr), min_votes=float(thr_eff), n_promoted=n_promoted,
                       n_links=int(len(pool.link1)), n_new=n_new, n_dropped=n_dropped,
                       seconds=time.perf_counter() - t0)
            history.append(rec)
            self._trace(rec, pool.link1, pool.link2)
            if self.verbose:
                print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rec.items()}, flush=True)
            stop = self._stop_reason(t, len(P), pool, len(fit.S), rec)
            if stop:
                return pool, history, stop
        return pool, history, "max_iter"

    def _proposals(self, fit: _Inputs, pool: _Pool, rng):
        """Components 1-4 of one iteration: the view schedule, the views (FPS over the pool's E1 side) and each view's
        CSLS mutual-pair proposals, stacked. Returns ``(views, proposals)``."""
        m_t, s_t, _ = self._schedule(len(pool.link1), len(fit.S))
        m_t = max(m_t, int(self.views.min_views)) if self.views.multi_view else 1
        if self.views.max_view_size:
            s_t = min(s_t, int(self.views.max_view_size))
        stale = pool.C12 is None or pool.changed > self.search.shortlist_refresh * len(pool.link1)
        link1, link2, X1 = pool.link1, pool.link2, fit.X1
        if fit.loc is not None:
            if stale:
                pool.C12, pool.C21 = self._shortlists(rng, fit, link1, link2)
                pool.changed = 0
            m_t = max(m_t, int(math.ceil(self.search.coverage * max(fit.n1, fit.n2) / self.search.local_size)))
            views = self._views(rng, link1, pool.is_seed, s_t, m_t, lambda p, q: 1.0 - X1[p] @ X1[q].T,
                                self.views.fps_pool_factor or 2.0)
            props = [self._propose_local(link1[pos], link2[pos], X1, fit.X2, fit.loc, pool.C12, pool.C21)
                     for pos in views]
        else:
            if self.search.shortlist and stale:
                pool.C12, pool.C21 = self._shortlists(rng, fit, link1, link2)
                pool.changed = 0
            views = self._views(rng, link1, pool.is_seed, s_t, m_t, fit.d1.get, self.views.fps_pool_factor)
            props = [self._propose(link1[pos], link2[pos], fit.d1, fit.d2, fit.samp1, fit.samp2, pool.C12, pool.C21)
                     for pos in views]
        return views, (np.concatenate(props) if props else np.empty((0, 2), np.int64))

    def _count_votes(self, pool: _Pool, P: np.ndarray, n_views: int):
        """One vote per view for each proposed pair, added to the decayed votes of the candidate universe C_t
        (candidates whose votes decayed below 0.25 leave it); N_{<=t} decays alike."""
        decay = self.votes.vote_decay
        new_keys, new_counts = np.unique(P[:, 0] * pool.n2 + P[:, 1], return_counts=True)
        allk = np.concatenate([pool.keys, new_keys])
        allv = np.concatenate([pool.votes * decay, new_counts.astype(np.float64)])
        keys, inv = np.unique(allk, return_inverse=True)
        votes = np.bincount(inv, weights=allv)
        live = votes >= 0.25
        pool.keys, pool.votes = keys[live], votes[live]
        pool.n_views = pool.n_views * decay + n_views

    def _promote(self, fit: _Inputs, pool: _Pool):
        """Component 5: candidates at Otsu's threshold of the votes (and ``min_votes``), most votes first, kept
        one-to-one with the seeds locked in, the pool growing at most ``max_growth`` x. Recomputes L_t; returns
        ``(Otsu threshold, threshold applied, promoted, links added, links dropped)``."""
        S, n2 = fit.S, fit.n2
        thr = _otsu(pool.votes)
        thr_eff = max(thr, float(self.votes.min_votes))
        prom = np.flatnonzero(pool.votes >= thr_eff - 1e-9)
        order = prom[np.lexsort((pool.keys[prom], -pool.votes[prom]))]
        pu, pv = pool.keys[order] // n2, pool.keys[order] % n2
        used1 = np.zeros(fit.n1, bool)
        used2 = np.zeros(n2, bool)
        used1[S[:, 0]] = True
        used2[S[:, 1]] = True
        acc = _greedy_one_to_one(pu, pv, used1, used2)
        if self.votes.max_growth is not None:
            acc = acc[:max(int(math.floor(self.votes.max_growth * len(pool.link1))) - len(S), 0)]
        prev = set(zip(pool.link1.tolist(), pool.link2.tolist()))
        pool.link1 = np.concatenate([S[:, 0], pu[acc]])
        pool.link2 = np.concatenate([S[:, 1], pv[acc]])
        pool.is_seed = np.zeros(len(pool.link1), bool)
        pool.is_seed[:len(S)] = True
        cur = set(zip(pool.link1.tolist(), pool.link2.tolist()))
        pool.changed += len(cur - prev) + len(prev - cur)
        return thr, thr_eff, int(len(prom)), len(cur - prev), len(prev - cur)

    def _stop_reason(self, t: int, n_proposals: int, pool: _Pool, n_seeds: int, rec: dict) -> str | None:
        """The stopping rules after iteration ``t``: no proposal left; the MNN ratio stable over ``t_min`` iterations
        (App. C.2.1); L_t stable, its size and mean vote support both moving by < ``churn_tol`` (the main text).
        None: go on."""
        if n_proposals == 0:
            return "no_mutual_pairs"
        t_min, ratios, sizes, support = self.stopping.t_min, pool.ratios, pool.sizes, pool.support
        if t > t_min and max(abs(ratios[i] - ratios[i - 1]) for i in range(t - t_min, t)) < self.stopping.tol:
            return "mnn_ratio_stable"
        sizes.append(len(pool.link1))
        packed = pool.link1[n_seeds:] * pool.n2 + pool.link2[n_seeds:]
        kidx = np.minimum(np.searchsorted(pool.keys, packed), max(len(pool.keys) - 1, 0))
        support.append(float(np.mean(pool.votes[kidx])) / max(pool.n_views, 1.0) if len(packed) else 0.0)
        rec["support"] = support[-1]
        patience = self.stopping.patience
        if (self.stopping.churn_tol is not None and t >= max(self.stopping.min_iter, patience + 1)
                and all(abs(sizes[-i] - sizes[-i - 1]) < self.stopping.churn_tol * sizes[-i - 1]
                        and abs(support[-i] - support[-i - 1]) < self.stopping.churn_tol * support[-i - 1]
                        for i in range(1, patience + 1))):
            return "links_stable"
        return None

    def _check_grown(self, n_grown: int, n_seeds: int, n_iter: int):
        """The take-off check on the bootstrap alone: at least ``min_grown`` links beyond the seeds."""
        min_grown = int(self.votes.min_grown)
        if min_grown and n_grown < min_grown:
            raise CheckFailed(
                f"GEH: bootstrapping never took off: {n_grown} links grew beyond the {n_seeds} seed pairs "
                f"(at least {min_grown} needed, after {n_iter} iterations); {_ADVICE}")

    def _refined(self, fit: _Inputs, link1, link2, rng):
        """The refinement stage (ours) and, when it calibrated, the cut at ``min_confidence``. Returns
        ``(link1, link2, is_seed, posterior, precision_at)``."""
        t0 = time.perf_counter()
        link1, link2, self.scores_, post, prec, info = self._refine(fit.X1, fit.X2, link1, link2, fit.S, rng)
        self.refine_seconds_ = time.perf_counter() - t0
        is_seed = np.zeros(len(link1), bool)
        is_seed[:len(fit.S)] = True
        self.refined_ = True
        if info:
            link1, link2, is_seed, post, prec = self._calibrated_cut(fit, link1, link2, is_seed, post, prec, info)
        return link1, link2, is_seed, post, prec

    def _calibrated_cut(self, fit: _Inputs, link1, link2, is_seed, post, prec, info: dict):
        """Links ranked by their calibrated confidence and cut at ``min_confidence`` (seeds always kept), then the
        take-off checks the calibration allows."""
        self.calibration_ = {**info, "candidates": np.stack([link1, link2], axis=1)[~is_seed],
                             "candidate_confidence": post[~is_seed], "candidate_scores": self.scores_[~is_seed]}
        keep = is_seed | (post >= float(self.votes.min_confidence))
        order = np.flatnonzero(keep)
        order = order[np.lexsort((-self.scores_[order], -post[order], ~is_seed[order]))]
        link1, link2, post, prec = link1[order], link2[order], post[order], prec[order]
        self.scores_ = self.scores_[order]
        is_seed = is_seed[order]
        found = post[~is_seed]
        self.estimated_precision_ = float(found.mean()) if len(found) else None
        self.seed_agreement_ = info["seed_agreement"]
        self._check_calibrated(fit, info, len(found))
        return link1, link2, is_seed, post, prec

    def _check_calibrated(self, fit: _Inputs, info: dict, n_found: int):
        """The take-off checks on the calibrated links: mutual pairs more frequent than chance pairings, the
        held-out seed agreement, at least ``min_grown`` links past the cut."""
        min_grown = int(self.votes.min_grown)
        if not min_grown:
            return
        n_seeds = len(fit.S)
        n_avg = (fit.n1 + fit.n2) / 2.0
        if n_avg - info["n_partnerless"] < min_grown:
            raise CheckFailed(
                f"GEH: bootstrapping never took off: its mutual pairs are no more frequent than chance pairings "
                f"would be if almost no row had a partner (as if {min(info['n_partnerless'], n_avg):,.0f} of "
                f"{n_avg:,.0f} rows had none: the grown links cannot tell the true pairs apart); {_ADVICE}")
        if info["seed_agreement"] < _MIN_SEED_AGREEMENT:
            raise CheckFailed(
                f"GEH: bootstrapping never took off: the map of the {n_found} grown links puts only "
                f"{info['seed_agreement']:.0%} of the {n_seeds} seed pairs among each other's "
                f"{int(self.k_csls)} nearest neighbours (at least {_MIN_SEED_AGREEMENT:.0%} needed); {_ADVICE}")
        if n_found < min_grown:
            raise CheckFailed(
                f"GEH: bootstrapping never took off: only {n_found} of {len(self.calibration_['candidates'])} links "
                f"beyond the {n_seeds} seed pairs reach confidence {float(self.votes.min_confidence):.2f} "
                f"(at least {min_grown} needed); {_ADVICE}")
