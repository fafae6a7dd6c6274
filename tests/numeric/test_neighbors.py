"""Shared kNN / CSLS / mutual-NN helpers: numpy and faiss agree, CSLS matches its definition."""
from __future__ import annotations

import numpy as np
import pytest

from vecbridge.errors import InputError
from vecbridge.numeric.neighbors import (
    csls_best,
    csls_mutual_from_knn,
    knn,
    mutual_nearest_neighbours,
    runner_up_margin,
)
from vecbridge.vectors import l2_normalize


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(400, 12)).astype(np.float32), rng.normal(size=(300, 12)).astype(np.float32)


def test_knn_matches_brute_force_in_small_blocks(data):
    X, Y = data
    S = l2_normalize(X) @ l2_normalize(Y).T
    idx, sims = knn(X, Y, 7, backend="numpy", max_block_bytes=4 * 300 * 13)
    np.testing.assert_array_equal(idx, np.argsort(-S, axis=1, kind="stable")[:, :7])
    np.testing.assert_allclose(sims, np.sort(S, axis=1)[:, ::-1][:, :7], atol=1e-6)


def test_faiss_and_numpy_agree(data):
    pytest.importorskip("faiss")
    X, Y = data
    a, sa = knn(X, Y, 5, backend="numpy")
    b, sb = knn(X, Y, 5, backend="faiss")
    np.testing.assert_allclose(sa, sb, atol=1e-5)
    assert (a == b).mean() > 0.99


def test_exclude_self(data):
    X, _ = data
    idx, _ = knn(X, X, 4, exclude_self=True)
    assert idx.shape == (400, 4) and not (idx == np.arange(400)[:, None]).any()


def test_csls_matches_its_definition(data):
    X, Y = data
    Xn, Yn = l2_normalize(X), l2_normalize(Y)
    C = Xn @ Yn.T
    r_y = np.sort(C, axis=1)[:, -10:].mean(axis=1)     # mean sim of each x to its 10 NN in Y
    r_x = np.sort(C, axis=0)[-10:, :].mean(axis=0)
    csls = 2 * C - r_y[:, None] - r_x[None, :]
    best_y, score_x, best_x, score_y = csls_best(X, Y, 10, max_block_bytes=4 * 300 * 50)
    np.testing.assert_array_equal(best_y, csls.argmax(axis=1))
    np.testing.assert_array_equal(best_x, csls.argmax(axis=0))
    np.testing.assert_allclose(score_x, csls.max(axis=1), atol=1e-5)


def test_runner_up_margin_matches_its_definition(data):
    """With complete lists, each mutual pair's margin is the smaller of its lead over the row's and over the
    column's second-best CSLS score, as computed from the dense matrix."""
    X, Y = (l2_normalize(a) for a in data)
    i12, s12 = knn(X, Y, len(Y))
    i21, s21 = knn(Y, X, len(X))
    pairs, scores, r_y, r_x = csls_mutual_from_knn(i12, s12, i21, s21, 10)
    C = X @ Y.T
    csls = 2 * C - np.sort(C, axis=1)[:, -10:].mean(axis=1)[:, None] - np.sort(C, axis=0)[-10:].mean(axis=0)[None]
    row2, col2 = np.sort(csls, axis=1)[:, -2], np.sort(csls, axis=0)[-2]
    best = csls[pairs[:, 0], pairs[:, 1]]
    want = np.minimum(best - row2[pairs[:, 0]], best - col2[pairs[:, 1]])
    got = runner_up_margin(i12, s12, i21, s21, pairs, r_y, r_x)
    assert len(pairs) > 20 and (got > 0).all()
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert runner_up_margin(i12[:, :1], s12[:, :1], i21[:, :1], s21[:, :1], pairs, r_y, r_x).tolist() == [0] * len(pairs)


def test_mutual_nn_recovers_a_noisy_copy(data):
    X, _ = data
    rng = np.random.default_rng(1)
    pairs, scores = mutual_nearest_neighbours(X + 0.05 * rng.normal(size=X.shape), X)
    assert len(pairs) > 390 and (pairs[:, 0] == pairs[:, 1]).all()
    plain, _ = mutual_nearest_neighbours(X + 0.05 * rng.normal(size=X.shape), X, k_csls=None)
    assert (plain[:, 0] == plain[:, 1]).mean() > 0.99


def test_torch_backend_matches_numpy(sample):
    pytest.importorskip("torch")
    Q, B = sample.docs_new[:200], sample.docs_new[200:]
    i_np, s_np = knn(Q, B, 10, backend="numpy")
    i_t, s_t = knn(Q, B, 10, backend="torch", max_block_bytes=64 * 1300 * 4)    # several blocks
    np.testing.assert_allclose(s_t, s_np, atol=1e-5)
    assert np.mean(i_t == i_np) > 0.99                                            # float32 ties aside
    with pytest.raises(InputError, match="unknown knn backend"):
        knn(Q, B, 10, backend="cuda")
