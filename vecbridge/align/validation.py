"""Label-free validation of a map between two embedding spaces, from two *unpaired* samples alone.

An unsupervised fit (mini-vec2vec) or a seed-grown one (GEH links, then Procrustes) can fail without any error: it
converges, its residuals look normal, and it sends every vector to a wrong place. Nobody holds true pairs then, so
:func:`validate_map` asks, of a source sample and a target sample that share no item, "is this map better than a
wrong map could be?".

It starts from MUSE's unsupervised model selection ("Word Translation Without Parallel Data", Conneau et al., ICLR
2018: the mean cosine of CSLS mutual nearest neighbours, ``mnn_similarity``) and departs twice: the null maps are
random maps *refined* by the nearest-neighbour Procrustes steps unsupervised fitters run (:func:`refine_icp`), as is
the map under test, and ``gain`` compares the two optima; and ``agreement`` (the share of rows whose image is
nearest its own refined image) requires the map to sit near that optimum. Refinements and criteria use disjoint
halves of each sample. Decision: ``min(gain / GAIN_MIN, agreement / AGREEMENT_MIN) >= THRESHOLD``, one rule for both
corpora; a map short of GAIN_MIN passes at ``CONFIRMED_THRESHOLD`` when its fit saw an independent start reach the same
map (:func:`reproduction`, ``MiniVec2Vec(confirm=True)``). Why each step, and the measurements (ROC AUC, accuracy,
limits): docs/design.md, "Label-free validation".
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import InputError
from ..numeric.linalg import polar, procrustes_rotation
from ..numeric.neighbors import knn, mutual_nearest_neighbours
from ..validation import check_vectors
from ..vectors import l2_normalize

#: the decision (chosen on both corpora of ``bench/map_validation.py``): a map passes when, refined, it stands
#: GAIN_MIN (cosine) above refined random maps *and* agrees with its refined version on AGREEMENT_MIN of the rows;
#: ``score = min(gain / GAIN_MIN, agreement / AGREEMENT_MIN)``, so ``passed = score >= THRESHOLD`` (1)
GAIN_MIN = 0.045
AGREEMENT_MIN = 0.95
THRESHOLD = 1.0
#: a map short of GAIN_MIN that an independent start of the fit reproduced (``MiniVec2Vec``: another start's map sends
#: at least REPRODUCTION_MIN of the rows to the same nearest target row) passes at CONFIRMED_THRESHOLD (a gain of
#: GAIN_MIN / 2), AGREEMENT_MIN still required (chosen on both corpora of ``bench/reproduced_starts.py``)
REPRODUCTION_MIN = 0.30
CONFIRMED_THRESHOLD = 0.5
#: refined random maps in the null; refinement: steps, rows per step, target neighbours averaged per step
N_NULL = 4
REFINE_ITER = 25
REFINE_BATCH = 1000
REFINE_NEIGHBORS = 30
#: CSLS neighbourhood of the mutual-nearest-neighbour criterion
K_CSLS = 10
#: rows per side that validation uses at most (a larger sample is subsampled)
MAX_ROWS = 2000
#: rows per side below which a validation is not attempted
MIN_ROWS = 100


@dataclass
class MapValidation:
    """The outcome of :func:`validate_map` (every similarity is a cosine between centred, unit-length vectors)."""

    score: float                  # min(gain / GAIN_MIN, agreement / AGREEMENT_MIN): passed when >= threshold
    threshold: float
    passed: bool
    reason: str                   # one sentence: what was compared, and the verdict
    gain: float                   # refined_similarity - null_mean: does the map's basin stand out?
    agreement: float              # share of rows the map sends where its refined version does: is it near the optimum?
    mnn_similarity: float         # MUSE's criterion for the map itself
    refined_similarity: float     # the same for the map after the refinement the null maps get
    null_mean: float              # the same for random orthogonal maps after that refinement
    null_std: float
    random_similarity: float      # the same for the random orthogonal maps before refinement (MUSE-style null)
    z: float                      # gain / null_std
    mnn_fraction: float           # share of the mapped rows that have a mutual nearest neighbour
    cycle_consistency: float | None   # share of source rows that map, match and map back to themselves
    n_source: int
    n_target: int
    confirmation: dict | None = None  # the fit's evidence that an independent start reproduced the map, if any

    def as_dict(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass
class NullDistribution:
    """The criterion of refined random orthogonal maps on one pair of samples (reusable for several maps validated
    on the same samples with the same ``random_state``: it does not depend on the map)."""

    refined: np.ndarray           # criterion of each refined random map on the scoring rows
    random: np.ndarray            # criterion of each random map before refinement
    seed: int


def decide(gain: float, agreement: float, *, gain_min: float = GAIN_MIN, agreement_min: float = AGREEMENT_MIN,
           threshold: float = THRESHOLD, confirmation: dict | None = None) -> tuple[float, bool, str]:
    """``(score, passed, reason)`` from the two measured quantities (the rule of the module docstring); with the
    fit's ``confirmation`` (:func:`confirmed`) a map short of ``gain_min`` passes at :data:`CONFIRMED_THRESHOLD`."""
    score = min(gain / gain_min, agreement / agreement_min)
    passed = bool(score >= threshold)
    if not passed and confirmed(confirmation) and confirmable(gain, agreement, gain_min, agreement_min):
        return float(score), True, (
            f"refined, the map stands {gain:+.3f} above refined random maps, short of the {gain_min:.3f} one start "
            f"needs alone but above {CONFIRMED_THRESHOLD * gain_min:.3f}, and an independent start of the fit "
            f"({confirmation['by']}) reached the same map ({confirmation['reproduction']:.0%} of the rows share their "
            f"nearest target, at least {REPRODUCTION_MIN:.0%} needed)")
    if passed:
        reason = (f"refined, the map stands {gain:+.3f} above refined random maps (at least {gain_min:.3f} needed) and "
                  f"agrees with its refined version on {agreement:.1%} of the rows")
    elif gain < gain_min * threshold:
        reason = (f"refined, the map stands only {gain:+.3f} above refined random maps (at least {gain_min:.3f} "
                  f"needed): it has converged to a wrong alignment")
    else:
        reason = (f"the map lies near a good alignment but agrees with it on only {agreement:.1%} of the rows (at "
                  f"least {agreement_min:.0%} needed): too inaccurate to use")
    return float(score), passed, reason


