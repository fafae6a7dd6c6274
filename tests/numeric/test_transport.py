"""Entropic optimal transport (Sinkhorn's scaling) used by mini-vec2vec's transport polish."""
import numpy as np

from vecbridge.numeric.transport import sinkhorn_plan


def test_plan_has_uniform_marginals_on_unequal_sides():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(60, 8)), rng.normal(size=(90, 8))
    S = (X / np.linalg.norm(X, axis=1, keepdims=True)) @ (Y / np.linalg.norm(Y, axis=1, keepdims=True)).T
    P = sinkhorn_plan(S, 20.0, n_iter=200)
    assert P.shape == (60, 90) and P.dtype == np.float32 and (P >= 0).all()
    np.testing.assert_allclose(P.sum(axis=0), 1 / 90, rtol=1e-4)
    np.testing.assert_allclose(P.sum(axis=1), 1 / 60, rtol=1e-3)


def test_a_cold_plan_is_the_one_to_one_matching_and_never_nan():
    """At a large inverse temperature the plan concentrates on the best one-to-one matching, even where the greedy
    nearest neighbour would send two rows to one column; no row or column underflows to NaN."""
    rng = np.random.default_rng(1)
    Y = rng.normal(size=(40, 16))
    perm = rng.permutation(40)
    X = Y[perm] + 0.5 * rng.normal(size=(40, 16))
    S = X @ Y.T / 16
    assert (S.argmax(axis=1) != perm).sum() >= 5          # the greedy nearest neighbour is wrong here
    P = sinkhorn_plan(S, 100.0, n_iter=500)
    np.testing.assert_array_equal(P.argmax(axis=1), perm)
    assert np.isfinite(sinkhorn_plan(S, 1e5)).all()     # every entry but each row's maximum underflows
    # hot: the plan spreads each row's mass over many columns
    assert (sinkhorn_plan(S, 0.01).max(axis=1) < 2.0 / 40 / 40).all()


def test_transport_procrustes_pulls_a_perturbed_map_back_to_the_true_rotation():
    """Unpaired rows (the target side shuffled) of one cloud under a known rotation: from a perturbed start, rounds
    of Procrustes on the transport plan land nearer the true map than the start, across dimensions too."""
    from vecbridge.numeric.linalg import polar
    from vecbridge.numeric.transport import transport_procrustes

    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 12)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    for d_out in (12, 20):
        R = polar(rng.normal(size=(12, d_out)))
        Y = (X @ R).astype(np.float32)[rng.permutation(400)]
        start = polar(R + 0.15 * rng.normal(size=R.shape))
        W = transport_procrustes(X, Y, start, n_iter=5, beta=50.0)
        assert W.shape == R.shape
        assert np.linalg.norm(W - R) < 0.5 * np.linalg.norm(start - R)
