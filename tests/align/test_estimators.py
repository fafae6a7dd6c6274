"""The estimator protocol (vecbridge.numeric.estimator): parameters from the signature, set_params and its flat
names for GEH's option groups, clone, the repr, validation before any work, and the CLI's use of it."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest

from vecbridge.align import ClusteredProcrustes, LinearMap, MiniVec2Vec, NoMap, OrthogonalProcrustes, clone
from vecbridge.errors import InputError
from vecbridge.linking.geh import GEH, GEHSearch, GEHStopping, GEHViews, GEHVotes
from vecbridge.numeric.estimator import Estimator, UnknownParameter

ESTIMATORS = [OrthogonalProcrustes, ClusteredProcrustes, LinearMap, NoMap, MiniVec2Vec, GEH]
PACKAGE = Path(__file__).resolve().parents[2] / "vecbridge"


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_params_come_from_the_signature_and_every_one_is_constrained(cls):
    est = cls()
    assert isinstance(est, Estimator)
    params = est.get_params()
    assert list(params) == list(cls._signature())
    deep = est.get_params(deep=True)
    assert set(deep) == set(cls._parameter_constraints), "declare a constraint for every parameter (and no other)"
    est._validate_params()                                   # the defaults are valid
    assert clone(est).get_params(deep=True).keys() == deep.keys()
    assert repr(est) == f"{cls.__name__}()"                  # only non-default parameters are shown


@pytest.mark.parametrize("cls, changes", [
    (OrthogonalProcrustes, dict(center=True)),
    (ClusteredProcrustes, dict(n_clusters=4, assignment="hard")),
    (LinearMap, dict(alpha=0.5)),
    (MiniVec2Vec, dict(n_runs=5, backend="numpy")),
    (GEH, dict(k_csls=20, shortlist=None, refine=None)),
])
def test_set_params_clone_and_repr(cls, changes):
    est = cls().set_params(**changes)
    for key, value in changes.items():
        assert est.get_params(deep=True)[key] == value
    twin = clone(est)
    assert twin is not est and twin.get_params(deep=True) == est.get_params(deep=True)
    text = repr(est)
    assert all(k in text for k in changes) and text.startswith(f"{cls.__name__}(")


def test_unknown_names_are_refused_with_the_valid_ones_and_no_cli_wording():
    with pytest.raises(UnknownParameter) as info:
        OrthogonalProcrustes().set_params(centre=True)
    msg = str(info.value)
    assert msg == "unknown parameter centre for OrthogonalProcrustes; valid: center, scale"
    assert isinstance(info.value, InputError) and info.value.unknown == ["centre"]
    with pytest.raises(UnknownParameter, match="valid: .*shortlist.*vote_decay"):
        GEH().set_params(shortlst=32)
    with pytest.raises(UnknownParameter, match="unknown parameter bogus for NoMap; valid: $"):
        NoMap().set_params(bogus=1)


def test_library_messages_never_quote_cli_flags():
    for folder in ("align", "linking"):
        for path in (PACKAGE / folder).glob("*.py"):
            assert "--param" not in path.read_text(), path


def test_clone_is_unfitted_and_independent():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 8))
    est = OrthogonalProcrustes(center=True).fit(X, X)
    twin = clone(est)
    assert hasattr(est, "matrix_") and not hasattr(twin, "matrix_")
    gen = np.random.default_rng(5)
    geh = GEH(random_state=gen)
    copy = clone(geh)
    assert copy.random_state is not gen and copy.random_state.random() == gen.random()   # same state, own object
    with pytest.raises(InputError, match="expects an estimator"):
        clone(object())


@pytest.mark.parametrize("cls, bad, match", [
    (OrthogonalProcrustes, dict(center="yes"), "center must be True or False, got 'yes'"),
    (LinearMap, dict(alpha=-1), r"alpha must be a number >= 0, got -1"),
    (ClusteredProcrustes, dict(assignment="fuzzy"), "assignment must be one of 'soft', 'hard', got 'fuzzy'"),
    (ClusteredProcrustes, dict(n_clusters=2.5), "n_clusters must be an integer >= 1, got 2.5"),
    (MiniVec2Vec, dict(alpha=0), r"alpha must be a number in \(0, 1\], got 0"),
    (MiniVec2Vec, dict(max_samples=0), "max_samples must be None or an integer >= 1"),
    (MiniVec2Vec, dict(kmeans_sample=10), "kmeans_sample=10 is too small for n_clusters=20"),
    (GEH, dict(refine="typo"), "refine must be one of None, 'procrustes', got 'typo'"),
    (GEH, dict(views="fps"), "views must be a GEHViews, got 'fps'"),
    (GEH, dict(random_state=-1), "random_state must be None, an integer >= 0 or a numpy Generator"),
])
def test_bad_values_fail_at_the_start_of_fit_in_one_line(cls, bad, match):
    """Validation runs before the inputs are even looked at: garbage data still gives the parameter's error."""
    est = cls().set_params(**bad)
    args = ("not", "arrays", "at all")[:3 if cls is GEH else 2]
    t0 = time.perf_counter()
    with pytest.raises(InputError, match=match) as info:
        est.fit(*args)
    assert time.perf_counter() - t0 < 1.0 and "\n" not in str(info.value)
    assert str(info.value).startswith(f"{cls.__name__}: ")


