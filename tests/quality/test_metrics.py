"""Retrieval metrics against naive reference computations, including chunking and ties."""
from __future__ import annotations

import numpy as np
import pytest

from vecbridge import metrics


def naive_scores(Q, D, metric):
    if metric == "cosine":
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        D = D / np.linalg.norm(D, axis=1, keepdims=True)
        return Q @ D.T
    if metric == "dot":
        return Q @ D.T
    return -((Q[:, None, :] - D[None, :, :]) ** 2).sum(-1)


@pytest.fixture
def data():
    rng = np.random.default_rng(4)
    D = rng.normal(size=(300, 16)).astype(np.float32)
    Q = (D[:120] + 0.8 * rng.normal(size=(120, 16))).astype(np.float32)
    return Q, D


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2"])
@pytest.mark.parametrize("block", [metrics.DEFAULT_BLOCK_BYTES, 4 * 300 * 7])  # one block, and 7-row blocks
def test_ranks_and_recall_match_naive(data, metric, block):
    Q, D = data
    S = naive_scores(Q.astype(np.float64), D.astype(np.float64), metric)
    true = S[np.arange(120), np.arange(120)]
    expected_rank = (S >= true[:, None]).sum(1)
    ranks = metrics.partner_ranks(Q, D, metric=metric, max_block_bytes=block)
    np.testing.assert_array_equal(ranks, expected_rank)
    assert metrics.recall_at_k(Q, D, k=5, metric=metric, max_block_bytes=block) == pytest.approx(np.mean(expected_rank <= 5))
    top = metrics.top_k(Q, D, 7, metric=metric, max_block_bytes=block)
    np.testing.assert_array_equal(top, np.argsort(-S, axis=1, kind="stable")[:, :7])


def test_ties_count_against_the_true_item():
    D = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    Q = np.array([[1.0, 0.0]])
    assert metrics.partner_ranks(Q, D, [0])[0] == 2
    assert metrics.recall_at_k(Q, D, [0], k=1) == 0.0


def test_zero_query_is_a_miss():
    D = np.eye(3)
    Q = np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    assert metrics.recall_at_k(Q, D, [0, 1], k=3) == 0.5


def test_retention_and_overlap(data):
    Q, D = data
    rng = np.random.default_rng(5)
    noisy = D + 0.7 * rng.normal(size=D.shape).astype(np.float32)
    ret = metrics.recall_retention(Q, noisy, D, k=10)
    assert ret["retention"] == pytest.approx(ret["recall_mapped"] / ret["recall_native"])
    assert metrics.recall_retention(Q, D, D, k=10)["retention"] == 1.0
    a, b = metrics.top_k(Q, noisy, 10), metrics.top_k(Q, D, 10)
    expected = np.mean([len(set(x) & set(y)) / 10 for x, y in zip(a, b)])
    assert metrics.topk_overlap(Q, noisy, D, k=10) == pytest.approx(expected)
    assert metrics.topk_overlap(Q, D, D, k=10) == 1.0


def test_pair_quality(data):
    _, D = data
    pq = metrics.pair_quality(D, D)
    assert (pq.top1, pq.mean_rank) == (1.0, 1.0) and pq.mean_cosine == pytest.approx(1.0, abs=1e-6)
    shuffled = metrics.pair_quality(D[::-1], D)
    assert shuffled.top1 < 0.05


def test_block_memory_is_bounded():
    """10k x 10k never builds the full score matrix: each block is at most max_block_bytes of scores."""
    blocks = list(metrics._blocks(10_000, 10_000, 64 * 2**20))
    assert max(b.stop - b.start for b in blocks) * 10_000 * 4 <= 64 * 2**20
    assert sum(b.stop - b.start for b in blocks) == 10_000
