"""A mini-vec2vec start short of the gain rule is accepted when an independent start reproduces its map
(``vecbridge.align.validation.reproduction``, ``MiniVec2Vec(confirm=True)``) and refused as before when none does;
``check_map`` accepts such a confirmed map with the reason, and nothing else it would have refused."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.conftest import write_collection
from vecbridge.align import OrthogonalProcrustes, minivec2vec
from vecbridge.align.minivec2vec import MiniVec2Vec, _restart_key
from vecbridge.align.validation import (
    CONFIRMED_THRESHOLD,
    GAIN_MIN,
    REPRODUCTION_MIN,
    decide,
    random_orthogonal,
    reproduction,
)
from vecbridge.errors import CheckFailed, InputError
from vecbridge.pairing.learned import check_map
from vecbridge.vectors import l2_normalize

pytestmark = pytest.mark.usefixtures("reuse_nulls")

FAST = dict(n_runs=5, qap_restarts=10, n_neighbors=10, refine1_iter=4, refine1_tol=0, refine1_neighbors=1,
            refine2_clusters=50, init="auto", restart_margin=100.0, vecmap_sample=500, vecmap_iter=10, polish_iter=2,
            polish_sample=600, transport_iter=2, confirm_below=0)
GREY = 0.7 * GAIN_MIN          # a gain short of the rule, above a confirmed map's floor


# --- the measure --------------------------------------------------------------------------------------------------
def test_reproduction_is_one_for_one_map_and_about_one_over_n_for_unrelated_maps():
    rng = np.random.default_rng(0)
    X = l2_normalize(rng.normal(size=(1000, 32)).astype(np.float32))
    Y = l2_normalize(rng.normal(size=(1000, 32)).astype(np.float32))
    W = random_orthogonal(32, 32, rng)
    assert reproduction(X, Y, W, W) == 1.0
    unrelated = [reproduction(X, Y, random_orthogonal(32, 32, rng), random_orthogonal(32, 32, rng))
                 for _ in range(8)]
    assert np.mean(unrelated) < 3 / len(Y) and max(unrelated) < REPRODUCTION_MIN / 20


def test_decide_accepts_a_short_gain_only_when_confirmed_and_above_the_floor():
    conf = {"start": "vecmap start #1", "by": "centroids start #0", "reproduction": 0.6}
    assert not decide(GREY, 0.99)[1]                                     # the gain rule alone: refused
    score, passed, reason = decide(GREY, 0.99, confirmation=conf)
    assert passed and CONFIRMED_THRESHOLD <= score < 1.0
    assert "centroids start #0" in reason and "60%" in reason
    assert not decide(GREY, 0.99, confirmation={**conf, "reproduction": REPRODUCTION_MIN - 0.01})[1]
    assert not decide(0.4 * GAIN_MIN, 0.99, confirmation=conf)[1]       # below the floor: refused as before
    assert not decide(GREY, 0.90, confirmation=conf)[1]                  # far from its refined optimum
    assert decide(2 * GAIN_MIN, 0.99)[1] and decide(2 * GAIN_MIN, 0.99, confirmation=conf)[1]


# --- the search (the judge's gain moved into the grey zone; maps, agreement and reproduction are real) ------------
def _grey_judge(monkeypatch, gains):
    """Report the ``i``-th validated start's gain as ``gains[i]`` (its agreement and map as measured), so the true
    maps that the planted isometry gives every start land where the test needs them."""
    real = minivec2vec._Judge.validate
    calls = []

    def validate(self, W):
        v = real(self, W)
        gain = gains[min(len(calls), len(gains) - 1)]
        calls.append(gain)
        score, passed, reason = decide(gain, v.agreement)
        return dataclasses.replace(v, gain=gain, score=score, passed=passed, reason=reason)

    monkeypatch.setattr(minivec2vec._Judge, "validate", validate)


@pytest.fixture(scope="module")
def planted(sample):
    """The sample's vectors in their top 64 principal directions, planted into 96 dimensions, rows shuffled."""
    X = sample.docs_old
    P = np.linalg.svd(X[:1000] - X[:1000].mean(axis=0), full_matrices=False)[2][:64].T.astype(np.float32)
    X = X @ P
    rng = np.random.default_rng(0)
    Q = np.linalg.qr(rng.normal(size=(96, 64)))[0].T.astype(np.float32)
    return X[:1000], (X[:1000] @ Q)[rng.permutation(1000)]


