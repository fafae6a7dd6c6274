"""Compatibility report: correspondence modes, numbers, verdicts, HTML (rendered in headless Chromium)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.cli import main
from vecbridge.errors import InputError
from vecbridge.jobs.report import THRESHOLDS, compatibility_report, verdict
from vecbridge.render.html import render_html

#: unsupervised and seed-grown correspondences are validated: a fit or a null distribution another test computed on
#: the same samples is taken from it (tests/conftest.py); the report itself runs every time
pytestmark = pytest.mark.usefixtures("reuse_deterministic_fits")


@pytest.fixture(scope="module")
def full_report(sample_stores):
    return compatibility_report(sample_stores["old"], sample_stores["new"], queries_new=sample_stores["queries"],
                                queries_old=sample_stores["queries_old"], sample=1500)


def test_report_uses_shared_ids_and_measures_held_out(full_report):
    r = full_report
    assert r["correspondences"]["mode"] == "shared-ids" and r["correspondences"]["n"] == 1500
    assert r["correspondences"]["held_out"] == 300
    assert r["held_out"]["top1"] > 0.95 and r["fit"]["residual"] < r["fit"]["bound"]
    assert len(r["fit"]["singular_values"]) == 384
    lc = r["learning_curve"]
    assert lc["n_anchors"] == sorted(lc["n_anchors"]) and lc["top1"][-1] > lc["top1"][0]
    ret = r["retrieval"]
    assert 0.6 < ret["predicted"] <= 1.0 and ret["full_size"] == 1500


def test_report_measures_the_options_and_recommends_one(full_report):
    opt = full_report["options"]
    rec = opt["recommendation"]
    names = [o["name"] for o in rec["options"]]
    assert "orthogonal (one global Q)" in names and "full re-embed" in names and rec["choice"] in names
    curve = opt["reembed_curve"]["retention"]
    assert set(curve) >= {"random", "anchor_residual"} and len(curve["random"]) == 4
    assert all(0 < r <= 1.2 for ys in curve.values() for r in ys)
    chosen = next(o for o in rec["options"] if o["name"] == rec["choice"])
    if rec["meets_target"]:   # the cheapest of those meeting the target
        assert all(o["total_s"] >= chosen["total_s"] for o in rec["options"] if o["retention"] >= opt["target"])
    assert any(a.startswith("recommended option") for a in full_report["advice"])


def test_three_way_comparison_drives_the_verdict(full_report):
    t = full_report["three_way"]
    assert t["full_re_embed"] > t["mapped_upgrade"]
    if t["mapped_upgrade"] < t["stay_on_old_model"]:
        assert full_report["verdict"]["verdict"] == "NO-GO"
        assert "worse than staying on the old model" in full_report["verdict"]["reason"]


def test_verdict_thresholds():
    base = {"thresholds": dict(THRESHOLDS), "held_out": {"top1": 0.99}, "retrieval": {"predicted": 0.95, "k": 10}}
    assert verdict(base)["verdict"] == "GO"
    assert verdict({**base, "retrieval": {"predicted": 0.8, "k": 10}})["verdict"] == "CAUTION"
    assert verdict({**base, "retrieval": {"predicted": 0.6, "k": 10}})["verdict"] == "NO-GO"
    assert verdict({**base, "held_out": {"top1": 0.3}})["verdict"] == "NO-GO"
    worse = {**base, "three_way": {"mapped_upgrade": 0.63, "stay_on_old_model": 0.68, "full_re_embed": 0.75}}
    v = verdict(worse)
    assert v["verdict"] == "NO-GO" and "0.630 vs 0.680" in v["reason"]
    # a retired old model cannot be stayed on: the question becomes mapped-now vs re-embed-first
    v = verdict({**worse, "old_model_retired": True})
    assert v["verdict"] == "CAUTION" and "retired" in v["reason"] and "vecbridge upgrade" in v["reason"]
    no_q = {"thresholds": dict(THRESHOLDS), "held_out": {"top1": 0.99}}
    assert verdict(no_q)["verdict"] == "CAUTION"


def test_report_without_queries_gives_neighbourhood_overlap(sample_stores):
    r = compatibility_report(sample_stores["old"], sample_stores["new"], sample=800)
    assert 0.2 < r["neighbourhood_overlap"]["overlap"] < 1.0
    assert r["verdict"]["verdict"] == "CAUTION" and "--queries" in r["verdict"]["reason"]


def test_report_by_payload_key_and_by_re_embedding(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", [f"o{i}" for i in range(1500)], sample.docs_old,
                           [{"url": f"u{i}", "text": it["doc"]} for i, it in enumerate(sample.items)])
    new = write_collection(f"file://{tmp_path}/new", [f"n{i}" for i in range(1500)], sample.docs_new,
                           [{"url": f"u{i}"} for i in range(1500)])
    with pytest.raises(InputError, match="no correspondences"):
        compatibility_report(old.url, new.url, sample=500, unsupervised=False)
    by_key = compatibility_report(old.url, new.url, key="url", sample=1000)
    assert by_key["correspondences"]["mode"] == "payload-key" and by_key["held_out"]["top1"] > 0.9
    by_model = compatibility_report(old.url, None, model="tests.embedders:mpnet_lookup", text_field="text",
                                    sample=1000)
    assert by_model["correspondences"]["mode"] == "re-embedded-sample"
    assert by_model["held_out"]["top1"] > 0.9


def test_report_grows_seed_pairs_with_geh(tmp_path, sample):
    """No shared ids, 20 known pairs: GEH's links are the correspondences, and they are mostly the true ones."""
    old = write_collection(f"file://{tmp_path}/old", [f"o{i}" for i in range(1500)], sample.docs_old)
    new = write_collection(f"file://{tmp_path}/new", [f"n{i}" for i in range(500, 1500)], sample.docs_new[500:])
    chosen = np.random.default_rng(0).choice(np.arange(500, 1500), 20, replace=False)
    seeds = tmp_path / "seeds.csv"
    seeds.write_text("source_id,target_id\n" + "".join(f"o{i},n{i}\n" for i in chosen))
    r = compatibility_report(old.url, new.url, seeds=str(seeds), sample=1500, unsupervised=False)
    c = r["correspondences"]
    assert c["mode"] == "geh" and "20 seed pairs" in c["reason"] and 700 <= c["n"] < 1500
    assert r["held_out"]["top1"] > 0.9          # held-out GEH links are mapped onto their own partners
    # the map judged is the one a fit saves: the training links refined over both sides (less the held-out links'
    # records, which measure it), not the links' own map
    assert c["refinement"]["kept"] and c["refinement"]["links"] == c["train"]
    assert c["train"] <= c["refinement"]["pairs"] <= 1000 - c["held_out"]
    assert any("links GEH grew" in a for a in r["advice"])   # its top-1 is the confident records'
    assert c["n"] < c["sampled"] == 1500 and any(f"of the {c['sampled']:,} sampled" in a for a in r["advice"])


