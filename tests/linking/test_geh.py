"""GEH (the Vector Linking paper, 2026) on the bundled real sample: recovers links from 15 seeds, is reproducible, handles unequal
dimensions and refuses bad seeds; plus the shared helpers it added to ``linking.neighbors``."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from vecbridge.align import OrthogonalProcrustes
from vecbridge.errors import CheckFailed, InputError
from vecbridge.linking.geh import GEH, GEHSearch, GEHVotes, _decoy_calibration, _fps, _otsu, check_seed_pairs
from vecbridge.numeric.neighbors import KnnIndex, csls_best, csls_mutual_from_knn, knn
from vecbridge.vectors import l2_normalize


def overlapping_halves(sample, lo1, hi1, lo2, hi2, *, swap=False, seed=0, n_seeds=15):
    """Collection 1 = items lo1..hi1 (MiniLM), collection 2 = items lo2..hi2 (MPNet), rows shuffled; true pairs are the
    shared items. ``swap`` puts MPNet (768-d) first."""
    rng = np.random.default_rng(seed)
    A, B = (sample.docs_new, sample.docs_old) if swap else (sample.docs_old, sample.docs_new)
    items1, items2 = np.arange(lo1, hi1), np.arange(lo2, hi2)
    p1, p2 = rng.permutation(len(items1)), rng.permutation(len(items2))
    X1, X2 = A[items1[p1]], B[items2[p2]]
    pos1 = {int(it): i for i, it in enumerate(items1[p1])}
    pos2 = {int(it): i for i, it in enumerate(items2[p2])}
    shared = np.intersect1d(items1, items2)
    truth = np.array([[pos1[int(x)], pos2[int(x)]] for x in shared])
    seeds = truth[rng.choice(len(truth), n_seeds, replace=False)]
    return X1, X2, truth, seeds


def prf(links, truth, seeds):
    seed_set = set(map(tuple, seeds.tolist()))
    true = set(map(tuple, truth.tolist())) - seed_set
    pred = [tuple(p) for p in np.asarray(links).tolist() if tuple(p) not in seed_set]
    tp = sum(p in true for p in pred)
    precision = tp / len(pred) if pred else 0.0
    recall = tp / len(true)
    return precision, recall, 2 * precision * recall / max(precision + recall, 1e-12)


@pytest.fixture(scope="module")
def halves(sample):
    return overlapping_halves(sample, 0, 1000, 500, 1500)      # 1000 x 1000, 500 shared (alpha = 1/3)


@pytest.fixture(scope="module")
def fitted(halves):
    X1, X2, truth, seeds = halves
    return GEH(random_state=0).fit(X1, X2, seeds)


def test_recovers_the_shared_items_from_15_seeds(halves, fitted):
    X1, X2, truth, seeds = halves
    p, r, f1 = prf(fitted.links_, truth, seeds)
    # the calibrated cut (confidence >= 0.7) trades recall for precision: on this 1,000-row sample 0.96 / 0.72
    # (the two-Gaussian cut it replaces: 0.94 / 0.84 on the same sample)
    assert p >= 0.9 and r >= 0.65, (p, r)
    # the paper's baseline (a map fitted on the seeds, then CSLS mutual NN) is far below
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = OrthogonalProcrustes().fit(X1[seeds[:, 0]], X2[seeds[:, 1]])
    Y, Z = l2_normalize(base.transform(X1)), l2_normalize(X2)
    pairs = csls_mutual_from_knn(*knn(Y, Z, 10, normalize=False), *knn(Z, Y, 10, normalize=False), 10)[0]
    assert prf(pairs, truth, seeds)[2] < 0.3 < f1 - 0.45
    # the bootstrap stage alone (the paper's output) already carries most of it
    gp, gr, _ = prf(fitted.geh_links_, truth, seeds)
    assert gp >= 0.75 and gr >= 0.85, (gp, gr)


def test_fitted_state_is_a_partial_one_to_one_matching(halves, fitted):
    X1, X2, truth, seeds = halves
    L = fitted.links_
    assert L.ndim == 2 and L.shape[1] == 2 and L.dtype.kind == "i"
    assert len(np.unique(L[:, 0])) == len(L) == len(np.unique(L[:, 1]))
    assert L[:, 0].min() >= 0 and L[:, 0].max() < len(X1) and L[:, 1].max() < len(X2)
    assert len(L) < min(len(X1), len(X2))                 # non-shared items stay unmatched
    np.testing.assert_array_equal(L[fitted.is_seed_], seeds)
    assert fitted.confidence_.shape == (len(L),)
    assert np.all((fitted.confidence_ > 0) & (fitted.confidence_ <= 1)) and np.all(fitted.confidence_[fitted.is_seed_] == 1)
    # the posterior is informative: found links that are right have more support than those that are wrong
    true = set(map(tuple, truth.tolist()))
    ok = np.array([tuple(p) in true for p in L.tolist()]) & ~fitted.is_seed_
    bad = ~np.array([tuple(p) in true for p in L.tolist()])
    assert fitted.confidence_[ok].mean() > fitted.confidence_[bad].mean()
    hist = fitted.history_
    assert fitted.n_iter_ == len(hist) >= 2 and fitted.stop_reason_ in ("links_stable", "mnn_ratio_stable", "max_iter")
    assert hist[0]["n_links"] <= 2 * len(seeds) and hist[-1]["n_links"] > 10 * len(seeds)   # capped growth, then bootstrapped
    assert {"n_views", "view_size", "n_proposals", "n_promoted", "mnn_ratio", "seconds"} <= set(hist[0])


def test_no_bootstrapping_finds_almost_nothing(halves):
    X1, X2, truth, seeds = halves
    g = GEH(random_state=0, votes=GEHVotes(bootstrap=False, min_grown=0), refine=None).fit(X1, X2, seeds)
    assert g.n_iter_ == 1 and len(g.links_) <= 2 * len(seeds)
    with pytest.raises(CheckFailed, match="bootstrapping never took off: 15 links grew beyond the 15 seed pairs"):
        GEH(random_state=0, votes=GEHVotes(bootstrap=False), refine=None).fit(X1, X2, seeds)


def test_calibrated_confidence_ranks_the_links_and_predicts_their_precision(halves, fitted):
    """The label-free confidence: links ranked by it (seeds first), all above the cut, and the precision it predicts
    for the returned links within 0.05 of the measured one."""
    X1, X2, truth, seeds = halves
    conf, seed = fitted.confidence_, fitted.is_seed_
    assert seed[:len(seeds)].all() and not seed[len(seeds):].any()
    found = conf[~seed]
    assert np.all(np.diff(found) <= 1e-12) and found.min() >= fitted.votes.min_confidence
    p = prf(fitted.links_, truth, seeds)[0]
    assert abs(fitted.estimated_precision_ - p) <= 0.05, (fitted.estimated_precision_, p)
    assert fitted.seed_agreement_ >= 0.9 and fitted.precision_at_.shape == conf.shape
    assert fitted.vote_confidence_.shape == conf.shape
    cal = fitted.calibration_
    assert len(cal["candidates"]) == len(cal["candidate_confidence"]) >= len(found)


def _wrong(seeds):
    wrong = seeds.copy()
    wrong[:, 1] = np.roll(wrong[:, 1], 1)          # every partner shuffled: no seed pair is true
    return wrong


def test_the_take_off_check_can_be_switched_off(halves):
    """``min_grown=0`` (what ``--force`` needs) returns the links of a failed run instead of raising."""
    X1, X2, truth, seeds = halves
    g = GEH(random_state=0).set_params(min_grown=0).fit(X1, X2, _wrong(seeds))
    assert prf(g.links_, truth, seeds)[0] < 0.3


def test_decoy_calibration_on_a_known_null():
    """Wrong links scored like the decoys: the predicted precision of every cut is the true one within 0.05."""
    rng = np.random.default_rng(0)
    n, n_right, n_wrong = 5000, 2000, 900        # rows per side, right links, wrong links (from partnerless rows)
    right = rng.normal(0.45, 0.1, n_right)
    r = n_wrong / (n - n_right)                   # chance that a partnerless row forms a wrong link
    wrong = rng.normal(0.12, 0.08, n_wrong)
    n_rows = 4000
    decoys = rng.normal(0.12, 0.08, rng.binomial(n_rows, r))
    scores = np.concatenate([right, wrong])
    lab = np.arange(len(scores)) < n_right
    post, prec, (N, rate) = _decoy_calibration(scores, decoys, n_rows, n - len(scores))
    assert abs(N - (n - n_right)) < 0.1 * n and abs(rate - r) < 0.05
    for cut in (0.5, 0.7, 0.9):
        k = post >= cut
        assert abs(post[k].mean() - lab[k].mean()) < 0.05, cut
    assert np.all(np.diff(post[np.argsort(-scores)]) <= 1e-12)       # ranked by score


def test_same_random_state_same_links_unequal_dimensions_either_way(sample):
    X1, X2, truth, seeds = overlapping_halves(sample, 0, 600, 300, 900, swap=True, seed=1)   # 768-d first
    assert X1.shape[1] == 768 and X2.shape[1] == 384
    a = GEH(random_state=7, max_iter=5).fit(X1, X2, seeds)
    b = GEH(random_state=7, max_iter=5).fit(X1, X2, seeds)
    np.testing.assert_array_equal(a.links_, b.links_)
    np.testing.assert_array_equal(a.confidence_, b.confidence_)
    assert [h["n_links"] for h in a.history_] == [h["n_links"] for h in b.history_]
    assert prf(a.links_, truth, seeds)[0] >= 0.6


def test_local_neighbourhood_path_runs_and_links(sample):
    """App. B.3's path (k-means views, ambient k-NN local sets) forced on a small collection."""
    X1, X2, truth, seeds = overlapping_halves(sample, 0, 600, 300, 900, seed=2)
    g = GEH(random_state=0, search=GEHSearch(large_threshold=0, local_size=512), refine=None, max_iter=8).fit(
        X1, X2, seeds)
    p, r, _ = prf(g.links_, truth, seeds)
    assert p >= 0.6 and len(g.links_) > 3 * len(seeds), (p, r)


