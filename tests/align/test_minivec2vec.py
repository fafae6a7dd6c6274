"""mini-vec2vec (the mini-vec2vec paper, Dar 2025): unsupervised alignment from two unpaired halves, its QAP and k-means parts, unequal dims."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import SHARED_WORDNET
from vecbridge import metrics
from vecbridge.align import Alignment
from vecbridge.align.minivec2vec import (
    MiniVec2Vec,
    _centroid_similarity,
    _qap_scipy,
    _restart_key,
    qap_2opt,
    qap_objective,
)
from vecbridge.errors import InputError
from vecbridge.numeric.kmeans import kmeans

# A fast configuration for the bundled sample (1,000 rows per side): fewer ensemble runs, QAP restarts and Refine-1
# iterations, neighbourhoods and Refine-2 scaled to the data size; the paper's single run (no restarts, no VecMap
# start, no polish), which the tests of the paper's steps are about.
PAPER = dict(n_restarts=1, init="centroids", polish_iter=0)
FAST = dict(n_runs=5, qap_restarts=10, n_neighbors=10, refine1_iter=4, refine1_tol=0, refine1_neighbors=1,
            refine2_clusters=50, **PAPER)
#: the fits with several starts validate them against one null distribution of the same rows and seed: computed
#: once for the module (tests/conftest.py), each fit itself runs every time
pytestmark = pytest.mark.usefixtures("reuse_nulls")


# --- the parts ---------------------------------------------------------------------------------------------------
def test_qap_2opt_recovers_planted_permutations():
    """Noise-free similarity matrices of 20 centroids, B a permuted copy of A: 30 restarts (the paper's number) find
    the planted permutation in most problems (2-opt is a local search, so not always) and never do worse than it."""
    found = 0
    for trial in range(6):
        rng = np.random.default_rng(trial)
        S = _centroid_similarity(rng.normal(size=(20, 48)), "cosine")
        p = rng.permutation(20)
        perm, score = qap_2opt(S, S[np.ix_(p, p)], n_restarts=30, rng=np.random.default_rng(100 + trial))
        found += bool(np.array_equal(p[perm], np.arange(20)))          # B[perm][:, perm] == A
        assert score <= qap_objective(S, S, np.arange(20)) + 1e-9       # the planted one is optimal
    assert found >= 4


def test_qap_2opt_ends_in_a_2opt_local_optimum_at_least_as_good_as_scipy():
    rng = np.random.default_rng(2)
    ours, theirs = [], []
    for trial in range(4):
        CA = rng.normal(size=(15, 16))
        SA = _centroid_similarity(CA, "cosine")
        SB = _centroid_similarity(CA[rng.permutation(15)] + 0.9 * rng.normal(size=(15, 16)), "cosine")
        perm, score = qap_2opt(SA, SB, n_restarts=1, rng=np.random.default_rng(trial))
        assert score == pytest.approx(qap_objective(SA, SB, perm))
        for i in range(15):            # no single swap improves: a 2-opt local optimum
            for j in range(i + 1, 15):
                q = perm.copy()
                q[i], q[j] = q[j], q[i]
                assert qap_objective(SA, SB, q) <= score + 1e-9
        ours.append(qap_2opt(SA, SB, n_restarts=5, rng=np.random.default_rng(trial))[1])
        theirs.append(_qap_scipy(SA, SB, 5, np.random.default_rng(trial))[1])
    assert np.mean(ours) >= np.mean(theirs) - 0.05 * abs(np.mean(theirs))


def test_gram_similarity_is_double_centred():
    C = np.random.default_rng(0).normal(size=(6, 4))
    G = _centroid_similarity(C, "gram")
    np.testing.assert_allclose(G.sum(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(G, G.T)


def test_kmeans_finds_separated_clusters_and_is_seeded():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(5, 8)) * 10
    X = np.repeat(centres, 40, axis=0) + rng.normal(size=(200, 8))
    C1, lab1, _ = kmeans(X, 5, np.random.default_rng(3))
    C2, lab2, _ = kmeans(X, 5, np.random.default_rng(3))
    np.testing.assert_array_equal(lab1, lab2)
    assert len(set(lab1.reshape(5, 40)[:, 0])) == 5 and all(len(set(row)) == 1 for row in lab1.reshape(5, 40))
    with pytest.raises(InputError, match="cannot form"):
        kmeans(X[:3], 5, rng)


# --- the estimator on real embeddings ------------------------------------------------------------------------------
def _planted(X, d_out, rng):
    """Unpaired halves with a planted isometry: source = X[:1000]; target = the same geometry embedded in d_out
    dimensions by a random semi-orthogonal Q, rows SHUFFLED (no pairing given); evaluation on X[1000:], which
    neither side contains."""
    Q = np.linalg.qr(rng.normal(size=(d_out, X.shape[1])))[0].T.astype(np.float32)     # d_in x d_out, rows orthonormal
    return X[:1000], (X[:1000] @ Q)[rng.permutation(1000)], X[1000:], X[1000:] @ Q


@pytest.fixture(scope="module")
def small(sample):
    """The sample's real MiniLM vectors reduced to their top 64 principal directions (fast: every SVD is 64 x 96)
    and planted into 96 dimensions. Disjoint halves of real models need thousands of rows per side (at 750 per side,
    minilm6 vs mpnet, top-1 stayed near 0.01): see the shared-data test and the benchmark."""
    X = sample.docs_old
    P = np.linalg.svd(X[:1000] - X[:1000].mean(axis=0), full_matrices=False)[2][:64].T.astype(np.float32)
    return _planted(X @ P, 96, np.random.default_rng(0))


@pytest.fixture(scope="module")
def small_fit(small):
    A, B, _, _ = small
    return MiniVec2Vec(random_state=0, **FAST).fit(A, B)


def _stage_top1(est, name, Xe, Ye):
    W = est.stage_matrices_[name].astype(np.float32)
    return metrics.pair_quality((Xe - est.source_mean_.astype(np.float32)) @ W,
                                Ye - est.target_mean_.astype(np.float32)).top1


def test_unpaired_fit_recovers_a_planted_isometry_into_more_dimensions(small_fit, small):
    _, _, Xe, Ye = small
    q = metrics.pair_quality(small_fit.transform(Xe), Ye)
    assert q.top1 > 0.97 and q.mean_rank < 1.1
    # the approximate matching alone is far from chance (1/500); Refine-1 makes it precise
    assert 0.3 < _stage_top1(small_fit, "initial", Xe, Ye) < q.top1


def test_unequal_dimensions_both_directions(small_fit, small):
    est = small_fit
    A, B, Xe, Ye = small
    assert est.matrix_.shape == (64, 96) and est.inverse_matrix_.shape == (96, 64)
    assert est.n_features_in_ == 64 and est.n_features_out_ == 96 and est.n_samples_src_ == 1000
    assert est.transform(Xe).shape == (500, 96) and est.inverse_transform(B).shape == (1000, 64)
    assert est.anchors_src_.shape == (5 * 20, 64) and est.anchors_tgt_.shape == (5 * 20, 96)
    # smoothing of (semi-)orthogonal maps keeps W's singular values in (0, 1]
    assert 0 < est.singular_values_.min() and est.singular_values_.max() <= 1 + 1e-6
    R = est.procrustes_.matrix_                                       # rows orthonormal: an isometric embedding
    np.testing.assert_allclose(R @ R.T, np.eye(64), atol=1e-8)
    assert [h["stage"] for h in est.history_] == ["initial", "refine1", "refine2"]
    assert est.refine1_n_iter_ == 4 and set(est.timings_) == {"matching", "initial", "refine1", "refine2"}
    assert metrics.mean_cosine(est.inverse_transform(est.transform(Xe)), Xe) > 0.9
    # the other direction, 96 -> 64: W is a projection (columns orthonormal)
    back = MiniVec2Vec(random_state=0, **FAST).fit(B, A)
    assert back.matrix_.shape == (96, 64) and back.procrustes_.is_projection_
    np.testing.assert_allclose(back.procrustes_.matrix_.T @ back.procrustes_.matrix_, np.eye(64), atol=1e-8)
    assert metrics.pair_quality(back.transform(Ye), Xe).top1 > 0.97


def test_planted_isometry_at_the_real_dimensions_384_to_768(sample):
    """The same at the models' own sizes (MiniLM 384-d into 768-d); fewer refinement steps to stay fast."""
    A, B, Xe, Ye = _planted(sample.docs_old, 768, np.random.default_rng(1))
    est = MiniVec2Vec(random_state=0, **dict(FAST, refine1_iter=2)).fit(A, B)
    assert est.matrix_.shape == (384, 768)
    assert metrics.pair_quality(est.transform(Xe), Ye).top1 > 0.97


def test_the_official_code_s_gram_kernel_also_aligns(small):
    """Extraction 2.3: the official code's double-centred Gram matrix instead of the paper's cosine for the QAP."""
    A, B, Xe, Ye = small
    est = MiniVec2Vec(random_state=0, **dict(FAST, similarity="gram")).fit(A, B)
    assert metrics.pair_quality(est.transform(Xe), Ye).top1 > 0.97


def test_centroid_only_variant_starts_worse_and_converges_in_refinement(small, small_fit):
    """Paper 3.2 Option 2: the matched centroids themselves are the pairs; "worse after the Initial Transformation,
    but it converges normally in the Iterative Refinement steps"."""
    A, B, Xe, Ye = small
    est = MiniVec2Vec(random_state=0, **dict(FAST, anchor_mode="centroids", n_runs=10, refine1_iter=8,
                                             refine1_neighbors=10)).fit(A, B)
    assert est.n_pairs_ == 10 * 20
    assert _stage_top1(est, "initial", Xe, Ye) < _stage_top1(small_fit, "initial", Xe, Ye)
    assert metrics.pair_quality(est.transform(Xe), Ye).top1 > 0.97


def test_determinism_for_a_fixed_random_state(small):
    A, B, _, _ = small
    kw = dict(FAST, n_runs=2, refine1_iter=2)
    a = MiniVec2Vec(random_state=7, **kw).fit(A, B)
    b = MiniVec2Vec(random_state=7, **kw).fit(A, B)
    np.testing.assert_array_equal(a.matrix_, b.matrix_)
    np.testing.assert_array_equal(a.anchors_tgt_, b.anchors_tgt_)
    assert a.scale_ == b.scale_ and a.qap_scores_.tolist() == b.qap_scores_.tolist()
    c = MiniVec2Vec(random_state=8, **kw).fit(A, B)
    assert not np.array_equal(a.anchors_src_, c.anchors_src_)


def test_artifact_freezes_the_orthogonal_version(small_fit, small, tmp_path):
    _, _, Xe, Ye = small
    art = Alignment.from_estimator(small_fit.procrustes_, source_model="minilm6-pca64", target_model="planted-96",
                                   anchors={"method": "unsupervised mini-vec2vec"})
    loaded = Alignment.load(art.save(tmp_path / "a.vba"))
    assert loaded.kind == "orthogonal" and loaded.source_dim == 64 and loaded.target_dim == 96
    np.testing.assert_allclose(loaded.transform(Xe), small_fit.procrustes_.transform(Xe), rtol=1e-4, atol=1e-4)
    assert metrics.pair_quality(loaded.transform(Xe), Ye).top1 > 0.97


# --- bad input ----------------------------------------------------------------------------------------------------
def test_nan_is_refused(small):
    A, B, _, _ = small
    bad = A.copy()
    bad[3, 5] = np.nan
    with pytest.raises(InputError, match="X_src: row 3 contains NaN"):
        MiniVec2Vec(**FAST).fit(bad, B)


def test_too_few_points_for_the_clusters(small):
    A, B, _, _ = small
    with pytest.raises(InputError, match="X_src has 300 vectors: too few for refine2_clusters=500"):
        MiniVec2Vec().fit(A[:300], B)
    with pytest.raises(InputError, match="X_tgt has 30 vectors"):
        MiniVec2Vec(**FAST).fit(A, B[:30])


def test_bad_parameters_and_paired_fitting_are_refused(small):
    A, B, _, _ = small
    with pytest.raises(InputError, match="alpha"):
        MiniVec2Vec(alpha=0).fit(A, B)
    with pytest.raises(InputError, match="qap_solver"):
        MiniVec2Vec(qap_solver="faq").fit(A, B)
    with pytest.raises(InputError, match="init"):
        MiniVec2Vec(init="random").fit(A, B)
    with pytest.raises(InputError, match="n_restarts"):
        MiniVec2Vec(n_restarts=0).fit(A, B)
    # the stochastic polish's parameters are checked before any work, like every other one
    for bad in (dict(polish_keep=0.0), dict(polish_keep=1.5), dict(polish_stochastic_iter=-1),
                dict(polish_interval=0), dict(transport_iter=-1), dict(transport_beta=0.0)):
        with pytest.raises(InputError, match=next(iter(bad))):
            MiniVec2Vec(**bad).fit(A, B)
    # no pairs, so none of the paired estimators' fitting methods (not even ones that would only raise)
    assert not any(hasattr(MiniVec2Vec(), m) for m in ("partial_fit", "fit_stream", "fit_moments"))
    with pytest.raises(InputError, match="not fitted"):
        MiniVec2Vec().transform(A)


# --- restarts chosen by the label-free criterion, VecMap starts, the polish (ours) ---------------------------------
def test_defaults_are_the_robust_path_and_the_paper_s_run_is_one_parameter_set_away():
    p = MiniVec2Vec().get_params()
    assert (p["init"], p["n_restarts"], p["polish_iter"]) == ("auto", 4, 10)
    assert (p["polish_stochastic_iter"], p["polish_keep"], p["polish_interval"]) == (0, 0.1, 3)
    assert (p["transport_iter"], p["transport_beta"]) == (10, 20.0)
    est = MiniVec2Vec(**PAPER)
    assert est._schedule() == [("centroids", 20)]
    assert MiniVec2Vec()._schedule() == [("centroids", 20), ("vecmap", None), ("vecmap", None), ("centroids", 30)]
    assert MiniVec2Vec(init="vecmap", n_restarts=2)._schedule() == [("vecmap", None), ("vecmap", None)]
    assert MiniVec2Vec(init="centroids", n_restarts=3)._schedule() == [("centroids", 20), ("centroids", 30),
                                                                        ("centroids", 20)]


def test_restart_key_prefers_passing_then_gain():
    passing = {"passed": True, "gain": 0.06, "score": 1.05}
    stronger = {"passed": True, "gain": 0.08, "score": 1.05}
    failing = {"passed": False, "gain": 0.04, "score": 0.9}
    assert _restart_key(stronger) > _restart_key(passing) > _restart_key(failing) > _restart_key({})


def test_restarts_are_validated_and_the_best_is_kept(small):
    """Two starts (a centroid matching and a VecMap start), no early stop: both validated on the fit's rows, the
    winner is the one the criterion ranks first, and its map is what the estimator holds."""
    A, B, Xe, Ye = small
    kw = dict(FAST, n_restarts=2, init="auto", restart_margin=100.0, vecmap_sample=500, vecmap_iter=10,
              polish_iter=3)
    est = MiniVec2Vec(random_state=0, **kw).fit(A, B)
    assert [r["init"] for r in est.restarts_] == ["centroids", "vecmap"]
    assert all({"score", "gain", "agreement", "passed", "seconds"} <= set(r) for r in est.restarts_)
    best = max(est.restarts_, key=_restart_key)
    assert est.restart_ == best["restart"] and est.init_ == best["init"] and est.validation_["passed"]
    assert {"validation", "refine1", "refine2", "polish", "transport"} <= set(est.timings_)
    assert {"polish", "transport"} <= set(est.stage_matrices_) and est.history_[-1]["stage"] == "transport"
    assert metrics.pair_quality(est.transform(Xe), Ye).top1 > 0.97
    assert metrics.pair_quality(est.procrustes_.transform(Xe), Ye).top1 > 0.97


def test_starts_side_by_side_keep_what_one_after_another_keeps(small):
    """With ``n_jobs=2`` the starts after the first run in threads and their results are taken in schedule order:
    the records, the kept start and the map equal a one-after-another search on one BLAS thread."""
    from threadpoolctl import threadpool_limits

    A, B, _, _ = small
    kw = dict(FAST, n_restarts=4, init="auto", restart_margin=100.0, vecmap_sample=500, vecmap_iter=10,
              polish_iter=3, confirm_below=0)
    with threadpool_limits(1):   # the side-by-side starts run on one BLAS thread each; so does the rest here
        one = MiniVec2Vec(random_state=0, n_jobs=1, **kw).fit(A, B)
        two = MiniVec2Vec(random_state=0, n_jobs=2, **kw).fit(A, B)

    def records(est):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in est.restarts_]

    assert len(two.restarts_) == 4 and records(two) == records(one)
    assert (two.restart_, two.init_, two.n_pairs_) == (one.restart_, one.init_, one.n_pairs_)
    np.testing.assert_array_equal(two.matrix_, one.matrix_)
    assert two.get_params()["n_jobs"] == 2
    with pytest.raises(InputError, match="n_jobs"):
        MiniVec2Vec(n_jobs=0).fit(A, B)