def test_report_judges_a_file_of_pairs(tmp_path, sample):
    """``--pairs file:PATH`` (e.g. what ``vecbridge link`` wrote): every listed pair is a correspondence."""
    old = write_collection(f"file://{tmp_path}/old", [f"o{i}" for i in range(1500)], sample.docs_old)
    new = write_collection(f"file://{tmp_path}/new", [f"n{i}" for i in range(1500)], sample.docs_new)
    listed = tmp_path / "pairs.csv"
    listed.write_text("source_id,target_id\n" + "".join(f"o{i},n{i}\n" for i in range(0, 1500, 2)))
    r = compatibility_report(old.url, new.url, pairs=f"file:{listed}", sample=1500)
    c = r["correspondences"]
    assert c["mode"] == "pairs-file" and c["n"] == 750 and r["held_out"]["top1"] > 0.95
    assert "refinement" not in c


FAST_UNSUPERVISED = dict(n_runs=5, qap_restarts=10, n_neighbors=10, refine1_iter=2, refine1_tol=0, refine1_neighbors=1,
                         refine2_clusters=50, n_restarts=1, init="centroids", polish_iter=0)   # test_minivec2vec.FAST


def test_report_falls_back_to_unsupervised_and_never_says_go(tmp_path, sample):
    """Nothing shared: NEW is OLD's real vectors under a hidden isometry into 768-d with other ids. The report says
    it used pseudo-pairs, measures Recall@10 of new-space queries over the mapped vectors (here it must come near
    the old model's own Recall@10, the map being recoverable; a fast fit) and stays at CAUTION."""
    rng = np.random.default_rng(3)
    Q = np.linalg.qr(rng.standard_normal((768, 768)))[0][:384]
    perm = rng.permutation(1500)   # written out of order; the same collections as test_link_cli's unsupervised link
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old)
    new = write_collection(f"file://{tmp_path}/new", [f"h{i}" for i in perm],
                           (sample.docs_old[perm] @ Q).astype(np.float32))
    queries = write_collection(f"file://{tmp_path}/q", sample.ids[1000:], sample.queries_old @ Q)
    queries_old = write_collection(f"file://{tmp_path}/qo", sample.ids[1000:], sample.queries_old)
    with pytest.warns(UserWarning, match="without labels"):   # said before minutes of work, never silently
        r = compatibility_report(old.url, new.url, queries_new=queries.url, queries_old=queries_old.url, sample=1500,
                                 unsupervised_params=FAST_UNSUPERVISED)
    c = r["correspondences"]
    assert c["mode"] == "unsupervised" and c["pseudo"] and c["mutual_fraction"] > 0.6
    t, ru = r["three_way"], r["retrieval_unsupervised"]
    assert t["full_re_embed"] is None and abs(t["mapped_upgrade"] - t["stay_on_old_model"]) < 0.06
    # every query of the sample (not only the held-out pairs') over the whole sample, under the map a fit saves
    assert ru["recall_mapped"] == t["mapped_upgrade"] and ru["pool"] == t["pool"] == 1500 and ru["n_queries"] == 500
    assert ru["full_size"] == 1500 and ru["predicted"] == pytest.approx(ru["recall_mapped"], abs=1e-9)
    assert r["verdict"]["verdict"] in ("CAUTION", "NO-GO") and "GO" != r["verdict"]["verdict"]
    if r["verdict"]["verdict"] == "CAUTION":
        assert "pseudo-pairs" in r["verdict"]["reason"]
    html = render_html(r)
    assert "unsupervised" in html and "not measurable without true pairs" in html


