"""Space fingerprints: which embedding model's space an unlabelled sample of vectors is in, or none.

A map fitted from model A to model B is only right for A's vectors, and two models of the same dimension cannot be
told apart by shape. A small :class:`SpaceFingerprint` of each known space lets :func:`which_space` name the space of a
sample (or refuse every one), and :func:`mixture_fractions` estimate how much of a sample comes from each space.

Everything works on row directions (rows L2-normalised): the documents and the queries of one model differ in norm,
but they share the model's mean direction, which is a strong, cheap signature of the space. Thresholds are calibrated
per fingerprint from its own data by split halves, never per corpus.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..validation import check_vectors

#: Share of the way from "unrelated direction" to "same space" (the split-half reference) that a sample's mean
#: direction must reach to be accepted. Measured margins on two corpora: same-space queries reach >= 0.67,
#: another model of the same dimension <= 0.38 (bench/space_check.py).
ACCEPT_FRACTION = 0.5

#: A space whose split-half reference cosine is below this has no mean direction to recognise it by (random or
#: whitened vectors: real sentence encoders measure 0.99 and more): the statistical test cannot tell, and says so.
MIN_REFERENCE = 0.5

#: Fewer sampled vectors than this and a sample's mean direction is too unsteady to judge a space by.
MIN_SAMPLE = 50

_UNIT_TOL = 1e-3


def _directions(X, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows as unit vectors (float64) and their original norms: the space is a property of directions."""
    arr = check_vectors(X, name)
    norms = np.linalg.norm(arr, axis=1)
    return arr / norms[:, None], norms


def _projection(dim: int, sketch_dim: int, seed: int) -> np.ndarray:
    """The random projection a sketch is taken in; regenerated from (dim, sketch_dim, seed), never stored."""
    return np.random.default_rng(seed).standard_normal((dim, sketch_dim)) / math.sqrt(dim)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(a @ b) / (na * nb) if na > 0 and nb > 0 else 0.0


def _short(values: np.ndarray) -> tuple[float, ...]:
    """float32 precision in 7 significant digits: keeps the JSON small and round-trips exactly."""
    return tuple(float(f"{v:.7g}") for v in values)


def _null_cosine(dim: int) -> float:
    """Expected |cosine| between the fingerprint mean and an unrelated (random) direction in ``dim`` dimensions."""
    return math.sqrt(2.0 / (math.pi * dim))