@pytest.mark.parametrize("bad, message", [
    (np.array([[0, 1], [2, 3], [4, 5], [6, 7], [8, 1000]]), "outside"),
    (np.array([[0, 1], [2, 3], [4, 5], [6, 7], [-1, 9]]), "outside"),
    (np.array([[0, 1], [2, 3], [4, 5], [6, 7], [0, 9]]), "more than one"),
    (np.array([[0, 1], [2, 3], [4, 5], [6, 7], [8, 1]]), "more than one"),
    (np.array([[0, 1], [2, 3], [4, 5]]), "at least"),
    (np.arange(10), "shape"),
    (np.array([[0.5, 1], [2, 3], [4, 5], [6, 7], [8, 9]]), "integer"),
])
def test_bad_seeds_are_refused(halves, bad, message):
    X1, X2, _, _ = halves
    with pytest.raises(InputError, match=message):
        GEH().fit(X1[:100], X2[:100], bad)


def test_bad_parameters_are_refused_before_any_work(halves):
    """A misspelt option fails at the start of fit, in one line naming the parameter and what it may be."""
    X1, X2, _, seeds = halves
    with pytest.raises(InputError, match=r"^GEH: refine must be one of None, 'procrustes', got 'typo'$"):
        GEH(refine="typo").fit(X1, X2, seeds)
    with pytest.raises(InputError, match="view_sampling must be one of 'fps', 'random'"):
        GEH().set_params(view_sampling="kmeans").fit(X1, X2, seeds)
    with pytest.raises(InputError, match="max_growth must be None or a number > 0"):
        GEH(votes=GEHVotes(max_growth=0)).fit(X1, X2, seeds)