def test_a_grey_start_that_another_start_reproduces_is_accepted(planted, monkeypatch):
    """Both starts find the planted map, neither passes the gain rule: the second reproduces the first, the search
    stops there (4 starts allowed), the kept start is accepted (the transport polish runs) and its evidence travels
    to the saved orthogonal map."""
    _grey_judge(monkeypatch, [GREY, GREY + 0.001])
    est = MiniVec2Vec(random_state=0, **dict(FAST, n_restarts=4)).fit(*planted)
    assert len(est.restarts_) == 2 and not any(r["passed"] for r in est.restarts_)
    assert [r["confirmed_by"] for r in est.restarts_] == [1, 0]
    assert est.restarts_[1]["reproductions"][0] >= REPRODUCTION_MIN
    assert est.restart_ == 1 and est.validation_["confirmed_by"] == 0 and not est.validation_["passed"]
    assert est.validation_["reproduction"] >= REPRODUCTION_MIN and "transport" in est.stage_matrices_
    assert est.confirmation_ == {"start": "vecmap start #1", "by": "centroids start #0",
                                 "reproduction": round(est.validation_["reproduction"], 4)}
    assert est.procrustes_.confirmation_ == est.confirmation_


def test_a_grey_start_no_other_start_confirms_is_refused(planted, monkeypatch):
    """The first start in the grey zone, the others no better than refined random maps: nothing confirms it, every
    start runs, none is accepted (no transport polish, no evidence), exactly as without the rule."""
    _grey_judge(monkeypatch, [GREY, 0.3 * GAIN_MIN])
    est = MiniVec2Vec(random_state=0, **dict(FAST, n_restarts=3)).fit(*planted)
    assert len(est.restarts_) == 3 and all(r.get("confirmed_by") is None for r in est.restarts_)
    assert "reproductions" not in est.restarts_[1]                      # not worth comparing
    assert est.restart_ == 0 and _restart_key(est.restarts_[0])[0] == 0
    assert est.confirmation_ is None and est.procrustes_.confirmation_ is None
    assert "transport" not in est.stage_matrices_
    # no start passed: the best failure is kept in doubt, for check_map (its polish may lift it past the rule)
    assert est.doubt_ == {"start": "centroids start #0", "gain": round(GREY, 4), "clear_gain": round(100 * GAIN_MIN, 4),
                          "starts": 3, "rows": 1000, "passed": False}
    assert est.procrustes_.doubt_ == est.doubt_


def test_confirm_false_keeps_the_gain_rule_alone(planted, monkeypatch):
    _grey_judge(monkeypatch, [GREY, GREY])
    est = MiniVec2Vec(random_state=0, **dict(FAST, n_restarts=2, confirm=False)).fit(*planted)
    assert all(r.get("confirmed_by") is None for r in est.restarts_) and est.confirmation_ is None
    with pytest.raises(InputError, match="confirm"):
        MiniVec2Vec(confirm="yes").fit(*planted)


# --- check_map on a real grey case: a true rotation whose gain is short of the rule ---------------------------------
def _mixture(n, rng, centres, scales):
    return (centres[rng.integers(len(centres), size=n)] + rng.normal(size=(n, len(scales))) * scales).astype(
        np.float32)


