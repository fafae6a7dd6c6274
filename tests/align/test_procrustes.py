"""Orthogonal Procrustes and its baselines: exactness, padding, streaming, diagnostics, refusals."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from vecbridge.align import (
    FewPairsWarning,
    LinearMap,
    NoMap,
    OrthogonalProcrustes,
    PairMoments,
    dot_product_discrepancy,
)
from vecbridge.errors import InputError


def random_orthogonal(d, rng, reflect=True):
    Q, R = np.linalg.qr(rng.normal(size=(d, d)))
    Q = Q * np.sign(np.diag(R))
    if reflect and np.linalg.det(Q) > 0:
        Q[:, 0] *= -1  # force a reflection: det = -1
    return Q


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_recovers_a_known_reflection_to_1e8(rng):
    d = 64
    Q = random_orthogonal(d, rng)
    assert np.linalg.det(Q) < 0
    X = rng.normal(size=(500, d))
    est = OrthogonalProcrustes().fit(X, X @ Q)
    assert np.abs(est.rotation_ - Q).max() < 1e-8
    assert np.linalg.det(est.rotation_) == pytest.approx(-1.0)
    np.testing.assert_allclose(est.transform(X), X @ Q, atol=1e-8)
    np.testing.assert_allclose(est.inverse_transform(X @ Q), X, atol=1e-8)
    assert est.residual_ < 1e-16 * 1e6 and est.delta_ < 1e-9


def test_rotation_is_orthogonal_and_beats_identity(rng):
    X = rng.normal(size=(300, 32))
    Y = X @ random_orthogonal(32, rng) + 0.3 * rng.normal(size=(300, 32))
    est = OrthogonalProcrustes().fit(X, Y)
    np.testing.assert_allclose(est.rotation_.T @ est.rotation_, np.eye(32), atol=1e-12)
    assert np.linalg.norm(est.transform(X) - Y) <= np.linalg.norm(X - Y)
    # the closed-form in-sample residual equals the one computed by applying the map
    assert est.residual_ == pytest.approx(np.mean(np.sum((est.transform(X) - Y) ** 2, axis=1)), rel=1e-10)


def test_small_to_large_padding_is_lossless(rng):
    d_src, d_tgt = 48, 96
    basis = random_orthogonal(d_tgt, rng)[:d_src]          # (48, 96) orthonormal rows: an isometric embedding
    X = rng.normal(size=(400, d_src))
    est = OrthogonalProcrustes().fit(X, X @ basis)
    assert not est.is_projection_
    assert est.rotation_.shape == (d_src, d_tgt)
    np.testing.assert_allclose(est.rotation_ @ est.rotation_.T, np.eye(d_src), atol=1e-12)
    Z = rng.normal(size=(50, d_src))                        # unseen vectors
    mapped = est.transform(Z)
    np.testing.assert_allclose(np.linalg.norm(mapped, axis=1), np.linalg.norm(Z, axis=1), rtol=1e-12)
    np.testing.assert_allclose(mapped @ mapped.T, Z @ Z.T, atol=1e-10)
    np.testing.assert_allclose(est.inverse_transform(mapped), Z, atol=1e-10)
    np.testing.assert_allclose(mapped, Z @ basis, atol=1e-8)


def test_padding_equals_explicit_zero_padding(rng):
    """The thin SVD equals the Procrustes-bounds paper's (2025) recipe of padding the smaller side with zeros."""
    X = rng.normal(size=(300, 20))
    Y = rng.normal(size=(300, 30))
    thin = OrthogonalProcrustes().fit(X, Y)
    padded = OrthogonalProcrustes().fit(np.pad(X, ((0, 0), (0, 10))), Y)
    np.testing.assert_allclose(padded.rotation_[:20], thin.rotation_, atol=1e-10)
    assert padded.residual_ == pytest.approx(thin.residual_, rel=1e-10)