def test_flat_option_names_set_the_groups(halves):
    """``set_params(shortlist=...)`` (the CLI's flat keys) and the grouped constructor build the same fit."""
    X1, X2, _, seeds = halves
    a = GEH(random_state=3, max_iter=3, refine=None).set_params(shortlist=8, vote_decay=1.0)
    b = GEH(random_state=3, max_iter=3, refine=None, search=GEHSearch(shortlist=8), votes=GEHVotes(vote_decay=1.0))
    assert a.get_params(deep=True) == b.get_params(deep=True)
    np.testing.assert_array_equal(a.fit(X1, X2, seeds).links_, b.fit(X1, X2, seeds).links_)


def test_bad_vectors_are_refused(halves):
    X1, X2, _, seeds = halves
    broken = X1.copy()
    broken[3, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        GEH().fit(broken, X2, seeds)
    with pytest.raises(InputError):
        GEH().fit(X1[0], X2, seeds)


def test_seed_check_accepts_integral_floats():
    S = check_seed_pairs(np.array([[0.0, 1.0], [2, 3], [4, 5], [6, 7], [8, 9]]), 10, 10)
    assert S.dtype == np.int64 and S.shape == (5, 2)


# --- helpers ------------------------------------------------------------------------------------------------------
def test_otsu_splits_a_bimodal_histogram():
    rng = np.random.default_rng(0)
    votes = np.concatenate([rng.poisson(1.0, 5000) + 1, rng.poisson(12.0, 500) + 1])
    thr = _otsu(votes)
    assert 4 <= thr <= 9
    assert _otsu(np.full(10, 3.0)) == 3.0


def test_fps_picks_the_farthest_point_each_time():
    rng = np.random.default_rng(0)
    P = rng.normal(size=(200, 5))
    D = np.linalg.norm(P[:, None] - P[None], axis=-1)
    sel = _fps(D, 10, 0, None)
    for i in range(1, 10):
        mind = D[:, sel[:i]].min(axis=1)
        assert mind[sel[i]] == pytest.approx(mind.max())


def test_csls_mutual_from_full_lists_matches_dense_csls():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(300, 16)).astype(np.float32), rng.normal(size=(250, 16)).astype(np.float32)
    Xn, Yn = l2_normalize(X), l2_normalize(Y)
    i12, s12 = knn(Xn, Yn, 250, normalize=False)
    i21, s21 = knn(Yn, Xn, 300, normalize=False)
    pairs, _, r_y, r_x = csls_mutual_from_knn(i12, s12, i21, s21, 10)
    best_y, _, best_x, _ = csls_best(X, Y, 10)
    mutual = np.flatnonzero(best_x[best_y] == np.arange(300))
    np.testing.assert_array_equal(pairs, np.stack([mutual, best_y[mutual]], axis=1))
    # short lists padded with -1 are ignored, not matched
    i12[:, 5:] = -1
    assert (csls_mutual_from_knn(i12, s12, i21, s21, 10)[0][:, 1] >= 0).all()


def test_knn_index_exact_and_inverted_file_agree_on_real_vectors(sample):
    pytest.importorskip("faiss")
    B = sample.docs_new
    exact = KnnIndex(B).search(B[:200], 10)[0]
    np.testing.assert_array_equal(exact, knn(B[:200], B, 10)[0])
    approx = KnnIndex(B, exact_max=0, nprobe=16).search(B[:200], 10)[0]
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact, approx)])
    assert overlap > 0.85