def confirmed(confirmation: dict | None) -> bool:
    """Whether a fit's evidence (``{"by": which start, "reproduction": share}``) confirms its map: an independent
    start reproduced it on at least :data:`REPRODUCTION_MIN` of the rows."""
    return bool(confirmation) and confirmation.get("reproduction", 0.0) >= REPRODUCTION_MIN


def confirmable(gain: float, agreement: float, gain_min: float = GAIN_MIN, agreement_min: float = AGREEMENT_MIN
                ) -> bool:
    """Whether a map may pass by confirmation: clearly above refined random maps (a gain of at least
    ``CONFIRMED_THRESHOLD * gain_min``) and near its refined optimum (``agreement_min``)."""
    return gain >= CONFIRMED_THRESHOLD * gain_min and agreement >= agreement_min


def random_orthogonal(d_in: int, d_out: int, rng: np.random.Generator) -> np.ndarray:
    """A Haar-random ``d_in x d_out`` map with orthonormal rows (``d_in <= d_out``) or columns (otherwise)."""
    n = max(d_in, d_out)
    Q, R = np.linalg.qr(rng.standard_normal((n, n)))
    return (Q * np.sign(np.diag(R)))[:d_in, :d_out]


def _unit_centred(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float32)
    return l2_normalize(X - X.mean(axis=0, dtype=np.float64).astype(np.float32))


def mnn_similarity(M: np.ndarray, Y: np.ndarray, *, k_csls: int = K_CSLS, backend: str = "auto"):
    """MUSE's criterion ("Word Translation Without Parallel Data", Conneau et al., ICLR 2018): the mean cosine of the
    CSLS mutual nearest neighbours between mapped rows ``M`` and target rows ``Y`` (both unit length), and the share
    of rows that have one. Returns ``(similarity, fraction)``."""
    del backend   # mutual_nearest_neighbours works block by block in numpy
    pairs, _ = mutual_nearest_neighbours(M, Y, k_csls=k_csls)
    if len(pairs) == 0:
        return 0.0, 0.0
    cos = np.einsum("ij,ij->i", M[pairs[:, 0]], Y[pairs[:, 1]])
    return float(cos.mean()), float(len(pairs) / min(len(M), len(Y)))