def test_large_to_small_is_a_projection(rng):
    # whitened source (X^T X = c I), so the padded optimum is exactly "keep 48 coordinates, then rotate"
    X = np.linalg.qr(rng.normal(size=(400, 96)))[0] * 20.0
    Y = X[:, :48] @ random_orthogonal(48, rng)
    est = OrthogonalProcrustes().fit(X, Y)
    assert est.is_projection_
    np.testing.assert_allclose(est.rotation_.T @ est.rotation_, np.eye(48), atol=1e-12)
    mapped = est.transform(X)
    assert np.all(np.linalg.norm(mapped, axis=1) <= np.linalg.norm(X, axis=1) + 1e-12)
    np.testing.assert_allclose(mapped, Y, atol=1e-8)


def test_streamed_fit_equals_one_shot(rng):
    X = rng.normal(size=(5000, 40))
    Y = X @ random_orthogonal(40, rng) + 0.5 * rng.normal(size=(5000, 40))
    one = OrthogonalProcrustes(center=True).fit(X, Y)
    part = OrthogonalProcrustes(center=True)
    for lo in range(0, 5000, 777):
        part.partial_fit(X[lo:lo + 777], Y[lo:lo + 777])
    stream = OrthogonalProcrustes(center=True).fit_stream((X[lo:lo + 1000], Y[lo:lo + 1000]) for lo in range(0, 5000, 1000))
    halves = PairMoments.from_arrays(X[:2500], Y[:2500]).merge(PairMoments.from_arrays(X[2500:], Y[2500:]))
    merged = OrthogonalProcrustes(center=True).fit_moments(halves)
    for other in (part, stream, merged):
        assert other.n_pairs_ == 5000
        np.testing.assert_allclose(other.rotation_, one.rotation_, atol=1e-10)
        np.testing.assert_allclose(other.source_mean_, one.source_mean_, atol=1e-12)
        assert other.residual_ == pytest.approx(one.residual_, rel=1e-9)


def test_fit_never_holds_more_than_a_batch_in_float64(rng, monkeypatch):
    """fit() converts and accumulates batch by batch (so 10^6 float32 pairs never become one float64 copy)."""
    seen = []
    original = PairMoments.update

    def spy(self, X, Y, offset=0):
        seen.append(len(X))
        return original(self, X, Y, offset)

    monkeypatch.setattr(PairMoments, "update", spy)
    est = OrthogonalProcrustes()
    est.batch_size = 1000
    X = rng.normal(size=(4500, 8)).astype(np.float32)
    est.fit(X, X)
    assert seen == [1000, 1000, 1000, 1000, 500]


def test_centre_and_scale_recover_a_similarity_transform(rng):
    d = 16
    Q = random_orthogonal(d, rng)
    X = rng.normal(size=(1000, d)) + 3.0
    shift = rng.normal(size=d)
    Y = 2.5 * X @ Q + shift
    est = OrthogonalProcrustes(center=True, scale=True).fit(X, Y)
    assert est.scale_ == pytest.approx(2.5, rel=1e-10)
    np.testing.assert_allclose(est.rotation_, Q, atol=1e-8)
    np.testing.assert_allclose(est.transform(X), Y, atol=1e-8)
    np.testing.assert_allclose(est.inverse_transform(Y), X, atol=1e-8)


def test_diagnostics_match_brute_force_gram_matrices(rng):
    X = rng.normal(size=(200, 12))
    Y = np.pad(X @ random_orthogonal(12, rng), ((0, 0), (0, 4))) + 0.1 * rng.normal(size=(200, 16))
    est = OrthogonalProcrustes().fit(X, Y)
    delta = np.linalg.norm(X @ X.T - Y @ Y.T) / 200   # the N x N computation the streamed identity avoids
    assert est.delta_ == pytest.approx(delta, rel=1e-9)
    assert est.bound_ == pytest.approx(np.sqrt(2 * 16) * delta, rel=1e-9)
    assert est.residual_ <= est.bound_          # Corollary 1
    assert dot_product_discrepancy(PairMoments.from_arrays(X, Y)) == pytest.approx(delta, rel=1e-9)


