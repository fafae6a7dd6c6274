"""A retention ratio over a near-zero native recall is reported as unreliable, never as a measurement."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge import metrics
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.jobs.drift import DriftConfig, History, run_check
from vecbridge.render.html import drift_history_html


def test_recall_retention_refuses_a_near_zero_denominator(sample):
    Q, D = sample.queries_new, sample.docs_new[1000:]
    good = metrics.recall_retention(Q, D, D, k=10)
    assert good["retention"] == 1.0 and good["unreliable"] is None
    # the "native" documents are noise: almost no query finds its own document among them
    noise = np.random.default_rng(0).normal(size=D.shape).astype(np.float32)
    bad = metrics.recall_retention(Q, D, noise, k=10)
    assert bad["recall_native"] < metrics.MIN_NATIVE_RECALL and bad["recall_mapped"] > 0.5
    assert bad["retention"] is None
    assert "unreliable" in bad["unreliable"] and f"{bad['recall_native']:.3f}" in bad["unreliable"]
    assert "too low to compare" in bad["unreliable"]
    # the shared helper gives every ratio in the tool the same floor
    assert metrics.retention_ratio(0.6, 0.003)[0] is None
    assert metrics.retention_ratio(0.6, 0.8)[0] == pytest.approx(0.75)
    assert metrics.retention_ratio(0.0, 0.0)[0] is None


@pytest.fixture
def broken_probe(tmp_path, sample):
    """The new collection's vectors of the probe documents are garbage (a broken re-ingestion), so the probe's
    queries hardly find them natively while the mapped old vectors still do: the ratio would read ~50x."""
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old)
    noise = np.random.default_rng(1).normal(size=(500, 768)).astype(np.float32)
    new = write_collection(f"file://{tmp_path}/new", sample.ids,
                           np.concatenate([sample.docs_new[:1000], noise]))
    probe = write_collection(f"file://{tmp_path}/probe", sample.ids[1000:], sample.queries_new)
    est = OrthogonalProcrustes().fit(sample.docs_old[:1000], sample.docs_new[:1000])
    Alignment.from_estimator(est).save(tmp_path / "align.vb")
    cfg = tmp_path / "check.toml"
    # only the probe can fire here: the other thresholds are out of reach
    cfg.write_text(f'[check]\nname = "broken"\nold = "{old.url}"\nnew = "{new.url}"\nalignment = "align.vb"\n'
                   f'sample = 300\n\n[probe]\nqueries = "{probe.url}"\nk = 10\n\n[thresholds]\n'
                   f'max_residual_ratio = 1e9\nmax_centroid_shift = 1e9\nmin_mmd_pvalue = 0.0\n')
    return cfg


def test_drift_reports_unreliable_retention_instead_of_a_ratio(broken_probe):
    r = run_check(DriftConfig.load(broken_probe), seed=0)
    m = r["measures"]
    assert m["retention"] is None and m["recall_native"] < metrics.MIN_NATIVE_RECALL
    assert "too low to compare" in m["retention_unreliable"]
    # not a silent pass: the run is flagged, and the reason says why
    assert r["breached"] and "unreliable" in r["reason"] and "native recall" in r["reason"]
    rows = History(DriftConfig.load(broken_probe).history).rows()
    assert rows[-1]["measures"]["retention"] is None
    assert "<svg" in drift_history_html("broken", rows)


def test_drift_cli_prints_unreliable_not_a_huge_ratio(broken_probe):
    r = CliRunner().invoke(main, ["drift", "run", str(broken_probe)])
    assert r.exit_code == 1, r.output
    assert "unreliable" in r.output and "native recall" in r.output and "Traceback" not in r.output
    assert "retention 5" not in r.output and "retention 4" not in r.output
    r = CliRunner().invoke(main, ["drift", "run", str(broken_probe), "--json"])
    out = json.loads(r.stdout)
    assert out["measures"]["retention"] is None and "too low" in out["measures"]["retention_unreliable"]
    h = CliRunner().invoke(main, ["drift", "history", str(broken_probe)])
    assert h.exit_code == 0 and "unreliable" in h.output, h.output


def test_report_retention_guard_in_the_report(tmp_path, sample):
    """The report's headline retention gets the same floor: unreliable, no verdict drawn from it."""
    from vecbridge.jobs.report import compatibility_report

    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old)
    new = write_collection(f"file://{tmp_path}/new", sample.ids, sample.docs_new)
    # queries that are pure noise: neither the native nor the mapped documents are found
    noise = np.random.default_rng(2).normal(size=(500, 768)).astype(np.float32)
    q = write_collection(f"file://{tmp_path}/q", sample.ids[1000:], noise)
    r = compatibility_report(old.url, new.url, queries_new=q.url, sample=1500)
    ret = r["retrieval"]
    assert ret["predicted"] is None and ret["measured"] is None and "too low to compare" in ret["unreliable"]
    assert r["verdict"]["verdict"] == "CAUTION" and "unreliable" in r["verdict"]["reason"]
    assert "options" not in r or "unavailable" in r["options"]
