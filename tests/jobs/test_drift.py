"""Drift checks with real drift injected into real vectors, and quiet on a stable system."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import SHARED_WORDNET, write_collection
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.connectors import VectorBatch
from vecbridge.errors import InputError
from vecbridge.jobs.drift import DriftConfig, History, centroid_shift, mmd_test, parse_every, run_check


@pytest.fixture
def system(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old)
    new = write_collection(f"file://{tmp_path}/new", sample.ids, sample.docs_new)
    probe = write_collection(f"file://{tmp_path}/probe", sample.ids[1000:], sample.queries_new)
    est = OrthogonalProcrustes().fit(sample.docs_old[:1000], sample.docs_new[:1000])
    Alignment.from_estimator(est).save(tmp_path / "align.vb")
    cfg = tmp_path / "check.toml"
    cfg.write_text(f'[check]\nname = "wordnet"\nold = "{old.url}"\nnew = "{new.url}"\nalignment = "align.vb"\n'
                   f'sample = 400\n\n[probe]\nqueries = "{probe.url}"\nk = 10\n')
    return {"cfg": cfg, "old": old, "new": new, "tmp": tmp_path, "est": est}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_stable_system_stays_quiet_over_repeated_runs(system):
    results = [run_check(DriftConfig.load(system["cfg"])) for _ in range(4)]
    assert not any(r["breached"] for r in results), [r["reason"] for r in results]
    assert results[0]["measures"]["reference_saved"]
    for r in results[1:]:
        m = r["measures"]
        assert m["residual_ratio"] < 1.4 and m["retention"] > 0.85 and m["centroid_shift"] < 2 and m["mmd_pvalue"] > 0.1
    assert len(History(DriftConfig.load(system["cfg"]).history).rows()) == 4


def test_a_perturbed_alignment_fires(system, sample):
    run_check(DriftConfig.load(system["cfg"]))
    rng = np.random.default_rng(0)
    # someone deploys a slightly wrong artifact: the right map composed with a small random rotation
    G = np.linalg.qr(np.eye(768) + 0.15 * rng.normal(size=(768, 768)))[0]
    bad = OrthogonalProcrustes().fit(sample.docs_old[:1000], sample.docs_new[:1000] @ G)
    Alignment.from_estimator(bad).save(system["tmp"] / "align.vb")
    r = run("drift", "run", system["cfg"])
    assert r.exit_code == 1
    assert "alignment residual is" in r.output and "Traceback" not in r.output


def test_un_migrated_vectors_written_into_the_new_collection_fire(system, sample):
    run_check(DriftConfig.load(system["cfg"]))
    # a pipeline bug: 300 items written with their old-model vectors, zero-padded to the new dimension
    system["new"].upsert(VectorBatch(sample.ids[:300], np.pad(sample.docs_old[:300], ((0, 0), (0, 384)))))
    r = run_check(DriftConfig.load(system["cfg"]))
    assert r["breached"]
    assert r["measures"]["residual_ratio"] > 1.5 and r["measures"]["mmd_pvalue"] < 0.05


@pytest.mark.skipif(not SHARED_WORDNET.is_dir(), reason="../shared/data/wordnet not present")
def test_a_silent_model_swap_in_ingestion_fires(tmp_path):
    """NEW is all-MiniLM-L6-v2; a third of its items get re-ingested with paraphrase-MiniLM-L3-v2 (same dim)."""
    X = np.load(SHARED_WORDNET / "mpnet_docs.npy")[:3000].astype(np.float32)
    Y = np.load(SHARED_WORDNET / "minilm6_docs.npy")[:3000].astype(np.float32)
    Z = np.load(SHARED_WORDNET / "minilm3_docs.npy")[:3000].astype(np.float32)
    ids = [f"w{i}" for i in range(3000)]
    old = write_collection(f"file://{tmp_path}/old", ids, X)
    new = write_collection(f"file://{tmp_path}/new", ids, Y)
    Alignment.from_estimator(OrthogonalProcrustes().fit(X[:2000], Y[:2000])).save(tmp_path / "a.vb")
    (tmp_path / "c.toml").write_text(f'[check]\nold = "{old.url}"\nnew = "{new.url}"\nalignment = "a.vb"\n'
                                     f'sample = 600\n')
    assert not run_check(DriftConfig.load(tmp_path / "c.toml"))["breached"]
    assert not run_check(DriftConfig.load(tmp_path / "c.toml"))["breached"]
    new.upsert(VectorBatch(ids[:1000], Z[:1000]))
    r = run_check(DriftConfig.load(tmp_path / "c.toml"))
    assert r["breached"], r["measures"]


def test_history_watch_and_plot(system):
    r = run("drift", "watch", system["cfg"], "--every", "0.05s", "--max-runs", 2)
    assert r.exit_code == 0, r.output
    plot = system["tmp"] / "history.html"
    r = run("drift", "history", system["cfg"], "--plot", plot, "--json")
    rows = json.loads(r.stdout)
    assert len(rows) == 2 and not any(x["breached"] for x in rows)
    assert plot.read_text().count("<svg") >= 3


def test_statistics_and_config_errors(tmp_path, sample):
    rng = np.random.default_rng(0)
    A = rng.normal(size=(300, 16))
    assert centroid_shift(A[:150], A[150:]) < 3
    assert centroid_shift(A, A + 0.5) > 5   # shift 2.0, noise 0.33
    assert mmd_test(A[:150], A[150:], seed=1)[1] > 0.05
    assert mmd_test(A, rng.normal(size=(300, 16)) * 2.0, seed=1)[1] < 0.05
    assert parse_every("90s") == 90 and parse_every("1h") == 3600
    with pytest.raises(InputError):
        parse_every("soon")
    (tmp_path / "bad.toml").write_text("[check]\nold = 'x'\n")
    with pytest.raises(InputError, match="needs new, alignment"):
        DriftConfig.load(tmp_path / "bad.toml")
    (tmp_path / "worse.toml").write_text("[check\n")
    r = run("drift", "run", tmp_path / "worse.toml")
    assert r.exit_code == 3 and "invalid TOML" in r.output
