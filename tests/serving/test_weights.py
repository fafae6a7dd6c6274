"""The weights a tuning tries and how it picks one (ties: the lightest penalty, then the smallest old-model weight)."""
from __future__ import annotations

import numpy as np

from vecbridge.serving.weights import FUSION_BETAS, HUB_WEIGHTS, best_setting, by_beta, weight_grid


def test_the_grid_tries_the_penalty_only_with_hub_scores_and_never_with_the_old_model_alone():
    assert weight_grid(False) == [(b, 0.0) for b in FUSION_BETAS]
    grid = weight_grid(True)
    assert (np.inf, 0.0) in grid and not any(np.isinf(b) and w for b, w in grid)
    assert len(grid) == (len(FUSION_BETAS) - 1) * len(HUB_WEIGHTS) + 1


def test_ties_go_to_the_lightest_penalty_then_the_smallest_old_model_weight():
    recall = {s: 0.5 for s in weight_grid(True)}
    assert best_setting(recall) == (0.0, 0.0)
    recall[(2.0, 0.5)] = recall[(1.0, 0.5)] = recall[(3.0, 0.25)] = 0.6
    assert best_setting(recall) == (3.0, 0.25)
    recall[(5.0, 0.0)] = recall[(np.inf, 0.0)] = 0.6
    assert best_setting(recall) == (5.0, 0.0), "no penalty first; the old model alone loses a tie at that penalty"
    assert by_beta(recall)["inf"] == 0.6 and by_beta(recall)[1.0] == 0.6 and by_beta(recall)[0.5] == 0.5


def test_the_cascade_takes_the_smallest_pool_within_the_tie_of_the_best():
    from vecbridge.serving.weights import RERANK_TIE, choose_rerank

    assert choose_rerank({100: 0.60, 200: 0.60 + RERANK_TIE / 2, 400: 0.59}) == 100
    assert choose_rerank({100: 0.60, 200: 0.61, 400: 0.61 + RERANK_TIE / 2}) == 200
    assert choose_rerank({100: 0.60, 200: 0.61, 400: 0.62}) == 400
    assert choose_rerank({100: 0.62, 200: 0.61}) == 100, "a larger pool can rank worse: never taken then"