def test_paired_fitting_methods_validate_too():
    X = np.ones((10, 3))
    for call in (lambda e: e.partial_fit(X, X), lambda e: e.fit_stream(iter([(X, X)]))):
        with pytest.raises(InputError, match="scale must be True or False"):
            call(OrthogonalProcrustes(scale=1))
    with pytest.raises(InputError, match="assignment"):
        ClusteredProcrustes(assignment="x").partial_fit(X, X)


def test_geh_groups_and_their_flat_names():
    """Fewer constructor parameters; every option of a group is also settable by its own (unique) name."""
    assert len(GEH._signature()) <= 12
    groups = (GEHViews, GEHVotes, GEHStopping, GEHSearch)
    names = [f.name for g in groups for f in dataclasses.fields(g)]
    assert len(names) == len(set(names)) and not set(names) & set(GEH._signature())
    for g in groups:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(g(), dataclasses.fields(g)[0].name, 1)
    est = GEH().set_params(shortlist=32, coverage=2.0, t_min=4)
    assert est.search == GEHSearch(shortlist=32, coverage=2.0) and est.stopping == GEHStopping(t_min=4)
    assert GEH().search == GEHSearch()                      # the default group instance is not mutated
    # a whole group and a field of it in one call: the group first, then the field
    est = GEH().set_params(votes=GEHVotes(min_votes=1.0), vote_decay=1.0)
    assert est.votes == GEHVotes(min_votes=1.0, vote_decay=1.0)
    # get_params(deep=True) round-trips through set_params
    again = GEH().set_params(**est.get_params(deep=True))
    assert again.get_params(deep=True) == est.get_params(deep=True)
    assert repr(est) == "GEH(votes=GEHVotes(min_votes=1.0, vote_decay=1.0))"


def test_fit_returns_self_and_fitted_state_ends_in_underscore():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 6))
    Y = X @ np.linalg.qr(rng.normal(size=(6, 6)))[0]
    for est in (OrthogonalProcrustes(), LinearMap(alpha=0.1), NoMap(), ClusteredProcrustes(n_clusters=2)):
        before = set(vars(est))
        assert est.fit(X, Y) is est
        new = {k for k in set(vars(est)) - before if not k.startswith("_")}
        assert new and all(k.endswith("_") for k in new), new


def test_cli_flat_keys_go_through_set_params():
    """``--param KEY=VALUE`` reaches the estimators through pairing.learned._estimator: flat GEH keys keep working,
    and an unknown key or a bad value fails before any data is read."""
    from vecbridge.pairing.learned import _estimator

    est = _estimator(GEH, {"shortlist": 32, "refine": None, "vote_decay": 1.0}, seed=4)
    assert est.search.shortlist == 32 and est.refine is None and est.votes.vote_decay == 1.0
    assert est.random_state == 4
    assert _estimator(MiniVec2Vec, {"n_runs": 5, "random_state": 9}, seed=4).get_params()["random_state"] == 9
    with pytest.raises(InputError, match="GEH has no parameter bogus"):
        _estimator(GEH, {"bogus": 1}, seed=0)
    with pytest.raises(InputError, match="refine must be one of"):
        _estimator(GEH, {"refine": "typo"}, seed=0)
