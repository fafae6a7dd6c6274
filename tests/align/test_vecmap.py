"""VecMap's unsupervised start ("A robust self-learning method for fully unsupervised cross-lingual mappings of word
embeddings", Artetxe et al., ACL 2018) adapted to sentence embeddings: profiles, CSLS induction, the estimator."""
from __future__ import annotations

import numpy as np
import pytest

from vecbridge import metrics
from vecbridge.align.vecmap import (
    VecMap,
    _transposed,
    csls_dictionary,
    profile_dictionary,
    self_learning,
    similarity_profiles,
)
from vecbridge.errors import InputError
from vecbridge.vectors import l2_normalize


def _semi_orthogonal(d_in, d_out, rng):
    return np.linalg.qr(rng.normal(size=(d_out, d_in)))[0].T.astype(np.float32)       # rows orthonormal


@pytest.fixture(scope="module")
def planted(sample):
    """The bundled sample's real MiniLM docs reduced to 48 principal directions, planted into 80 dimensions by a
    random semi-orthogonal map; the target's rows are shuffled (no pairing given); evaluation on rows neither side
    holds."""
    X = sample.docs_old
    P = np.linalg.svd(X[:1000] - X[:1000].mean(axis=0), full_matrices=False)[2][:48].T.astype(np.float32)
    X = X @ P
    rng = np.random.default_rng(0)
    Q = _semi_orthogonal(48, 80, rng)
    return X[:1000], (X[:1000] @ Q)[rng.permutation(1000)], X[1000:], X[1000:] @ Q


def test_profiles_are_dimension_free_and_invariant_to_isometries():
    rng = np.random.default_rng(0)
    X = l2_normalize(rng.normal(size=(200, 16)).astype(np.float32))
    P1 = similarity_profiles(X)
    P2 = similarity_profiles(X @ _semi_orthogonal(16, 40, rng))       # same geometry, 40 dimensions
    assert P1.shape == P2.shape == (200, 200)
    np.testing.assert_allclose(P1, P2, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(P1, axis=1), 1, atol=1e-5)


def test_profile_dictionary_recovers_a_planted_permutation():
    """Same rows in another basis and order: the profiles match row for row."""
    rng = np.random.default_rng(1)
    X = l2_normalize(rng.normal(size=(300, 24)).astype(np.float32))
    perm = rng.permutation(300)
    Y = (X @ _semi_orthogonal(24, 32, rng))[perm]
    src, tgt = profile_dictionary(X, Y)
    assert len(src) == len(tgt) == 600
    assert np.mean(perm[tgt] == src) > 0.95        # Y[j] is X[perm[j]]


def test_csls_dictionary_on_identical_sets_and_with_dropout():
    rng = np.random.default_rng(2)
    X = l2_normalize(rng.normal(size=(100, 20)).astype(np.float32))
    src, tgt, obj = csls_dictionary(X, X, k=5)
    np.testing.assert_array_equal(src, tgt)
    assert obj > 0.5
    src2, tgt2, obj2 = csls_dictionary(X, X, k=5, keep=0.3, rng=rng)
    assert obj2 == pytest.approx(obj)             # the objective ignores the dropout
    assert np.mean(src2 == tgt2) < 0.9            # the dropout changes the choices
    with pytest.raises(InputError, match="random generator"):
        csls_dictionary(X, X, keep=0.5)


def _csls_reference(P, Q, k, keep, rng):
    """CSLS induction written out directly from the paper's definition (two products, dropout by masking)."""
    S, St = P @ Q.T, Q @ P.T
    r_t = np.sort(S, axis=1)[:, -k:].mean(axis=1)
    r_s = np.sort(St, axis=1)[:, -k:].mean(axis=1)
    best, obj = [], 0.0
    for M, r_own, r_other in ((S, r_t, r_s), (St, r_s, r_t)):
        C = 2 * M - r_other[None, :]
        obj += 0.5 * float((C.max(axis=1) - r_own).mean())
        if keep < 1:
            C[rng.random(C.shape, dtype=np.float32) >= keep] = -np.inf
        best.append(C.argmax(axis=1))
    return best, obj