def test_a_start_abandoned_by_the_search_stops_at_its_first_check(small):
    """A start running beside others stops once the search has settled on an earlier one (its event set): the
    centroid matching checks before every run, VecMap before every self-learning iteration, Refine-1 before every
    iteration."""
    import threading

    from vecbridge.align.minivec2vec import _Stopped

    A, B, _, _ = small
    stop = threading.Event()
    stop.set()
    est = MiniVec2Vec(random_state=0, vecmap_sample=500, vecmap_iter=5, **FAST)
    rng = np.random.default_rng(0)
    for kind in ("centroids", "vecmap"):
        with pytest.raises(_Stopped):
            est._start(1, kind, 20, A, B, rng, rng, rng, None, stop)
    assert est._stop is None        # the estimator itself is never marked: each start runs on a copy


def test_a_clear_pass_stops_the_restarts_early(small):
    A, B, _, _ = small
    est = MiniVec2Vec(random_state=0, **dict(FAST, n_restarts=4, init="auto", restart_margin=0.0,
                                             confirm_below=0)).fit(A, B)
    assert len(est.restarts_) == 1 and est.restart_ == 0 and est.restarts_[0]["passed"]


def test_stochastic_polish_runs_for_an_accepted_start_and_can_be_turned_off(small):
    """The polish's stochastic phase (VecMap's stochastic dictionary induction) runs for a start the validation
    accepts, then the deterministic final phase; ``polish_keep=1`` (or ``polish_stochastic_iter=0``) is the
    deterministic polish alone. Both leave a working map working."""
    A, B, Xe, Ye = small
    kw = dict(FAST, n_restarts=2, init="auto", restart_margin=0.0, polish_iter=5, polish_sample=600)
    est = MiniVec2Vec(random_state=0, polish_stochastic_iter=8, **kw).fit(A, B)
    assert est.validation_["passed"] and 1 <= est.polish_n_stochastic_ <= 8
    assert est.polish_n_stochastic_ < len(est.polish_objective_) <= est.polish_n_stochastic_ + 5
    assert metrics.pair_quality(est.transform(Xe), Ye).top1 > 0.97
    for off in (dict(polish_keep=1.0, polish_stochastic_iter=8), dict(polish_stochastic_iter=0)):
        plain = MiniVec2Vec(random_state=0, **kw, **off).fit(A, B)
        assert plain.polish_n_stochastic_ == 0 and 1 <= len(plain.polish_objective_) <= 5
        assert metrics.pair_quality(plain.transform(Xe), Ye).top1 > 0.97
    paper = MiniVec2Vec(random_state=0, **dict(FAST, **PAPER))
    assert paper.fit(A, B) is paper and paper.polish_n_stochastic_ == 0 and paper.polish_objective_ == []