def refine_icp(A: np.ndarray, B: np.ndarray, W: np.ndarray, *, n_iter: int = REFINE_ITER, batch: int = REFINE_BATCH,
               k: int = REFINE_NEIGHBORS, alpha: float = 0.5, rng: np.random.Generator, backend: str = "auto"):
    """Nearest-neighbour Procrustes refinement (iterative closest point, as mini-vec2vec's Refine-1 and the
    self-learning loops of MUSE and VecMap): map a batch of rows of ``A``, average each one's ``k`` nearest rows of
    ``B``, refit the orthogonal map and smooth ``W <- (1 - alpha) W + alpha W_new``. ``A``, ``B``: unit rows."""
    for _ in range(n_iter):
        idx = rng.choice(len(A), min(batch, len(A)), replace=False)
        nbr = knn(A[idx] @ W.astype(np.float32), B, k, backend=backend)[0]
        centre = B[nbr[:, 0]].copy()
        for j in range(1, nbr.shape[1]):    # one (batch, d) gather at a time, not a (batch, k, d) temporary
            centre += B[nbr[:, j]]
        W = (1.0 - alpha) * W + alpha * procrustes_rotation(A[idx], centre / nbr.shape[1])
    return W


def reproduction(X: np.ndarray, Y: np.ndarray, W1: np.ndarray, W2: np.ndarray, *, backend: str = "auto") -> float:
    """Share of the source rows ``X`` whose nearest target row of ``Y`` (cosine) is the same under the maps ``W1``
    and ``W2`` (``X``, ``Y``: centred unit rows): two independent starts that reach one map agree on most rows, two
    unrelated maps on about ``1 / len(Y)`` of them."""
    first = knn(X @ np.asarray(W1, dtype=np.float32), Y, 1, backend=backend)[0][:, 0]
    second = knn(X @ np.asarray(W2, dtype=np.float32), Y, 1, backend=backend)[0][:, 0]
    return float(np.mean(first == second))


def _split(n: int, rng: np.random.Generator):
    """(rows that refine, rows that score): two random halves."""
    order = rng.permutation(n)
    return order[: n // 2], order[n // 2:]


def _prepare(X_src, Y_tgt, rng: np.random.Generator):
    X = check_vectors(X_src, "source sample", dtype=np.float32)
    Y = check_vectors(Y_tgt, "target sample", dtype=np.float32)
    if min(len(X), len(Y)) < MIN_ROWS:
        raise InputError(f"validating a map needs at least {MIN_ROWS} vectors per side, got {len(X)} and {len(Y)}")
    if len(X) > MAX_ROWS:
        X = X[np.sort(rng.choice(len(X), MAX_ROWS, replace=False))]
    if len(Y) > MAX_ROWS:
        Y = Y[np.sort(rng.choice(len(Y), MAX_ROWS, replace=False))]
    return X, Y


def _seed(random_state) -> int:
    """An int seed (a Generator gives one draw), so that :func:`null_distribution` and :func:`validate_map` split the
    samples alike."""
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**31))
    return 0 if random_state is None else int(random_state)


class _Samples:
    """Both samples subsampled, centred, unit rows and split into refining and scoring halves, deterministically for
    a seed (the null and the map see the same rows)."""

    def __init__(self, X_src, Y_tgt, seed: int):
        r_sub, r_xs, r_ys, self.rng = np.random.default_rng(seed).spawn(4)
        self.X, self.Y = _prepare(X_src, Y_tgt, r_sub)
        self.Xc, self.Yc = _unit_centred(self.X), _unit_centred(self.Y)
        (self.xf, self.xs), (self.yf, self.ys) = _split(len(self.X), r_xs), _split(len(self.Y), r_ys)

    def refine(self, W, backend: str):
        return refine_icp(self.Xc[self.xf], self.Yc[self.yf], W, rng=self.rng, backend=backend)

    def images(self, W) -> np.ndarray:
        """The scoring source rows through the orthogonal map ``W`` (unit rows)."""
        return l2_normalize(self.Xc[self.xs] @ np.asarray(W, dtype=np.float32))

    def criterion(self, images: np.ndarray, backend: str):
        return mnn_similarity(images, self.Yc[self.ys], backend=backend)


def null_distribution(X_src, Y_tgt, *, n_null: int = N_NULL, random_state=0, backend: str = "auto"
                      ) -> NullDistribution:
    """The criterion of ``n_null`` random orthogonal maps, before and after :func:`refine_icp` on the refining
    halves, scored on the scoring halves (see the module docstring). :func:`validate_map` calls it unless given
    one computed on the same samples with the same ``random_state``."""
    seed = _seed(random_state)
    S = _Samples(X_src, Y_tgt, seed)
    refined, raw = [], []
    for _ in range(int(n_null)):
        W = random_orthogonal(S.X.shape[1], S.Y.shape[1], S.rng)
        raw.append(S.criterion(S.images(W), backend)[0])
        refined.append(S.criterion(S.images(S.refine(W, backend)), backend)[0])
    return NullDistribution(np.asarray(refined), np.asarray(raw), seed)