def test_cli_report_json_html_and_gate(tmp_path, sample_stores):
    html = tmp_path / "report.html"
    r = CliRunner().invoke(main, ["report", sample_stores["old"], sample_stores["new"], "--queries",
                                  sample_stores["queries"], "--old-queries", sample_stores["queries_old"],
                                  "--sample", "1500", "--html", str(html), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["verdict"]["verdict"] in ("GO", "CAUTION", "NO-GO")
    text = html.read_text()
    assert "<svg" in text and rep["verdict"]["verdict"] in text and "http" not in text.replace("http://www.w3.org", "")
    ho = rep["held_out"]   # the top-1 predicted at the collection's size, with the margin its sample leaves
    assert ho["full_size"] > ho["pool"] and f"{ho['top1_predicted']:.3f} ± {ho['top1_margin']:.3f}" in text
    if rep["verdict"]["verdict"] == "NO-GO":
        gated = CliRunner().invoke(main, ["report", sample_stores["old"], sample_stores["new"], "--queries",
                                          sample_stores["queries"], "--old-queries", sample_stores["queries_old"],
                                          "--sample", "1500", "--fail-on", "no-go"])
        assert gated.exit_code == 1 and "verdict NO-GO" in gated.output


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def test_html_report_renders_in_headless_chromium(tmp_path, full_report):
    browser = _chromium()
    if browser is None:
        if os.environ.get("VECBRIDGE_REQUIRE_ENGINES"):
            pytest.fail("chromium is required in CI (apt-get install chromium)")
        pytest.skip("chromium not installed")
    page = tmp_path / "report.html"
    page.write_text(render_html(full_report))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert f">{full_report['verdict']['verdict']}</div>" in dom.stdout
    assert dom.stdout.count("<svg") == 4 and "<path" in dom.stdout     # anchors, cosines, spectrum, re-embed
    assert "Recommended:" in dom.stdout
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1100,1600", page.as_uri()],
                   capture_output=True, timeout=120)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000   # a rendered page, not a blank one


def test_report_speaks_the_pairs_grammar_and_judges_the_chosen_method(sample_stores):
    """``--pairs`` picks the correspondences (no fallback), ``--method`` the map whose quality is measured."""
    plain = compatibility_report(sample_stores["old"], sample_stores["new"], pairs="ids", sample=1200,
                                 queries_new=sample_stores["queries"], options=False)
    assert plain["method"] == "orthogonal" and plain["correspondences"]["mode"] == "shared-ids"
    clustered = compatibility_report(sample_stores["old"], sample_stores["new"], pairs="ids", sample=1200,
                                     method="clustered", queries_new=sample_stores["queries"], options=False)
    assert clustered["method"] == "clustered"
    assert clustered["held_out"]["residual"] != plain["held_out"]["residual"]   # another map was measured
    assert clustered["fit"] == plain["fit"]   # the Procrustes diagnostics stay those of one rotation
    with pytest.raises(InputError, match="payload field 'nope'"):
        compatibility_report(sample_stores["old"], sample_stores["new"], pairs="field:nope", sample=500)
    with pytest.raises(InputError, match="cannot be used here"):
        compatibility_report(sample_stores["old"], sample_stores["new"], pairs="reference:x.txt", sample=500)
    with pytest.raises(InputError, match="pairs file not found"):
        compatibility_report(sample_stores["old"], sample_stores["new"], pairs="file:x.csv", sample=500)
