"""The one ranking module: orderings, top-k and ranks, with the tie rules its docstring states, and the callers that
must give the same answers through it (metrics, quality options, wrapped search, re-ranking)."""
from __future__ import annotations

import numpy as np
import pytest

from vecbridge import metrics
from vecbridge.numeric.ranking import (
    best_first,
    rank_candidate_rows,
    rank_candidates,
    ranks_of,
    shared_count,
    top_k_indices,
    top_k_rows,
)
from vecbridge.quality.options import relevant_ranks, rerank_recall, select
from vecbridge.quality.scoring import rerank_candidates


def test_best_first_is_stable_on_ties():
    s = np.array([0.5, 1.0, 0.5, 1.0, 0.2], dtype=np.float32)
    np.testing.assert_array_equal(best_first(s), [1, 3, 0, 2, 4])
    np.testing.assert_array_equal(best_first(s, 3), [1, 3, 0])
    np.testing.assert_array_equal(best_first([[1, 2, 2], [3, 3, 0]]), [[1, 2, 0], [0, 1, 2]])


def test_top_k_keeps_column_order_on_ties_when_every_column_is_kept():
    S = np.array([[1.0, 2.0, 1.0, 2.0], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    for k in (4, 9):
        idx, sc = top_k_rows(S, k)
        np.testing.assert_array_equal(idx, [[1, 3, 0, 2], [0, 1, 2, 3]])
        np.testing.assert_array_equal(sc, [[2, 2, 1, 1], [0, 0, 0, 0]])
        assert idx.dtype == np.int64 and sc.dtype == np.float32
    np.testing.assert_array_equal(top_k_indices(S, 9), np.tile(np.arange(4), (2, 1)))


def test_top_k_is_exact_on_distinct_scores():
    rng = np.random.default_rng(0)
    S = rng.normal(size=(30, 40))
    for k in (1, 7, 39, 40):
        idx, sc = top_k_rows(S, k)
        np.testing.assert_array_equal(idx, np.argsort(-S, axis=1, kind="stable")[:, :k])
        np.testing.assert_array_equal(sc, np.take_along_axis(S, idx, axis=1))
        assert set(map(tuple, np.sort(top_k_indices(S, k), axis=1))) == set(map(tuple, np.sort(idx, axis=1)))


def test_top_k_with_ties_at_the_cut_keeps_scores_right():
    # which tied columns survive the cut is numpy's choice; the kept scores are the k best all the same
    rng = np.random.default_rng(1)
    S = rng.integers(0, 3, size=(25, 12)).astype(np.float32)
    idx, sc = top_k_rows(S, 5)
    np.testing.assert_array_equal(sc, -np.sort(-S, axis=1)[:, :5])
    assert (np.diff(sc, axis=1) <= 0).all()
    assert all(len(set(row)) == 5 for row in idx)


def test_ranks_of_counts_ties_against_the_item():
    S = np.array([[0.5, 0.9, 0.5, 0.1], [0.3, 0.3, 0.3, 0.3]])
    np.testing.assert_array_equal(ranks_of(S, [0, 2]), [3, 4])
    np.testing.assert_array_equal(ranks_of(S, [1, 0]), [1, 4])


def test_shared_count_counts_common_ids_per_row():
    A = np.array([[1, 2, 3], [4, 5, 6]])
    B = np.array([[3, 9, 1], [7, 8, 9]])
    np.testing.assert_array_equal(shared_count(A, B), [2, 0])
    rng = np.random.default_rng(5)
    A, B = (np.stack([rng.permutation(30)[:8] for _ in range(20)]) for _ in range(2))
    np.testing.assert_array_equal(shared_count(A, B), [len(set(a) & set(b)) for a, b in zip(A, B)])


def test_rank_candidates_drops_unknown_ids_keeps_candidate_order_on_ties_and_pads():
    ids = ["a", "b", "c", "d"]
    flat = np.array([1.0, 2.0, 2.0, 1.0], dtype=np.float32)
    calls = []

    def score(qi, rows):
        calls.append(qi)
        return flat[rows]

    out, sc = rank_candidates([["d", "x", "a", "c", "b"], ["x"], ["a"]], ids, 3, score)
    assert out == [["c", "b", "d"], [], ["a"]]
    np.testing.assert_array_equal(sc, [[2, 2, 1], [-np.inf] * 3, [1, -np.inf, -np.inf]])
    assert sc.dtype == np.float32 and calls == [0, 2]  # a query without known candidates is not scored
    orders, sc2 = rank_candidate_rows([[3, 0, 2, 1], []], 2, lambda qi, rows: flat[rows])
    np.testing.assert_array_equal(orders[0], [2, 3])  # rows 2 and 1 (both 2.0), in candidate order
    assert orders[1].size == 0 and np.isinf(sc2[1]).all()


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2"])
def test_callers_agree_through_the_one_ranking_on_tie_heavy_data(metric):
    rng = np.random.default_rng(2)
    Q = rng.integers(-1, 2, size=(40, 4)).astype(np.float32)
    D = rng.integers(-1, 2, size=(60, 4)).astype(np.float32)
    top, top_s = metrics.top_k(Q, D, 60, metric=metric, return_scores=True)
    if metric != "cosine":
        # re-ranking every document as a candidate is the exhaustive top k, ties included (integer scores are exact
        # whichever way they are summed; cosines are not: one query at a time rounds unlike a block of queries)
        every = np.tile(np.arange(60), (40, 1))
        rows, scores = rerank_candidates(Q, every, lambda r: D[r], 60, metric=metric)
        np.testing.assert_array_equal(rows, top)
        np.testing.assert_array_equal(scores, top_s)
    # the exhaustive top k is the stable ordering of the full score matrix
    Qp, Dp = metrics.prepare_vectors(Q, metric), metrics.prepare_vectors(D, metric)
    S = metrics.score_block(Qp, Dp, metric, np.einsum("ij,ij->i", Dp, Dp) if metric == "l2" else None)
    np.testing.assert_array_equal(top, best_first(S))
    score = metrics.candidate_scorer(Qp, Dp, metric)
    np.testing.assert_array_equal(score(3, [5, 1, 5]), S[3, [5, 1, 5]])


def test_option_ranks_match_metrics_ranks_on_ties():
    rng = np.random.default_rng(3)
    Q = rng.integers(-1, 2, size=(50, 4)).astype(np.float32)
    D = rng.integers(-1, 2, size=(70, 4)).astype(np.float32)
    rel = rng.integers(0, 70, size=50)
    Q[(Q == 0).all(axis=1), 0] = 1  # a zero query is a miss for recall_at_k but ranked as any other here
    ranks = relevant_ranks(Q, D, rel, block=7)
    np.testing.assert_array_equal(ranks, metrics.partner_ranks(Q, D, rel))
    # re-ranking every document with the same vectors changes nothing
    r_all, cover = rerank_recall(Q, D, D, rel, 70, 5)
    assert r_all == pytest.approx(np.mean(ranks <= 5)) and cover == 1.0
    np.testing.assert_array_equal(select(np.array([1, 3, 3, 2]), 0.75), [1, 2, 3])
