"""The weights an upgrade's searches fuse with, and how a tuning on queries with known answers picks them: the old
model's weight ``beta`` in dual-query fusion and in the cascade, and the hub penalty's weight (the formula of
:func:`vecbridge.quality.scoring.fuse`)."""
from __future__ import annotations

import numpy as np

#: the old query's weights tried by ``upgrade tune`` (``inf``: the old model alone, i.e. staying)
FUSION_BETAS = (0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, float("inf"))
#: the old model's weight when the cascade re-scores candidates with both models' own vectors (both cosines are
#: exact there, unlike the mapped vectors fusion corrects for: equal weights; bench/cascade.py)
CASCADE_BETA = 1.0
#: the hub penalty's weights tried by ``upgrade tune`` (fusion and the cascade) (0: no penalty)
HUB_WEIGHTS = (0.0, 0.25, 0.5, 1.0)
#: the candidate counts ``upgrade tune --rerank auto`` tries for the cascade, smallest first
RERANK_LADDER = (100, 200, 400)
#: Recall@k a larger candidate pool must add over a smaller one to be chosen (it costs embedding more candidates per
#: query; 1 query in 500 of the tuning queries)
RERANK_TIE = 0.002


def weight_grid(has_hub: bool) -> list[tuple[float, float]]:
    """Every ``(beta, hub weight)`` tuning tries: the penalty only where records have hub scores, and never with the
    old model alone (the hub score belongs to the new vectors)."""
    return [(b, w) for b in FUSION_BETAS for w in (HUB_WEIGHTS if has_hub and np.isfinite(b) else (0.0,))]


def best_setting(recall: dict) -> tuple[float, float]:
    """The setting with the best recall; ties: the lightest penalty, then the smallest old-model weight."""
    return max(recall, key=lambda bw: (recall[bw], -bw[1], -bw[0] if np.isfinite(bw[0]) else -1e9))


def by_beta(recall: dict) -> dict:
    """Each old-model weight's best recall over the hub weights (``inf`` named as text, for JSON)."""
    return {("inf" if np.isinf(b) else b): max(r for (bb, _), r in recall.items() if bb == b) for b in FUSION_BETAS}


def choose_rerank(recall_by_k: dict[int, float], tie: float = RERANK_TIE) -> int:
    """The smallest candidate count whose Recall@k is within ``tie`` of the best one's (``recall_by_k``: K -> the
    cascade's best Recall@k over its weights when it re-scores the top K)."""
    best = max(recall_by_k.values())
    return min(n for n, r in recall_by_k.items() if r >= best - tie)