def test_transport_polish_runs_last_for_an_accepted_start_and_can_be_turned_off(small):
    """After the CSLS polish, rounds of Procrustes on an entropic transport plan: a stage of its own (matrix, history,
    timing) for a start the validation accepts; ``transport_iter=0`` and ``polish_iter=0`` (the paper's run) skip it.
    The map stays orthogonal and working."""
    A, B, Xe, Ye = small
    kw = dict(FAST, n_restarts=2, init="auto", restart_margin=0.0, polish_iter=3, polish_sample=600,
              polish_stochastic_iter=0)
    est = MiniVec2Vec(random_state=0, transport_iter=3, **kw).fit(A, B)
    assert est.validation_["passed"] and est.history_[-1]["stage"] == "transport" and "transport" in est.timings_
    W = est.stage_matrices_["transport"]
    np.testing.assert_allclose(W @ W.T, np.eye(W.shape[0]), atol=1e-6)
    assert not np.allclose(W, est.stage_matrices_["polish"])
    assert metrics.pair_quality(est.transform(Xe), Ye).top1 > 0.97
    off = MiniVec2Vec(random_state=0, transport_iter=0, **kw).fit(A, B)
    assert "transport" not in off.stage_matrices_ and off.history_[-1]["stage"] == "polish"
    np.testing.assert_array_equal(off.stage_matrices_["polish"], est.stage_matrices_["polish"])
    paper = MiniVec2Vec(random_state=0, **dict(FAST, **PAPER)).fit(A, B)
    assert not {"polish", "transport"} & set(paper.stage_matrices_)


