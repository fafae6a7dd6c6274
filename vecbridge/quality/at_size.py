"""Recall@k at a collection's size, predicted from ranks within a sampled pool of it.

A query's relevant record is outranked by ``above`` of the pool's ``distractors`` (a uniform sample of the
collection's other records), i.e. by a fraction p of the collection, p ~ Beta(above + a, distractors - above + b).
The prior (a, b) is fitted on all the queries' counts (empirical Bayes: the beta-binomial maximum likelihood; the
Jeffreys prior 1/2, 1/2 would put too much weight on large p, most queries having p near 0, and predict 0.04-0.06
too low on real corpora). The pool's records are part of the collection: those known to be above (``above_seen`` of
``seen``) count as they are and the ``size - seen`` unseen records add Binomial(size - seen, p); a hit is a total
below k, a beta-binomial CDF. With ``size == seen`` this is the recall within the pool."""
from __future__ import annotations

import numpy as np

#: the prior when the counts cannot identify one (Jeffreys)
JEFFREYS = (0.5, 0.5)


def beta_prior(above, distractors: int) -> tuple[float, float]:
    """(a, b) of the Beta distribution of p across queries that best explains their counts (maximum likelihood of
    Beta-Binomial(distractors, a, b)); Jeffreys where fewer than two distinct counts leave it unidentified. Where the
    bounded gradient search stops early, the simplex search of :func:`fitted_prior` finds it (Jeffreys there put
    too much weight on large p: fused rankings' predictions came out 0.04 low)."""
    from scipy.optimize import minimize
    from scipy.stats import betabinom

    c = np.asarray(above, dtype=np.float64)
    if len(np.unique(c)) < 2 or distractors < 1:
        return JEFFREYS

    def nll(t):
        return -betabinom.logpmf(c, distractors, *np.exp(t)).sum()

    fit = minimize(nll, np.log(JEFFREYS), method="L-BFGS-B", bounds=[(-7.0, 9.0)] * 2)
    return tuple(float(v) for v in np.exp(fit.x)) if fit.success else fitted_prior(c, distractors)


def hit_probability(above, distractors: int, size: int, k: int = 10, *, above_seen=None, seen: int | None = None,
                    prior: tuple[float, float] | None = None) -> np.ndarray:
    """Per query, the probability that its relevant record ranks in the top ``k`` of ``size`` records, given that
    ``above`` of ``distractors`` sampled records score at least as high, and ``above_seen`` of the ``seen`` pool
    records (its own included; default: the distractors and it) are known to. ``distractors`` may differ per query
    (then give ``seen``)."""
    from scipy.stats import betabinom

    a = np.asarray(above, dtype=np.float64)
    known = a if above_seen is None else np.asarray(above_seen, dtype=np.float64)
    unseen = max(int(size) - (int(distractors) + 1 if seen is None else int(seen)), 0)
    pa, pb = beta_prior(a, distractors) if prior is None else prior
    n = np.maximum(np.asarray(distractors, dtype=np.float64), 0)
    return betabinom.cdf(k - 1 - known, unseen, a + pa, n - a + pb)


def recall_at_size(above, distractors: int, size: int, k: int = 10, **seen) -> float:
    """Predicted Recall@k over a collection of ``size`` records: the mean of :func:`hit_probability`."""
    return float(np.mean(hit_probability(above, distractors, size, k, **seen))) if len(above) else 0.0


def cascade_hit_probability(served: dict, rescored: dict, distractors: int, size: int, *, rerank: int,
                            k: int = 10) -> np.ndarray:
    """Per query, the probability that a cascade ranks its relevant record in the top ``k`` of ``size`` records: the
    record must be among the served ranking's top ``rerank`` (``served``: :func:`hit_probability`'s ``above``,
    ``above_seen`` and ``seen`` under the served score) and in the top ``k`` by the re-scoring (``rescored``: the
    same under the re-score over every record, which the candidates' top ``k`` matches when they hold it). Both
    events rise with how easy the query is, so they are taken as comonotone: the smaller of the two."""
    return np.minimum(hit_probability(served["above"], distractors, size, rerank, above_seen=served.get("above_seen"),
                                      seen=served.get("seen")),
                      hit_probability(rescored["above"], distractors, size, k,
                                      above_seen=rescored.get("above_seen"), seen=rescored.get("seen")))


def fitted_prior(above, distractors: int) -> tuple[float, float]:
    """The maximum-likelihood (a, b) of :func:`beta_prior` (same bounds), found where that one falls back to
    Jeffreys: when its fit stops early, and when every query has the same count (every relevant record first in
    the pool: the likelihood then grows towards p = 0, while Jeffreys would have about half of them outranked at
    five times the pool's size). ``distractors`` may differ per query."""
    from scipy.optimize import minimize
    from scipy.stats import betabinom

    c = np.asarray(above, dtype=np.float64)
    if not len(c) or np.min(distractors) < 1:
        return JEFFREYS

    def nll(t):
        return -betabinom.logpmf(c, distractors, *np.exp(np.clip(t, -7.0, 9.0))).sum()

    fit = minimize(nll, np.log(JEFFREYS), method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-6})
    return tuple(float(v) for v in np.exp(np.clip(fit.x, -7.0, 9.0)))


def sampling_margin(p: float, n: int, z: float = 1.96) -> float:
    """Half-width of a 95% interval (``z``) of a rate ``p`` estimated from ``n`` sampled items (the binomial normal
    approximation): how far the collection's own rate may lie from a prediction made on a sample of ``n``."""
    return float(z * np.sqrt(max(p * (1.0 - p), 0.0) / n)) if n > 0 else float("nan")


def recall_from_ranks(ranks, pool: int, size: int, k: int = 10, *, seen_ranks=None) -> float:
    """Predicted Recall@k over ``size`` records from each query's 1-based rank (ties against it) among a ``pool``
    that is a uniform sample of them, its relevant record included: every other pool record is a distractor
    (prior: :func:`fitted_prior`). ``seen_ranks``: the ranks among the pool's records as the collection holds them,
    where ``ranks`` are among stand-ins that score like the unseen records do (default: the same)."""
    r = np.asarray(ranks, dtype=np.int64)
    if not len(r):
        return 0.0
    seen = {} if seen_ranks is None else {"above_seen": np.asarray(seen_ranks, dtype=np.int64) - 1, "seen": int(pool)}
    return recall_at_size(r - 1, int(pool) - 1, size, k, prior=fitted_prior(r - 1, int(pool) - 1), **seen)