def test_fewer_pairs_than_dimensions_warns_with_the_number(rng):
    X = rng.normal(size=(20, 50))
    with pytest.warns(FewPairsWarning, match="only 20 pairs for 50 dimensions"):
        est = OrthogonalProcrustes().fit(X, X)
    np.testing.assert_allclose(est.transform(X), X, atol=1e-8)   # still exact on the data it saw
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        OrthogonalProcrustes().fit(rng.normal(size=(60, 50)), rng.normal(size=(60, 50)))


@pytest.mark.parametrize("bad, match", [
    (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 37, np.nan, X), "row 3 contains NaN"),
    (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 5, np.inf, X), "row 0 contains NaN or inf"),
    (lambda X: np.vstack([X[:4], np.zeros((1, X.shape[1])), X[5:]]), "row 4 is all zeros"),
    (lambda X: X[:, :, None], "2-D"),
    (lambda X: X[:0], "0 rows"),
])
def test_bad_input_is_refused_with_a_clear_error(rng, bad, match):
    X = rng.normal(size=(10, 10))
    Xbad = bad(X)
    with pytest.raises(InputError, match=match):
        OrthogonalProcrustes().fit(Xbad, X[: len(Xbad)])
    with pytest.raises(InputError, match=match):   # the same refusal on the target side
        OrthogonalProcrustes().fit(X[: len(Xbad)], Xbad)


def test_mismatched_rows_and_dimensions_are_refused(rng):
    with pytest.raises(InputError, match="row-aligned"):
        OrthogonalProcrustes().fit(rng.normal(size=(10, 4)), rng.normal(size=(9, 4)))
    est = OrthogonalProcrustes().fit(rng.normal(size=(10, 4)), rng.normal(size=(10, 6)))
    with pytest.raises(InputError, match="dimension 4"):
        est.transform(rng.normal(size=(3, 6)))
    with pytest.raises(InputError, match="dimension"):
        est.partial_fit(rng.normal(size=(3, 5)), rng.normal(size=(3, 6)))
    with pytest.raises(InputError, match="not fitted"):
        OrthogonalProcrustes().transform(rng.normal(size=(3, 4)))


def test_linear_baseline_recovers_any_linear_map_and_ridge_shrinks(rng):
    X = rng.normal(size=(500, 10))
    A = rng.normal(size=(10, 14))
    lin = LinearMap().fit(X, X @ A)
    np.testing.assert_allclose(lin.coef_, A, atol=1e-10)
    ridge = LinearMap(alpha=1.0).fit(X, X @ A)
    assert np.linalg.norm(ridge.coef_) < np.linalg.norm(A)
    np.testing.assert_allclose(lin.inverse_transform(X @ A), X, atol=1e-8)
    off = LinearMap(fit_intercept=True).fit(X, X @ A + 5.0)
    np.testing.assert_allclose(off.transform(X), X @ A + 5.0, atol=1e-8)


def test_no_map_pads_or_truncates(rng):
    X = rng.normal(size=(5, 3))
    est = NoMap().fit(X, rng.normal(size=(5, 4)))
    np.testing.assert_allclose(est.transform(X), np.pad(X, ((0, 0), (0, 1))))
    np.testing.assert_allclose(est.inverse_transform(est.transform(X)), X)


def test_float32_input_stays_float32_and_float64_stays_exact(rng):
    X = rng.normal(size=(100, 8))
    est = OrthogonalProcrustes().fit(X, X)
    assert est.transform(X.astype(np.float32)).dtype == np.float32
    assert est.transform(X.astype(np.float16)).dtype == np.float32
    assert est.transform(X).dtype == np.float64
    assert est.transform(X[0]).shape == (8,)