@dataclass(frozen=True)
class SpaceFingerprint:
    """A few KB that identify an embedding space: the mean row direction, a covariance sketch, norm statistics.

    ``mean`` is the mean of the L2-normalised rows; ``sketch`` the upper triangle (row-major) of the covariance of
    the centred unit rows in a seeded random projection to ``sketch_dim`` dimensions; ``reference_cosine`` the
    cosine between the mean directions of two disjoint halves of the fitting data (what a sample of this space gives).
    """

    dim: int
    n_vectors: int
    norm_mean: float
    norm_std: float
    unit_normalized: bool
    mean: tuple[float, ...]
    sketch: tuple[float, ...]
    sketch_dim: int
    seed: int
    reference_cosine: float
    model: str | None = None
    normalization: str | None = None
    prefixes: dict | None = None

    @classmethod
    def from_vectors(cls, X, *, model=None, normalization=None, prefixes=None, sketch_dim: int = 32,
                     seed: int = 0) -> SpaceFingerprint:
        """Fingerprint the space of ``X`` (n, dim); a few thousand documents are plenty."""
        if not isinstance(sketch_dim, (int, np.integer)) or isinstance(sketch_dim, bool) or sketch_dim < 1:
            raise InputError(f"sketch_dim must be a positive integer, got {sketch_dim!r}")
        U, norms = _directions(X, "fingerprint vectors")
        n, dim = U.shape
        if n < 4:
            raise InputError(f"fingerprint vectors: need at least 4 rows to calibrate, got {n}")
        mu = U.mean(axis=0)
        Z = (U - mu) @ _projection(dim, int(sketch_dim), int(seed))
        cov = Z.T @ Z / n
        perm = np.random.default_rng(seed).permutation(n)
        half = n // 2
        ref = _cosine(U[perm[:half]].mean(axis=0), U[perm[half:]].mean(axis=0))
        return cls(dim=int(dim), n_vectors=int(n), norm_mean=float(norms.mean()), norm_std=float(norms.std()),
                   unit_normalized=bool(np.all(np.abs(norms - 1.0) <= _UNIT_TOL)),
                   mean=_short(mu), sketch=_short(cov[np.triu_indices(int(sketch_dim))]),
                   sketch_dim=int(sketch_dim), seed=int(seed), reference_cosine=float(ref), model=model,
                   normalization=normalization, prefixes=None if prefixes is None else dict(prefixes))

    def as_dict(self) -> dict:
        """JSON-safe dict (plain floats, lists); :meth:`from_dict` restores an equal fingerprint."""
        return {"dim": self.dim, "n_vectors": self.n_vectors, "norm_mean": self.norm_mean,
                "norm_std": self.norm_std, "unit_normalized": self.unit_normalized, "mean": list(self.mean),
                "sketch": list(self.sketch), "sketch_dim": self.sketch_dim, "seed": self.seed,
                "reference_cosine": self.reference_cosine, "model": self.model,
                "normalization": self.normalization, "prefixes": None if self.prefixes is None else dict(self.prefixes)}

    @classmethod
    def from_dict(cls, d: dict) -> SpaceFingerprint:
        """Inverse of :meth:`as_dict`; a malformed dict is an :class:`InputError`, not a traceback."""
        try:
            fp = cls(dim=int(d["dim"]), n_vectors=int(d["n_vectors"]), norm_mean=float(d["norm_mean"]),
                     norm_std=float(d["norm_std"]), unit_normalized=bool(d["unit_normalized"]),
                     mean=tuple(float(v) for v in d["mean"]), sketch=tuple(float(v) for v in d["sketch"]),
                     sketch_dim=int(d["sketch_dim"]), seed=int(d["seed"]),
                     reference_cosine=float(d["reference_cosine"]), model=d.get("model"),
                     normalization=d.get("normalization"),
                     prefixes=None if d.get("prefixes") is None else dict(d["prefixes"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"space fingerprint: malformed ({type(exc).__name__}: {exc})") from None
        k = fp.sketch_dim
        if len(fp.mean) != fp.dim or len(fp.sketch) != k * (k + 1) // 2:
            raise InputError(f"space fingerprint: mean has {len(fp.mean)} values for dim {fp.dim}, "
                             f"sketch {len(fp.sketch)} for sketch_dim {k}")
        return fp

    def mean_vector(self) -> np.ndarray:
        return np.asarray(self.mean, dtype=np.float64)

    @property
    def digest(self) -> str:
        """A short stable identity of this fingerprint (its JSON), to name it in stamps and messages."""
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @property
    def distinctive(self) -> bool:
        """Whether the space has a mean direction steady enough to recognise a sample of it by."""
        return self.reference_cosine >= MIN_REFERENCE

    def label(self) -> str:
        """How messages name the space: the model when known, else its dimension and digest."""
        return f"{self.model} ({self.dim}-d)" if self.model else f"a {self.dim}-d space ({self.digest[:8]})"

    def summary(self) -> dict:
        """What ``info`` shows of a fingerprint: identity and norms, not the vectors."""
        return {"model": self.model, "dim": self.dim, "normalization": self.normalization,
                "unit_normalized": self.unit_normalized, "norm_mean": round(self.norm_mean, 4),
                "n_vectors": self.n_vectors, "prefixes": self.prefixes, "digest": self.digest}

    def score_fingerprint(self, other: "SpaceFingerprint") -> float:
        """:meth:`score` of another fingerprint's mean direction (a stamp's space against a map's side)."""
        if other.dim != self.dim:
            raise InputError(f"fingerprint: dimension {other.dim} does not match {self.dim}")
        null = _null_cosine(self.dim)
        return (_cosine(other.mean_vector(), self.mean_vector()) - null) / max(self.reference_cosine - null, 1e-12)

    def covariance_sketch(self) -> np.ndarray:
        """The full (sketch_dim, sketch_dim) covariance of the projected, centred unit rows."""
        k = self.sketch_dim
        C = np.zeros((k, k))
        C[np.triu_indices(k)] = self.sketch
        return C + np.triu(C, 1).T

    def threshold(self) -> float:
        """Cosine a sample's mean direction must reach: ACCEPT_FRACTION of the way from unrelated to same space."""
        null = _null_cosine(self.dim)
        return null + ACCEPT_FRACTION * (self.reference_cosine - null)

    def score(self, sample) -> float:
        """Calibrated similarity of a sample to this space: 0 for an unrelated direction, 1 for the split-half
        reference; accepted from ACCEPT_FRACTION up. Dimension mismatch is an :class:`InputError`."""
        U, _ = _directions(sample, "sample")
        if U.shape[1] != self.dim:
            raise InputError(f"sample: dimension {U.shape[1]} does not match the fingerprint's {self.dim}")
        return self._score_directions(U)

    def _score_directions(self, U: np.ndarray) -> float:
        null = _null_cosine(self.dim)
        return (_cosine(U.mean(axis=0), self.mean_vector()) - null) / max(self.reference_cosine - null, 1e-12)


@dataclass(frozen=True)
class SpaceMatch:
    """The answer of :func:`which_space`: the space named (None: none of them), a score per space (None where the
    dimension differs), and one line saying why."""

    name: str | None
    scores: dict
    reason: str


def _fingerprints(fingerprints) -> dict:
    if not isinstance(fingerprints, dict) or not fingerprints:
        raise InputError("fingerprints: expected a non-empty dict of name -> SpaceFingerprint")
    for name, fp in fingerprints.items():
        if not isinstance(fp, SpaceFingerprint):
            raise InputError(f"fingerprints: {name!r} is not a SpaceFingerprint")
    return fingerprints


def which_space(sample, fingerprints: dict) -> SpaceMatch:
    """Name the known space ``sample`` (n, dim) is in, or None when no fingerprint accepts it.

    The test compares the sample's mean row direction with each fingerprint's; a fingerprint of another dimension
    cannot match. Among the accepting fingerprints the highest score wins. Use a few hundred vectors or more: the
    calibration assumes a sample mean as steady as half the fitting data's.
    """
    fps = _fingerprints(fingerprints)
    U, _ = _directions(sample, "sample")
    dim = U.shape[1]
    scores = {name: (fp._score_directions(U) if fp.dim == dim else None) for name, fp in fps.items()}
    comparable = {name: s for name, s in scores.items() if s is not None}
    if not comparable:
        dims = sorted({fp.dim for fp in fps.values()})
        return SpaceMatch(None, scores, f"no known space has dimension {dim} (known: {', '.join(map(str, dims))})")
    best = max(comparable, key=comparable.get)
    if comparable[best] < ACCEPT_FRACTION:
        return SpaceMatch(None, scores, f"no known {dim}-d space matches: best is {best!r} at score "
                                        f"{comparable[best]:.2f} (needs {ACCEPT_FRACTION:.2f})")
    others = [f"{n!r} {s:.2f}" for n, s in sorted(comparable.items(), key=lambda kv: -kv[1]) if n != best]
    return SpaceMatch(best, scores, f"sample is in {best!r} (score {comparable[best]:.2f}, needs "
                                    f"{ACCEPT_FRACTION:.2f})" + (f"; others: {', '.join(others)}" if others else ""))


def _log_likelihoods(U: np.ndarray, fp: SpaceFingerprint) -> np.ndarray:
    """Per-row Gaussian log-density in the fingerprint's covariance sketch (up to a constant shared by all
    fingerprints with the same projection)."""
    C = fp.covariance_sketch()
    C = C + np.eye(fp.sketch_dim) * (1e-9 * np.trace(C) / fp.sketch_dim + 1e-12)
    L = np.linalg.cholesky(C)
    Z = (U - fp.mean_vector()) @ _projection(fp.dim, fp.sketch_dim, fp.seed)
    W = np.linalg.solve(L, Z.T)
    return -0.5 * (W * W).sum(axis=0) - np.log(np.diag(L)).sum()


def mixture_fractions(sample, fingerprints: dict, *, max_iter: int = 500, tol: float = 1e-8) -> dict:
    """Fraction of ``sample`` that looks like each space (fingerprints of another dimension get 0.0); see
    :func:`mixture`."""
    return mixture(sample, fingerprints, max_iter=max_iter, tol=tol).fractions


@dataclass(frozen=True)
class Mixture:
    """What :func:`mixture` found: each space's estimated share of the sample, and for each space with a share the
    score of the mean direction of the vectors assigned to it (weighted by responsibility)."""

    fractions: dict
    part_scores: dict

    def others(self, name: str, *, min_share: float) -> dict:
        """The spaces other than ``name`` that hold at least ``min_share`` of the sample and whose assigned vectors
        really look like them (their mean direction passes that space's test): a confirmed mixture."""
        return {n: f for n, f in self.fractions.items()
                if n != name and f >= min_share and self.part_scores.get(n, 0.0) >= ACCEPT_FRACTION}


def mixture(sample, fingerprints: dict, *, max_iter: int = 500, tol: float = 1e-8) -> Mixture:
    """Fraction of ``sample`` that looks like each space, and whether each part confirms it (:class:`Mixture`).

    A mixture fit: each space is a Gaussian in the shared covariance sketch, only the weights are fitted (EM). This
    corrects the bias per-vector assignment would have where single vectors are ambiguous. Fingerprints of the
    sample's dimension must share ``sketch_dim`` and ``seed`` (one projection), else their densities do not compare.
    """
    fps = _fingerprints(fingerprints)
    U, _ = _directions(sample, "sample")
    dim = U.shape[1]
    names = [name for name, fp in fps.items() if fp.dim == dim]
    if not names:
        raise InputError(f"sample: no fingerprint has dimension {dim}")
    if len({(fps[n].sketch_dim, fps[n].seed) for n in names}) > 1:
        raise InputError("fingerprints: those of one dimension must share sketch_dim and seed to be compared")
    LL = np.stack([_log_likelihoods(U, fps[n]) for n in names], axis=1)
    w = np.full(len(names), 1.0 / len(names))
    for _ in range(max_iter):
        A = LL + np.log(np.maximum(w, 1e-300))
        A -= A.max(axis=1, keepdims=True)
        R = np.exp(A)
        R /= R.sum(axis=1, keepdims=True)
        new = R.mean(axis=0)
        if np.abs(new - w).max() < tol:
            w = new
            break
        w = new
    out = {name: 0.0 for name in fps}
    out.update({n: float(v) for n, v in zip(names, w)})
    # a share alone can be an artefact (vectors of one space that sit in another's density, e.g. short queries
    # against fingerprints of documents): confirm each part by the mean direction of what was assigned to it
    A = LL + np.log(np.maximum(w, 1e-300))
    A -= A.max(axis=1, keepdims=True)
    R = np.exp(A)
    R /= R.sum(axis=1, keepdims=True)
    parts = {}
    for j, n in enumerate(names):
        weight = R[:, j].sum()
        parts[n] = float(fps[n]._score_directions((U * R[:, j:j + 1]).sum(axis=0, keepdims=True) / weight)) \
            if weight > 1e-9 else 0.0
    return Mixture(out, parts)