def _rotated_mixture(root, seed: int, noise: float):
    """Two collections of an anisotropic Gaussian mixture (12 weakly separated clusters in 32-d), the target an
    independent sample rotated by Q plus ``noise``, and the true map (Procrustes on a third sample and its image)."""
    rng = np.random.default_rng(seed)
    scales = np.exp(-np.arange(32) / 8)
    centres = rng.normal(size=(12, 32)) * scales * 1.3
    Q = np.linalg.qr(rng.normal(size=(32, 32)))[0].astype(np.float32)
    A = _mixture(1000, rng, centres, scales)
    B = _mixture(1000, rng, centres, scales) @ Q + noise * rng.normal(size=(1000, 32)).astype(np.float32)
    P = _mixture(1000, rng, centres, scales)
    src = write_collection(f"file://{root}/a", [f"a{i}" for i in range(1000)], A)
    tgt = write_collection(f"file://{root}/b", [f"b{i}" for i in range(1000)], B)
    return src, tgt, OrthogonalProcrustes(center=False).fit(P, P @ Q)


@pytest.fixture(scope="module")
def grey_case(tmp_path_factory):
    """Noisy enough that the true map stands only ~0.04 above refined random maps (GAIN_MIN 0.045)."""
    return _rotated_mixture(tmp_path_factory.mktemp("grey"), 0, 0.3)


def _check(case, confirmation):
    src, tgt, true_map = case
    true_map.confirmation_ = confirmation
    return check_map(true_map, src, tgt, src.sample(1000, seed=0), tgt.sample(1000, seed=1), seed=0, force=False,
                     what="the unsupervised alignment (mini-vec2vec)", advice="give seed pairs")


def test_check_map_accepts_a_confirmed_grey_map_with_its_reason_and_refuses_it_unconfirmed(grey_case):
    with pytest.raises(CheckFailed, match="failed validation .* only .* above refined random maps"):
        _check(grey_case, None)
    with pytest.raises(CheckFailed, match="failed validation"):
        _check(grey_case, {"start": "centroids start #0", "by": "vecmap start #2", "reproduction": 0.05})
    record = _check(grey_case, {"start": "centroids start #0", "by": "vecmap start #2", "reproduction": 0.61})
    assert record["passed"] and record["score"] < 1.0 and record["threshold"] == CONFIRMED_THRESHOLD
    assert CONFIRMED_THRESHOLD * GAIN_MIN <= record["gain"] < GAIN_MIN
    assert "independent start of the fit (vecmap start #2) reached the same map (61%" in record["reason"]
    assert record["confirmation"]["by"] == "vecmap start #2"


# --- a narrow pass no other start reproduces: more starts, then doubt ---------------------------------------------
NARROW = 1.1 * GAIN_MIN        # passes the gain rule, short of a clear pass (restart_margin 1.5)


def test_a_narrow_pass_nothing_reproduces_runs_more_starts_then_is_in_doubt(planted, monkeypatch):
    """The best start passes narrowly, the others stand no higher than refined random maps: the schedule continues
    for ``confirm_starts`` more starts, none confirms it, and the kept start is recorded as in doubt, on the
    estimator and on the saved orthogonal map."""
    _grey_judge(monkeypatch, [NARROW, 0.3 * GAIN_MIN])
    est = MiniVec2Vec(random_state=0, **dict(FAST, n_restarts=2, restart_margin=1.5, confirm_starts=2)).fit(*planted)
    assert [r["init"] for r in est.restarts_] == ["centroids", "vecmap", "vecmap", "centroids"]
    assert est.restart_ == 0 and est.confirmation_ is None
    assert est.doubt_ == {"start": "centroids start #0", "gain": round(NARROW, 4),
                          "clear_gain": round(1.5 * GAIN_MIN, 4), "starts": 4, "rows": len(planted[0]),
                          "passed": True}
    assert est.procrustes_.doubt_ == est.doubt_


def test_a_narrow_pass_an_extra_start_reproduces_is_confirmed_and_the_search_stops(planted, monkeypatch):
    """The first extra start finds the planted map again: it reproduces the narrow pass, the search stops there
    (one of the two extra starts run) and nothing is in doubt."""
    _grey_judge(monkeypatch, [NARROW, 0.3 * GAIN_MIN, NARROW + 0.001])
    est = MiniVec2Vec(random_state=0, **dict(FAST, n_restarts=2, restart_margin=1.5, confirm_starts=2)).fit(*planted)
    assert len(est.restarts_) == 3 and est.restarts_[2]["confirmed_by"] == 0
    assert est.restart_ == 2 and est.confirmation_["by"] == "centroids start #0" and est.doubt_ is None


