"""k-means, once (vecbridge.numeric.kmeans): the shared steps agree with the direct computations, both entry points
are seeded, and spherical k-means returns unit centroids and survives duplicates."""
from __future__ import annotations

import numpy as np
import pytest

from vecbridge.errors import InputError
from vecbridge.numeric.kmeans import assign_labels, kmeans, spherical_kmeans, sq_dists, sum_by_label
from vecbridge.vectors import l2_normalize


def test_shared_steps():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 12))
    C = rng.normal(size=(7, 12))
    D = ((C[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(sq_dists(C, X, (X * X).sum(1)), D, atol=1e-9)
    np.testing.assert_array_equal(assign_labels(X, C), D.argmin(axis=0))
    U, V = l2_normalize(X), l2_normalize(C)
    np.testing.assert_array_equal(assign_labels(U, V, metric="cosine"), (U @ V.T).argmax(axis=1))
    labels = rng.integers(0, 7, 300)
    expected = np.stack([X[labels == c].sum(0) for c in range(7)])
    np.testing.assert_allclose(sum_by_label(labels, X, 7), expected, atol=1e-12)
    np.testing.assert_allclose(sum_by_label(labels, X, 7, dense=True), expected, atol=1e-12)


def test_euclidean_assignment_through_knn_matches_numpy():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 16)).astype(np.float32)
    C = (X[:80] + 0.01).astype(np.float32)
    np.testing.assert_array_equal(assign_labels(X, C, backend="auto"), assign_labels(X, C))


def test_spherical_kmeans_is_seeded_unit_and_handles_duplicates():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 10))
    a = spherical_kmeans(X, 6, random_state=3)
    np.testing.assert_array_equal(a, spherical_kmeans(X, 6, random_state=3))
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0)
    dup = np.repeat(X[:3], 10, axis=0)                        # 3 distinct directions, 5 clusters: re-seeding
    assert np.isfinite(spherical_kmeans(dup, 5, random_state=0)).all()
    with pytest.raises(InputError, match="at least n_clusters=5"):
        spherical_kmeans(X[:4], 5)


def test_euclidean_kmeans_with_init_and_duplicates():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 5)).astype(np.float32)
    C, labels, n_iter = kmeans(X, 4, rng, init=X[:4])
    assert C.shape == (4, 5) and labels.shape == (200,) and 1 <= n_iter <= 100
    C, labels, _ = kmeans(np.repeat(X[:2], 10, axis=0), 3, np.random.default_rng(0))
    assert np.isfinite(C).all()
    with pytest.raises(InputError, match="init must have shape"):
        kmeans(X, 4, rng, init=X[:3])