def _orthogonal_part(X: np.ndarray, M: np.ndarray) -> np.ndarray:
    """The orthogonal map nearest to what ``transform`` does to the centred sample: the polar factor of the least
    squares fit ``(X - mean) W ~ (M - mean)`` (exactly W for a scaled orthogonal map; the estimator's own rotation
    is not needed, so any transform will do)."""
    Xc = (X - X.mean(axis=0)).astype(np.float64)
    Mc = (M - M.mean(axis=0)).astype(np.float64)
    W = np.linalg.lstsq(Xc, Mc, rcond=None)[0]
    return polar(W)


def _cycle(transform, X: np.ndarray, M: np.ndarray, Y: np.ndarray, backend: str) -> float | None:
    """Share of source rows x with NN_X(T^-1(NN_Y(T(x)))) == x, centred cosine throughout; None without an
    inverse."""
    inverse = getattr(transform, "inverse_transform", None)
    if inverse is None:
        return None
    j = knn(_unit_centred(M), _unit_centred(Y), 1, backend=backend)[0][:, 0]
    back = np.asarray(inverse(Y), dtype=np.float32)
    i = knn(_unit_centred(back)[j], _unit_centred(X), 1, backend=backend)[0][:, 0]
    return float(np.mean(i == np.arange(len(X))))


def validate_map(transform, X_src_sample, Y_tgt_sample, *, n_null: int = N_NULL, threshold: float = THRESHOLD,
                 null: NullDistribution | None = None, random_state=0, backend: str = "auto",
                 confirmation: dict | None = None) -> MapValidation:
    """Judge ``transform`` (anything with ``transform(X)``: a fitted estimator or an
    :class:`~vecbridge.align.Alignment`) from a source sample and a target sample that share no item (no labels).

    ``null`` reuses a :func:`null_distribution` of the same samples and ``random_state``; ``confirmation``: the fit's
    evidence that an independent start reproduced the map (``MiniVec2Vec.confirmation_``; see :func:`decide`).
    Returns a :class:`MapValidation`; ``passed`` is the decision.
    """
    seed = _seed(random_state)
    if null is None:
        null = null_distribution(X_src_sample, Y_tgt_sample, n_null=n_null, random_state=seed, backend=backend)
    elif null.seed != seed:
        raise InputError("the null distribution was computed with another random_state")
    S = _Samples(X_src_sample, Y_tgt_sample, seed)
    M = np.asarray(transform.transform(S.X), dtype=np.float32)
    if M.ndim != 2 or M.shape != (len(S.X), S.Y.shape[1]):
        raise InputError(f"the map gives vectors of shape {M.shape[1:]} for a {S.Y.shape[1]}-d target sample")
    own = _unit_centred(M)[S.xs]
    sim, frac = S.criterion(own, backend)
    refined = S.images(S.refine(_orthogonal_part(S.X, M), backend))
    ref_sim = S.criterion(refined, backend)[0]
    agreement = float(np.mean(knn(own, refined, 1, backend=backend)[0][:, 0] == np.arange(len(own))))
    null_mean, null_std = float(null.refined.mean()), float(null.refined.std())
    gain = ref_sim - null_mean
    score, passed, reason = decide(gain, agreement, threshold=threshold, confirmation=confirmation)
    if passed and score < threshold:     # passed as a confirmed map: its threshold is the one it met
        threshold = CONFIRMED_THRESHOLD
    z = gain / null_std if null_std > 0 else math.copysign(math.inf, gain)
    cycle = _cycle(transform, S.X[S.xs], M[S.xs], S.Y[S.ys], backend)
    return MapValidation(score=score, threshold=float(threshold), passed=passed, reason=reason, gain=float(gain),
                         agreement=agreement, mnn_similarity=sim, refined_similarity=ref_sim, null_mean=null_mean,
                         null_std=null_std, random_similarity=float(null.random.mean()), z=float(z),
                         mnn_fraction=frac, cycle_consistency=cycle, n_source=len(S.X), n_target=len(S.Y),
                         confirmation=dict(confirmation) if confirmed(confirmation) else None)
