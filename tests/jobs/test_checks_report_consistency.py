"""One report, one pool, one story: options measured where the headline is, top-1 with its pool stated, clear
errors about queries, and no internal paper file names in what users read."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.cli import main
from vecbridge.errors import InputError
from vecbridge.jobs.report import THRESHOLDS, compatibility_report, verdict
from vecbridge.render.html import render_html

ORTHO = "orthogonal (one global Q)"


@pytest.fixture(scope="module")
def part_report(sample_stores):
    """800 of 1,500 items sampled: the headline is extrapolated from an 800-item pool to the whole collection."""
    return compatibility_report(sample_stores["old"], sample_stores["new"], queries_new=sample_stores["queries"],
                                queries_old=sample_stores["queries_old"], sample=800)


def test_options_are_measured_on_the_headline_pool(part_report):
    r = part_report
    ret, opt = r["retrieval"], r["options"]
    assert ret["full_size"] == 1500 and ret["pool_sizes"][-1] == 800
    assert opt["n_eval"] == 800 and opt["pool"] == 800 and opt["full_size"] == 1500
    ortho = next(o for o in opt["recommendation"]["options"] if o["name"] == ORTHO)
    # the plain map's option is the headline, measured and extrapolated alike
    assert ortho["retention_measured"] == pytest.approx(ret["measured"], abs=1e-9)
    assert ortho["retention"] == pytest.approx(ret["predicted"], abs=1e-9)
    full = next(o for o in opt["recommendation"]["options"] if o["name"] == "full re-embed")
    assert full["retention"] == 1.0


def test_no_recommendation_contradicts_a_no_go(part_report):
    r = part_report
    rec = r["options"]["recommendation"]
    if r["verdict"]["verdict"] != "NO-GO":
        pytest.skip("this sample does not give NO-GO")
    assert rec["choice"] != ORTHO
    excluded = {o["name"]: o["excluded"] for o in rec["options"] if o.get("excluded")}
    assert ORTHO in excluded
    stay = r["three_way"]["stay_on_old_model"]
    for o in rec["options"]:
        if o["name"] == rec["choice"]:
            assert not o.get("excluded")
    advice = " ".join(r["advice"])
    assert "NO-GO" in rec["reason"] and "NO-GO" in advice and "instead" in advice
    assert stay > r["three_way"]["mapped_upgrade"]


def test_recommend_never_picks_an_excluded_option():
    from vecbridge.quality.options import CostModel, Option, recommend

    opts = [Option("map", 0.97, 0.6, one_off_s_per_item=1e-5),
            Option("full re-embed", 1.0, 0.72, reembed_fraction=1.0, needs_texts=True)]
    r = recommend(opts, 0.95, CostModel(), exclude={"map": "worse than staying on the old model"})
    assert r["choice"] == "full re-embed"
    row = next(o for o in r["options"] if o["name"] == "map")
    assert row["excluded"] == "worse than staying on the old model"


def test_held_out_top1_states_its_pool_and_is_extrapolated(part_report):
    ho = part_report["held_out"]
    n_held = part_report["correspondences"]["held_out"]
    assert ho["pool"] == n_held == 200
    assert ho["full_size"] == 1500
    curve = ho["top1_curve"]
    assert curve["pool_sizes"][0] == n_held and curve["pool_sizes"][-1] == 800
    assert curve["top1"][0] == pytest.approx(ho["top1"])
    assert 0.0 <= ho["top1_predicted"] <= curve["top1"][-1] + 1e-12
    html = render_html(part_report)
    assert f"among {n_held:,} held-out items" in html and "1,500" in html


def test_top1_verdict_names_its_pool():
    rep = {"thresholds": dict(THRESHOLDS),
           "held_out": {"top1": 0.29, "pool": 800, "top1_predicted": 0.12, "full_size": 1_000_000}}
    v = verdict(rep)
    assert v["verdict"] == "NO-GO"
    assert "among 800 held-out items" in v["reason"] and "1,000,000" in v["reason"] and "12%" in v["reason"]


def test_queries_error_says_what_is_needed(tmp_path, sample_stores, sample):
    # query ids that name no item of either collection
    q = write_collection(f"file://{tmp_path}/q", [f"zz{i}" for i in range(500)], sample.queries_new)
    with pytest.raises(InputError) as exc:
        compatibility_report(sample_stores["old"], sample_stores["new"], queries_new=q.url, sample=800)
    msg = str(exc.value)
    assert "0 of the 500 queries" in msg
    assert "present in both collections" in msg and "relevant document" in msg


def test_user_text_names_no_internal_paper_files(part_report, sample_stores):
    html = render_html(part_report)
    text = " ".join(part_report["advice"]) + part_report["verdict"]["reason"] + html
    assert not re.search(r"seed 00\d|[Ii]ssue \d", text)
    assert "Procrustes bound" in html
    out = CliRunner().invoke(main, ["report", sample_stores["old"], sample_stores["new"], "--sample", "800",
                                    "--queries", sample_stores["queries"]])
    assert out.exit_code == 0, out.output
    assert not re.search(r"seed 00\d|[Ii]ssue \d", out.output)
    assert "among 200 held-out items" in out.output


def test_module_docstrings_name_papers_by_title():
    import vecbridge.jobs.fit as wf
    import vecbridge.jobs.report as rp
    import vecbridge.quality.options as op

    for mod in (wf, op, rp):
        with open(mod.__file__, encoding="utf-8") as fh:
            src = fh.read()
        assert not re.search(r"seed 00\d|[Ii]ssue \d", src), mod.__name__