def test_tiled_transpose_is_the_transpose_on_ragged_tiles():
    rng = np.random.default_rng(3)
    for shape in ((300, 300), (257, 700), (5, 1000)):
        S = rng.normal(size=shape).astype(np.float32)
        T = _transposed(S, block=64)
        assert T.flags.c_contiguous
        np.testing.assert_array_equal(T, S.T)


def test_csls_dictionary_matches_the_definition():
    """The in-place, single-product implementation chooses exactly what the definition does, dropout included (same
    random stream)."""
    rng = np.random.default_rng(3)
    P = l2_normalize(rng.normal(size=(150, 12)).astype(np.float32))
    Q = l2_normalize(rng.normal(size=(170, 12)).astype(np.float32))
    for keep in (1.0, 0.2):
        src, tgt, obj = csls_dictionary(P, Q, k=7, keep=keep, rng=np.random.default_rng(4))
        (fwd, bwd), ref = _csls_reference(P, Q, 7, keep, np.random.default_rng(4))
        np.testing.assert_array_equal(tgt[:150], fwd)
        np.testing.assert_array_equal(src[150:], bwd)
        np.testing.assert_array_equal(src[:150], np.arange(150))
        assert obj == pytest.approx(ref, abs=1e-5)


def test_vecmap_recovers_a_planted_isometry_across_dimensions(planted):
    A, B, Xe, Ye = planted
    est = VecMap(n_init=1000, n_sample=1000, max_iter=20, random_state=0).fit(A, B)
    assert est.fit(A, B) is est
    assert est.matrix_.shape == (48, 80) and est.inverse_matrix_.shape == (80, 48)
    np.testing.assert_allclose(est.matrix_ @ est.matrix_.T, np.eye(48), atol=1e-5)
    assert metrics.pair_quality(est.transform(Xe), Ye).top1 > 0.97
    assert est.n_iter_ == len(est.objective_) <= 20 and set(est.timings_) == {"init", "self_learning"}
    # the other direction: a projection
    back = VecMap(n_init=1000, n_sample=1000, max_iter=20, random_state=0).fit(B, A)
    assert metrics.pair_quality(back.transform(Ye), Xe).top1 > 0.97


def test_determinism_parameters_and_refusals(planted):
    A, B, _, _ = planted
    kw = dict(n_init=300, n_sample=300, max_iter=3)
    a = VecMap(random_state=3, **kw).fit(A, B)
    b = VecMap(random_state=3, **kw).fit(A, B)
    np.testing.assert_array_equal(a.matrix_, b.matrix_)
    assert VecMap(**kw).get_params()["n_sample"] == 300 and "n_sample=300" in repr(VecMap(**kw))
    with pytest.raises(InputError, match="stochastic_initial"):
        VecMap(stochastic_initial=0).fit(A, B)
    with pytest.raises(InputError, match="n_sample"):
        VecMap(n_sample=2.5).fit(A, B)
    with pytest.raises(InputError, match="at least 20 vectors"):
        VecMap().fit(A[:10], B[:10])
    with pytest.raises(InputError, match="not fitted"):
        VecMap().transform(A)


def test_self_learning_stops_at_its_check():
    """The caller's cancellation point: ``check`` runs before every iteration, and what it raises ends the run there
    (a start the search abandoned stops within one iteration instead of finishing its self-learning)."""
    rng = np.random.default_rng(0)
    A = l2_normalize(rng.normal(size=(300, 16)).astype(np.float32))
    B = l2_normalize(rng.normal(size=(300, 16)).astype(np.float32))
    calls = []

    class Abandoned(Exception):
        pass

    def check():
        calls.append(1)
        if len(calls) == 3:
            raise Abandoned

    with pytest.raises(Abandoned):
        self_learning(A, B, np.eye(16, dtype=np.float32), rng, max_iter=50, stochastic_interval=50, check=check)
    assert len(calls) == 3
    W, objectives, n_iter = self_learning(A, B, np.eye(16, dtype=np.float32), rng, max_iter=4, check=lambda: None)
    assert n_iter == len(objectives) == 4
