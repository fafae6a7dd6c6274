"""Continuous refit: the pairs an upgrade re-embeds are added up as they land, the map is refitted on them, judged on
held-out re-embedded records, and replaces the map in use when better: every record still mapped is mapped again
by it and stamped with its fingerprint."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.align.artifact import Alignment
from vecbridge.cli import main
from vecbridge.errors import InputError
from vecbridge.jobs import upgrade as upgrade_job
from vecbridge.jobs.upgrade import Upgrade
from vecbridge.runtime import refit as refit_module
from vecbridge.runtime.record_stamps import shuffle_rank
from vecbridge.runtime.refit import HOLDOUT_EVERY, RefitPairs, remap

MODEL = "tests.embedders:mpnet_lookup"
FIT = 100   # a start's sample far too small for 384 -> 768 dimensions: the re-embedded pairs improve on it


@pytest.fixture
def started(tmp_path, sample, monkeypatch):
    monkeypatch.setattr(refit_module, "MIN_HELD", 20)   # judged after a few hundred re-embedded records
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old,
                           [{"text": it["doc"]} for it in sample.items])
    state = tmp_path / "up.upgrade.sqlite"
    upgrade_job.start(old.url, model=MODEL, text_field="text", state_path=state, to=f"file://{tmp_path}/new",
                      fit_sample=FIT)
    return state


def test_pairs_are_held_out_by_id_and_kept_across_runs_exactly(tmp_path, sample):
    path = tmp_path / "p.npz"
    pairs = RefitPairs(path, 384, 768).seed(sample.docs_old[:100], sample.docs_new[:100])
    assert pairs.n == 100 and pairs.tried_at == 100 and not pairs.due()
    ids = sample.ids[100:700]
    pairs.add(ids, sample.docs_old[100:700], sample.docs_new[100:700])
    held = [i for i in ids if shuffle_rank(i) % HOLDOUT_EVERY == 0]
    assert len(pairs.held_old) == len(held) and pairs.n == 700
    rows = [sample.ids.index(i) for i in held]
    np.testing.assert_array_equal(pairs.held_new, sample.docs_new[rows])
    pairs.save()
    again = RefitPairs(path, 384, 768)
    assert again.n == 700 and again.tried_at == 100
    np.testing.assert_array_equal(again.moments.xty, pairs.moments.xty)
    np.testing.assert_array_equal(again.held_old, pairs.held_old)
    path.write_bytes(b"not an npz")
    with pytest.raises(InputError, match="damaged"):
        RefitPairs(path, 384, 768)


def test_a_refit_on_the_same_pairs_is_not_better_and_is_refused(tmp_path, sample):
    X, Y = sample.docs_old, sample.docs_new
    pairs = RefitPairs(tmp_path / "p.npz", 384, 768).seed(X[:1000], Y[:1000])
    pairs.add(sample.ids[1000:], X[1000:], Y[1000:])
    from vecbridge.align import OrthogonalProcrustes

    every = Alignment.from_estimator(OrthogonalProcrustes().fit(X, Y))   # already fitted on all of them
    new, verdict = pairs.refit(every)
    assert new is None and not verdict["accepted"] and verdict["gain"] < refit_module.MIN_GAIN
    start = Alignment.from_estimator(OrthogonalProcrustes().fit(X[:100], Y[:100]))
    new, verdict = pairs.refit(start)
    assert new is not None and verdict["accepted"] and verdict["gain"] > 0.05, verdict
    assert new.metadata["fit"]["n_pairs"] == 1500 and not len(pairs.held_old), "held-out pairs join the accepted fit"


def test_reembed_refits_the_map_and_maps_every_mapped_record_again(started, sample):
    with Upgrade.open(started) as up:
        first = up.alignment
        r = up.reembed(limit=300)
        assert r["refits"] and r["refits"][0]["accepted"], r["refits"]
        latest = [v for v in r["refits"] if v["accepted"]][-1]
        assert latest["cosine_after"] > latest["cosine_before"] + refit_module.MIN_GAIN
        now = up.alignment
        assert now.fingerprint != first.fingerprint
        assert up.meta["alignment"].endswith(".vb") and up.meta.get("remapping") is None
        assert [m["fingerprint"] for m in up.meta["maps"]][0] == first.fingerprint
        assert up.meta["maps"][-1]["fingerprint"] == now.fingerprint and up.status()["maps"] == up.meta["maps"]
        stamps = up.records.of(sample.ids)
        mapped = sorted(i for i, s in stamps.items() if s["origin"] == "mapped")
        assert len(mapped) == 1500 - FIT - 300
        assert {stamps[i]["made_by"] for i in mapped} == {now.fingerprint}, "every mapped record: the new map's"
        got = up.target.get(mapped)
        rows = [sample.ids.index(i) for i in got.ids]
        np.testing.assert_allclose(got.vectors, now.map_records(sample.docs_old[rows]), atol=1e-6)
        assert all(stamps[i].get("digest") for i in mapped), "the other stamp fields are kept"
        before = up.refit_pairs().n
    with Upgrade.open(started) as up:   # the next run continues with the pairs kept beside the state
        assert up.refit_pairs().n == before
        r = up.reembed(limit=100, refit=False)
        assert r["refits"] == [] and up.refit_pairs().n == before


def test_an_interrupted_remap_is_finished_by_the_next_run(started, sample, monkeypatch):
    from vecbridge.jobs.upgrade import scheduler

    def interrupted(source, target, alignment, **kw):
        remap(source, target, alignment, batch_size=200)   # a first part...
        raise KeyboardInterrupt   # ... then the run is stopped

    with Upgrade.open(started) as up:
        monkeypatch.setattr(scheduler, "remap", interrupted)
        with pytest.raises(KeyboardInterrupt):
            up.reembed(limit=300)
        assert up.state.meta["remapping"], "the state says a remap is under way"
    monkeypatch.setattr(scheduler, "remap", remap)
    with Upgrade.open(started) as up:
        pending = Alignment.load(up.meta["remapping"])
        up.reembed(limit=1)
        assert up.meta.get("remapping") is None and up.alignment.fingerprint == pending.fingerprint
        stamps = up.records.of(sample.ids)
        assert {s["made_by"] for s in stamps.values() if s["origin"] == "mapped"} == {pending.fingerprint}


def test_cli_reembed_prints_the_refit(started):
    r = CliRunner().invoke(main, ["upgrade", "reembed", "--state", str(started), "--limit", "300"])
    assert r.exit_code == 0, r.output
    assert "map refitted on" in r.output and "mapped again" in r.output
    r = CliRunner().invoke(main, ["upgrade", "reembed", "--state", str(started), "--limit", "50", "--json",
                                  "--no-refit"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["refits"] == []


def _started_pairs(path, sample, seed=400, upto=1100):
    """Pairs seeded with the ``seed`` pairs the map in use was fitted on, then re-embedded ones up to ``upto``."""
    import warnings

    from vecbridge.align import OrthogonalProcrustes

    X, Y = sample.docs_old, sample.docs_new
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = Alignment.from_estimator(OrthogonalProcrustes().fit(X[:seed], Y[:seed]))
    pairs = RefitPairs(path, 384, 768).seed(X[:seed], Y[:seed])
    pairs.add(sample.ids[seed:upto], X[seed:upto], Y[seed:upto])
    return pairs, start


def test_the_map_installed_is_judged_with_the_held_out_pairs_it_joins(tmp_path, sample, monkeypatch):
    probe, start = _started_pairs(tmp_path / "probe.npz", sample)
    _, measured = probe.refit(start)
    pairs, start = _started_pairs(tmp_path / "p.npz", sample)
    n_current, n_judged, n_all = 400, pairs.n - len(pairs.held_old), pairs.n   # the sums: all but the held out
    assert pairs.fitted_at == n_current and n_current < n_judged < n_all
    factor = (1 / n_current - 1 / n_all) / (1 / n_current - 1 / n_judged)
    # the candidate judged has not seen the held-out pairs; the map installed is fitted on them too: a bar between
    # the two gains is met by the map installed
    monkeypatch.setattr(refit_module, "MIN_GAIN", measured["gain"] * (1 + factor) / 2)
    new, verdict = pairs.refit(start)
    assert verdict["gain"] == pytest.approx(measured["gain"]) and verdict["gain"] < refit_module.MIN_GAIN
    assert verdict["installed_gain"] == pytest.approx(verdict["gain"] * factor) and verdict["accepted"], verdict
    assert new is not None and new.metadata["fit"]["n_pairs"] == n_all == pairs.fitted_at
    pairs.save()
    assert RefitPairs(tmp_path / "p.npz", 384, 768).fitted_at == n_all, "kept across runs"


def test_a_map_in_use_not_fitted_on_the_pairs_is_judged_by_its_measured_gain(tmp_path, sample):
    from vecbridge.align import OrthogonalProcrustes

    pairs, _ = _started_pairs(tmp_path / "p.npz", sample)
    other = Alignment.from_estimator(OrthogonalProcrustes().fit(sample.docs_old[1000:], sample.docs_new[1000:]))
    _, verdict = pairs.refit(other)   # fitted on 500 pairs the sums never held: no learning curve to extrapolate on
    assert verdict["installed_gain"] == verdict["gain"]
    assert refit_module.installed_gain(0.004, 0, 900, 1000) == 0.004
    assert refit_module.installed_gain(0.004, 1000, 900, 1000) == 0.004
    pairs.save()
    with np.load(tmp_path / "p.npz") as f:   # a file an older release saved, without the count: no extrapolation
        np.savez(tmp_path / "old.npz", **{k: f[k] for k in f.files if k != "fitted_at"})
    assert RefitPairs(tmp_path / "old.npz", 384, 768).fitted_at == 0