def test_no_extra_starts_where_the_search_passes_clearly_or_confirm_starts_is_zero(planted, monkeypatch):
    _grey_judge(monkeypatch, [2 * GAIN_MIN])
    clear = MiniVec2Vec(random_state=0, **dict(FAST, n_restarts=2, restart_margin=1.5)).fit(*planted)
    assert len(clear.restarts_) == 1 and clear.doubt_ is None
    _grey_judge(monkeypatch, [NARROW, 0.3 * GAIN_MIN])
    none = MiniVec2Vec(random_state=0, **dict(FAST, n_restarts=2, restart_margin=1.5, confirm_starts=0)).fit(*planted)
    assert len(none.restarts_) == 2 and none.doubt_["starts"] == 2
    with pytest.raises(InputError, match="confirm_starts"):
        MiniVec2Vec(confirm_starts=-1).fit(*planted)


@pytest.fixture(scope="module")
def clear_case(tmp_path_factory):
    """Little noise: the true map passes validation on its own."""
    return _rotated_mixture(tmp_path_factory.mktemp("clear"), 1, 0.02)


def test_check_map_refuses_a_map_in_doubt_below_a_clear_pass_and_marks_it_when_forced(clear_case):
    src, tgt, true_map = clear_case
    true_map.confirmation_ = None
    true_map.doubt_ = None
    plain = _check(clear_case, None)
    assert plain["passed"] and plain["gain"] >= GAIN_MIN and "doubt" not in plain
    doubt = {"start": "vecmap start #2", "gain": round(plain["gain"], 4), "clear_gain": plain["gain"] + 0.01,
             "starts": 6}
    true_map.doubt_ = doubt
    with pytest.raises(CheckFailed, match=r"is in doubt \(it stands .* short of the .* none of the fit's other 5 "
                                          r"starts reached it; with 1,000 x 1,000 vectors, more rows per side"):
        _check(clear_case, None)
    forced = check_map(true_map, src, tgt, src.sample(1000, seed=0), tgt.sample(1000, seed=1), seed=0, force=True,
                       what="the unsupervised alignment (mini-vec2vec)", advice="give seed pairs")
    assert not forced["passed"] and forced["doubt"] == doubt and "short of the" in forced["reason"]
    true_map.doubt_ = {**doubt, "clear_gain": plain["gain"] - 0.01}   # its gain clears the bar, on the fit's rows:
    with pytest.raises(CheckFailed, match="is in doubt"):               # not enough
        _check(clear_case, None)

    def fresh():   # a fit that read 200 rows a side: the other 800 judge it
        return check_map(true_map, src, tgt, src.sample(200, seed=0), tgt.sample(200, seed=1), seed=0, force=False,
                         what="the unsupervised alignment (mini-vec2vec)", advice="give seed pairs")

    true_map.doubt_ = None
    unseen = fresh()
    assert unseen["passed"] and unseen["rows"] == "rows the fit did not read"
    true_map.doubt_ = {**doubt, "clear_gain": unseen["gain"] - 0.01}      # rows it did not read clear the bar
    assert fresh()["passed"]
    true_map.doubt_ = {**doubt, "clear_gain": unseen["gain"] + 0.01}
    with pytest.raises(CheckFailed, match="is in doubt"):
        fresh()
    true_map.doubt_ = None


def test_with_few_rows_a_clear_pass_counts_only_when_another_start_reproduces_it(planted, monkeypatch):
    """Fewer rows a side than ``confirm_below``: a clear first pass does not end the search; the next start that
    reproduces it does, and a clear pass that nothing reproduces is in doubt whatever its gain (``check_map`` then
    refuses it: no gain clears it)."""
    few = dict(FAST, n_restarts=2, restart_margin=1.5, confirm_below=len(planted[0]) + 1)
    _grey_judge(monkeypatch, [2 * GAIN_MIN, 2 * GAIN_MIN])
    est = MiniVec2Vec(random_state=0, **few).fit(*planted)
    assert len(est.restarts_) == 2 and est.restarts_[1]["confirmed_by"] == 0 and est.doubt_ is None
    _grey_judge(monkeypatch, [2 * GAIN_MIN, 0.3 * GAIN_MIN])
    est = MiniVec2Vec(random_state=0, **few).fit(*planted)
    assert len(est.restarts_) == 4 and est.confirmation_ is None
    assert est.doubt_["clear_gain"] is None and est.doubt_["rows"] == len(planted[0]) and est.doubt_["starts"] == 4