def test_vecmap_start_alone(small):
    A, B, Xe, Ye = small
    est = MiniVec2Vec(random_state=0, **dict(FAST, init="vecmap", vecmap_sample=600, vecmap_iter=10)).fit(A, B)
    assert est.init_ == "vecmap" and est.validation_ is None and est.anchors_src_ is None
    assert est.vecmap_n_iter_ <= 10 and "vecmap" in est.timings_
    assert metrics.pair_quality(est.transform(Xe), Ye).top1 > 0.97


# --- the paper's protocol on the full shared data (skipped on a fresh clone) ---------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not SHARED_WORDNET.exists(), reason="../shared/data/wordnet not present")
def test_disjoint_halves_of_real_models_with_unequal_dimensions_align_unsupervised():
    """The mini-vec2vec paper's protocol at 4,000 + 4,000 rows, minilm6 (384-d) -> mpnet (768-d): the source model embeds items
    0..3,999, the target model items 4,000..7,999 (no item on both sides, no pair); top-1 of the true partner among
    2,000 held-out items (chance: 0.0005). Library defaults. About 45 s of CPU (the benchmark has all pairs)."""
    load = lambda m: np.load(SHARED_WORDNET / f"{m}_docs.npy").astype(np.float32)  # noqa: E731
    X, Y = load("minilm6"), load("mpnet")
    est = MiniVec2Vec(random_state=0).fit(X[:4000], Y[4000:8000])
    q = metrics.pair_quality(est.transform(X[8000:]), Y[8000:])
    assert q.top1 > 0.85 and q.mean_rank < 3
