"""The CLI end to end on real bundled vectors: outputs, --json, exit codes, one-line errors."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.cli import main


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result


def assert_one_line_error(result, code, match):
    assert result.exit_code == code, result.output
    err = result.stderr if hasattr(result, "stderr") else result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error:") and match in " ".join(lines), err


def test_fit_then_evaluate_on_held_out_pairs(tmp_path, sample_stores):
    out = tmp_path / "align.vb"
    r = run("fit", "--source", sample_stores["old"], "--target", sample_stores["new"], "--holdout", 0.3,
            "--source-model", "all-MiniLM-L6-v2", "--target-model", "all-mpnet-base-v2", "-o", out, "--json")
    assert r.exit_code == 0, r.output
    fit = json.loads(r.stdout)
    assert fit["kind"] == "orthogonal" and (fit["source_dim"], fit["target_dim"]) == (384, 768)
    assert 900 < fit["fit"]["n_pairs"] < 1200 and fit["anchors"]["method"] == "shared-ids"
    r = run("evaluate", "--alignment", out, "--source", sample_stores["old"], "--target", sample_stores["new"],
            "--queries", sample_stores["queries"], "--json")
    assert r.exit_code == 0, r.output
    ev = json.loads(r.stdout)
    assert ev["held_out"] and ev["n_pairs"] == 1500 - fit["fit"]["n_pairs"]
    assert ev["pairs"]["top1"] > 0.95
    assert 0.6 < ev["retrieval"]["retention"] <= 1.05
    assert ev["passed"]


def test_evaluate_threshold_failure_exits_1(tmp_path, sample_stores):
    out = tmp_path / "a.vb"
    assert run("fit", "--source", sample_stores["old"], "--target", sample_stores["new"], "-o", out).exit_code == 0
    r = run("evaluate", "--alignment", out, "--source", sample_stores["old"], "--target", sample_stores["new"],
            "--queries", sample_stores["queries"], "--min-retention", 0.999)
    assert_one_line_error(r, 1, "retention@10")


def test_fit_from_a_pairs_file_and_human_output(tmp_path, sample, sample_stores):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("source_id,target_id\n" + "".join(f"{i},{i}\n" for i in sample.ids[:600]))
    r = run("fit", "--source", sample_stores["old"], "--target", sample_stores["new"], "--pairs", pairs,
            "-o", tmp_path / "p.vb")
    assert r.exit_code == 0, r.output
    assert "from 600 pairs" in r.stdout and "Procrustes bound" in r.stdout


def test_info_on_collection_and_alignment(tmp_path, sample_stores):
    r = run("info", sample_stores["old"], "--json")
    assert json.loads(r.stdout)["dim"] == 384 and json.loads(r.stdout)["count"] == 1500
    out = tmp_path / "a.vb"
    run("fit", "--source", sample_stores["old"], "--target", sample_stores["new"], "-o", out)
    assert json.loads(run("info", out, "--json").stdout)["kind"] == "orthogonal"


def test_missing_collection_exits_4(tmp_path, sample_stores):
    r = run("fit", "--source", sample_stores["old"], "--target", f"file://{tmp_path}/nope", "-o", tmp_path / "a.vb")
    assert_one_line_error(r, 4, "collection not found")
    assert not (tmp_path / "a.vb").exists()


def test_empty_collection_and_no_shared_ids_exit_3(tmp_path, sample_stores):
    from vecbridge.connectors import connect

    connect(f"file://{tmp_path}/empty").create(dim=768)
    r = run("fit", "--source", sample_stores["old"], "--target", f"file://{tmp_path}/empty", "-o", tmp_path / "a.vb")
    assert_one_line_error(r, 3, "empty")
    write_collection(f"file://{tmp_path}/other", ["x", "y"], np.ones((2, 768)))
    r = run("fit", "--source", sample_stores["old"], "--target", f"file://{tmp_path}/other", "-o", tmp_path / "a.vb")
    assert_one_line_error(r, 3, "no shared ids")


def test_nan_vectors_in_a_store_exit_3(tmp_path, sample, sample_stores):
    bad = sample.docs_old[:50].copy()
    bad[7, 3] = np.nan
    (tmp_path / "plain").mkdir()
    np.save(tmp_path / "plain" / "vectors.npy", bad)
    (tmp_path / "plain" / "ids.json").write_text(json.dumps(sample.ids[:50]))
    r = run("fit", "--source", f"file://{tmp_path}/plain", "--target", sample_stores["new"], "-o", tmp_path / "a.vb")
    assert_one_line_error(r, 3, "NaN")


def test_bad_artifact_exits_5(tmp_path, sample_stores):
    (tmp_path / "bad.vb").write_bytes(b"not an alignment at all")
    r = run("evaluate", "--alignment", tmp_path / "bad.vb", "--source", sample_stores["old"], "--target",
            sample_stores["new"])
    assert_one_line_error(r, 5, "truncated or corrupt")


def test_bad_pairs_spec_and_unknown_scheme(tmp_path, sample_stores):
    r = run("fit", "--source", sample_stores["old"], "--target", sample_stores["new"], "--pairs", "bogus",
            "-o", tmp_path / "a.vb")
    assert_one_line_error(r, 3, "unknown pairing")
    r = run("info", "nosuchstore://x/y")
    assert_one_line_error(r, 2, "unknown store scheme")   # a usage error, as the README says


def test_missing_client_library_names_the_extra(monkeypatch):
    from vecbridge import connectors

    monkeypatch.setitem(connectors.REGISTRY, "fakestore", ("tests.connector_without_client:X", "fakestore"))
    r = run("info", "fakestore://127.0.0.1:1/coll")
    assert_one_line_error(r, 4, 'pip install "vecbridge[fakestore]"')


def test_demo_runs_the_main_job(tmp_path):
    r = run("demo", "--workdir", tmp_path / "demo", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    rec = d["recall_at_10"]
    assert rec["full_re_embed"] > rec["new_queries_migrated"] > 10 * rec["new_queries_no_map"]
    assert rec["new_queries_wrapped"] == rec["new_queries_migrated"] and d["wrapped_equals_migrated"]
    assert d["migration"]["written"] == 1500 and d["migration"]["verified"]
    assert 0.75 < d["recall_retention_at_10"] < 1.0
    stages = d["upgrade_stages"]   # the staged upgrade: never below staying with fused queries, ends re-embedded
    assert [st["native_fraction"] for st in stages] == sorted(st["native_fraction"] for st in stages)
    assert all(st["recall_fused"] >= rec["stay_on_old_model"] for st in stages)
    assert stages[-1]["native_fraction"] == 1.0 and stages[-1]["recall_new_queries"] == rec["full_re_embed"]
    human = run("demo", "--workdir", tmp_path / "demo")
    assert human.exit_code == 0 and "recall retention@10" in human.stdout and "stage by stage" in human.stdout


def test_console_script_is_installed():
    out = subprocess.run([sys.executable, "-m", "vecbridge.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "vecbridge" in out.stdout