def test_check_map_refuses_a_map_in_doubt_for_few_rows_whatever_its_gain(clear_case):
    src, tgt, true_map = clear_case
    true_map.confirmation_ = None
    true_map.doubt_ = {"start": "centroids start #0", "gain": 0.09, "clear_gain": None, "starts": 4, "rows": 1000}
    try:
        with pytest.raises(CheckFailed, match="with so few rows a side a pass needs another start to reach the same "
                                              "map, and none of the fit's other 3 starts reached it"):
            _check(clear_case, None)
    finally:
        true_map.doubt_ = None


def test_check_map_refuses_the_polished_best_of_failed_starts_unless_unseen_rows_clear_it(clear_case):
    """No start passed during the search; the polish lifted the best one past the gain rule on the fit's own rows
    (a wrong map on 2,000 rows a side was accepted so)."""
    src, tgt, true_map = clear_case
    true_map.confirmation_ = None
    true_map.doubt_ = None
    plain = _check(clear_case, None)
    failed = {"start": "vecmap start #2", "gain": 0.043, "clear_gain": plain["gain"] - 0.01, "starts": 4,
              "rows": 1000, "passed": False}
    true_map.doubt_ = failed
    with pytest.raises(CheckFailed, match=r"is in doubt \(none of the fit's 4 starts passed, the best standing "
                                          r"\+0\.043 above refined random maps; polished, it stands .*, but on the "
                                          r"fit's own rows"):
        _check(clear_case, None)
    true_map.doubt_ = {**failed, "clear_gain": None}
    with pytest.raises(CheckFailed, match="with so few rows a side only a pass that another start reproduces counts"):
        _check(clear_case, None)

    def fresh():   # a fit that read 200 rows a side: the other 800 judge it
        return check_map(true_map, src, tgt, src.sample(200, seed=0), tgt.sample(200, seed=1), seed=0, force=False,
                         what="the unsupervised alignment (mini-vec2vec)", advice="give seed pairs")

    true_map.doubt_ = None
    unseen = fresh()["gain"]
    true_map.doubt_ = {**failed, "clear_gain": unseen - 0.01}
    assert fresh()["passed"]                                          # unseen rows clear the bar
    true_map.doubt_ = {**failed, "clear_gain": unseen + 0.01}
    with pytest.raises(CheckFailed, match=r"polished, it stands .*, short of the"):
        fresh()
    true_map.doubt_ = None


def test_a_passing_map_without_pairs_says_what_it_costs_and_warns_below_5000_rows_a_side(clear_case, monkeypatch):
    import vecbridge.pairing.learned as learned

    src, tgt, true_map = clear_case
    true_map.confirmation_ = true_map.doubt_ = None

    def judged(unpaired=True):
        return check_map(true_map, src, tgt, src.sample(1000, seed=0), tgt.sample(1000, seed=1), seed=0,
                         force=False, what="the unsupervised alignment (mini-vec2vec)", advice="give seed pairs",
                         unpaired=unpaired)

    few = judged()
    assert few["passed"] and "known id pairs (--pairs geh:FILE)" in few["note"]
    assert few["warning"].startswith("fitted on only 1,000 x 1,000 vectors: with fewer than 5,000 a side")
    monkeypatch.setattr(learned, "FEW_ROWS_WARNING", 1000)   # as many rows a side as the bar: the note alone
    enough = judged()
    assert enough["passed"] and enough["note"] and "warning" not in enough
    assert {"note", "warning"}.isdisjoint(judged(unpaired=False))   # seed-grown (GEH) maps have true pairs
