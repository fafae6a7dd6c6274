"""Ranks within a re-embedded pool of a collection, and the Recall@k they predict at the collection's size
(:mod:`vecbridge.quality.at_size`): what ``upgrade plan`` reads each stage's quality from, the cascade's included."""
from __future__ import annotations

import numpy as np

from .at_size import cascade_hit_probability, recall_at_size
from .options import recall, relevant_ranks


def pool_counts(Qn, D, rel, nrel: int, others_only: bool = True, **fused) -> tuple[np.ndarray, dict, int]:
    """Each query's 1-based rank in the pool ``D`` (its first ``nrel`` rows the queries' relevant records), and what
    :func:`~vecbridge.quality.at_size.hit_probability` takes: the distractors above it (the pool's sampled others,
    not the other queries' relevant records, with ``others_only``; else every other pool record), the pool records
    above it and the pool's size; last, the number of distractors."""
    r = relevant_ranks(Qn, D, rel, **fused)
    if others_only:
        cut = dict(fused, old_docs=fused["old_docs"][:nrel]) if "old_docs" in fused else fused
        above, n = r - relevant_ranks(Qn, D[:nrel], rel, **cut), len(D) - nrel
    else:
        above, n = r - 1, len(D) - 1
    return r, {"above": above, "above_seen": r - 1, "seen": len(D)}, n


def levels(counts: tuple, size: int, k: int) -> tuple[float, float]:
    """Recall@k within the pool and predicted at the collection's ``size``, from :func:`pool_counts`."""
    r, c, n = counts
    return recall(r, k), recall_at_size(c["above"], n, size, k, above_seen=c["above_seen"], seen=c["seen"])


def cascade_at_size(served: tuple, rescored: dict, size: int, *, rerank: int, k: int) -> tuple[float, float]:
    """The cascade's best Recall@k predicted at ``size``, and the re-scoring's weight that gives it: ``served`` is
    :func:`pool_counts` of the served ranking, ``rescored`` maps each old-model weight to :func:`pool_counts` of the
    re-score (both models' own vectors of every pool record)."""
    _, c, n = served
    got = {b: float(np.mean(cascade_hit_probability(c, r[1], n, size, rerank=rerank, k=k)))
           for b, r in rescored.items()}
    best = max(got, key=lambda b: (got[b], -b))
    return got[best], best
