"""Result dataclasses: typed sections for Python callers, dict-style access for code written against the dicts, and
``as_dict()`` giving the JSON the plain dicts gave (absent sections absent, not null)."""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from vecbridge.cli import main
from vecbridge.jobs.evaluate import evaluate_alignment
from vecbridge.jobs.report import compatibility_report, verdict
from vecbridge.render.console import json_default as _json_default
from vecbridge.render.html import render_html
from vecbridge.results import (
    Check,
    CorrespondenceSummary,
    Evaluation,
    EvaluationRetrieval,
    HeldOutQuality,
    JobResult,
    LearningCurve,
    OptionRow,
    PairScores,
    QualityOptions,
    Recommendation,
    Report,
    ReportRetrieval,
    ThreeWay,
    Verdict,
    VerifyResult,
    omit_if_none,
)

REPORT_KEYS = ["old", "new", "method", "old_info", "new_info", "correspondences", "held_out", "fit", "thresholds",
               "learning_curve", "retrieval", "three_way", "verdict", "options", "advice"]


@dataclass
class _Sample(JobResult):
    a: int
    b: int | None                                   # None is a value: printed as null
    c: list | None = omit_if_none()                 # None means absent
    d: int = 0


def test_omitted_fields_behave_as_absent_keys():
    s = _Sample(1, None)
    assert s.as_dict() == {"a": 1, "b": None, "d": 0} and list(s) == s.keys() == ["a", "b", "d"]
    assert "c" not in s and "b" in s and "zz" not in s
    with pytest.raises(KeyError):
        s["c"]
    assert s.get("c", "dflt") == "dflt" and s.get("b", "dflt") is None and s["a"] == 1
    s["c"] = [1]                                    # present once set, in its declared place
    assert s.as_dict() == {"a": 1, "b": None, "c": [1], "d": 0} and s["c"] == [1] and dict(s.items())["c"] == [1]
    with pytest.raises(KeyError):
        s["zz"] = 1
    assert {**s}["c"] == [1]                        # a mapping: keys() and [] suffice for ** and dict()


def test_earlier_results_keep_their_dicts():
    v = VerifyResult(ok=True, source="s", target="t", checks=[Check("count", True, "1 = 1")])
    assert v.as_dict() == dataclasses.asdict(v)
    assert v["checks"][0]["name"] == "count"


def test_retrieval_has_the_unreliable_key_only_when_retention_was_not_measured():
    base = dict(pool_sizes=[250.0, 500.0], retention=[0.9, 0.88], recall_mapped=[0.6, 0.5], recall_native=[0.66, 0.57],
                full_size=1500, pool=500, k=10, n_queries=80)
    ok = ReportRetrieval(**base, measured=0.88, predicted=0.86)
    assert "unreliable" not in ok and "unreliable" not in ok.as_dict() and ok.get("unreliable") is None
    assert list(ok.as_dict()) == ["pool_sizes", "retention", "recall_mapped", "recall_native", "full_size", "pool",
                                  "measured", "predicted", "k", "n_queries"]
    bad = ReportRetrieval(**base, measured=None, predicted=None, unreliable="unreliable: native recall too low")
    assert list(bad.as_dict())[6:9] == ["measured", "predicted", "unreliable"]
    # no pool size gave a point and no reason was found: the old dict still had "unreliable": None
    empty = ReportRetrieval(**{**base, "pool_sizes": [], "retention": [], "recall_mapped": [], "recall_native": []},
                            measured=None, predicted=None)
    assert "unreliable" in empty and empty.as_dict()["unreliable"] is None


def test_verdict_is_typed_and_still_reads_plain_dicts():
    v = verdict({"thresholds": {"go_top1": 0.95, "go_retention": 0.9, "no_go_top1": 0.5, "no_go_retention": 0.7,
                                "worse_than_staying": 0.0},
                 "held_out": {"top1": 0.99}, "retrieval": {"predicted": 0.95, "k": 10}})
    assert isinstance(v, Verdict) and v.verdict == v["verdict"] == "GO" and v.as_dict() == {"verdict": "GO",
                                                                                            "reason": v.reason}


@pytest.fixture(scope="module")
def rep(sample_stores):
    return compatibility_report(sample_stores["old"], sample_stores["new"], queries_new=sample_stores["queries"],
                                queries_old=sample_stores["queries_old"], sample=800)


def test_report_sections_are_typed_and_read_by_key_too(rep):
    assert isinstance(rep, Report)
    assert isinstance(rep.correspondences, CorrespondenceSummary) and isinstance(rep.held_out, HeldOutQuality)
    assert isinstance(rep.held_out, PairScores) and isinstance(rep.learning_curve, LearningCurve)
    assert isinstance(rep.retrieval, ReportRetrieval) and isinstance(rep.three_way, ThreeWay)
    assert isinstance(rep.verdict, Verdict) and isinstance(rep.options, QualityOptions)
    assert isinstance(rep.options.recommendation, Recommendation)
    assert all(isinstance(o, OptionRow) for o in rep.options.recommendation.options)
    assert isinstance(rep.old_info, dict)
    # nested dict-style access, as code written against the dicts reads it
    assert rep["verdict"]["verdict"] == rep.verdict.verdict
    assert rep["held_out"]["top1_curve"]["pool_sizes"] == rep.held_out.top1_curve.pool_sizes
    assert rep["options"]["recommendation"]["options"][0]["name"] == rep.options.recommendation.options[0].name
    assert rep["options"]["rerank"]["20"]["retention"] == rep.options.rerank["20"].retention
    # sections this run has no inputs for are absent, as the keys were
    assert rep.retrieval_unsupervised is None and "retrieval_unsupervised" not in rep
    assert "neighbourhood_overlap" not in rep and rep.get("neighbourhood_overlap") is None
    with pytest.raises(KeyError):
        rep["neighbourhood_overlap"]
    assert "mutual_fraction" not in rep.correspondences and "retention" in rep.learning_curve


def test_report_as_dict_is_the_json_shape(rep):
    d = rep.as_dict()
    assert list(d) == REPORT_KEYS
    assert list(d["correspondences"]) == ["mode", "reason", "n", "train", "held_out", "pseudo"]
    assert list(d["held_out"]) == ["n", "top1", "mean_rank", "mean_cosine", "pool", "residual", "cosine_histogram",
                                   "top1_curve", "top1_predicted", "full_size", "top1_margin"]
    assert list(d["learning_curve"]) == ["n_anchors", "top1", "pool", "retention"]
    rec = d["options"]["recommendation"]
    assert list(rec)[:4] == ["choice", "meets_target", "retention", "target"]
    assert ("shortfall" in rec) == (not rec["meets_target"])
    assert all(set(o) >= {"name", "retention", "total_s", "extra_storage_bytes"} for o in rec["options"])

    def no_results(x):   # only plain JSON types left
        if isinstance(x, dict):
            return all(isinstance(k, str) and no_results(v) for k, v in x.items())
        if isinstance(x, (list, tuple)):
            return all(no_results(v) for v in x)
        return not isinstance(x, JobResult)

    assert no_results(d)
    text = json.dumps(d, default=_json_default)
    back = Report.from_dict(json.loads(text))           # a --json output read back
    assert json.dumps(back.as_dict(), default=_json_default) == text
    assert back.verdict == rep.verdict and back.options.recommendation.choice == rep.options.recommendation.choice


def test_html_reads_the_report_or_its_dict_alike(rep):
    def strip_ids(html):   # chart element ids are numbered per process
        return re.sub(r"vb\d+-", "vb-", html)

    assert strip_ids(render_html(rep)) == strip_ids(render_html(rep.as_dict()))


def test_report_without_queries_leaves_the_query_sections_out(sample_stores):
    r = compatibility_report(sample_stores["old"], sample_stores["new"], sample=600)
    d = r.as_dict()
    assert "neighbourhood_overlap" in d and not {"retrieval", "three_way", "options", "retrieval_unsupervised"} & set(d)
    assert "retention" not in d["learning_curve"] and "retention" not in r.learning_curve
    assert r.neighbourhood_overlap.overlap == r["neighbourhood_overlap"]["overlap"]


def test_evaluation_is_typed_and_prints_the_same_keys(tmp_path, sample_stores):
    out = tmp_path / "a.vb"
    assert CliRunner().invoke(main, ["fit", "--source", sample_stores["old"], "--target", sample_stores["new"],
                                     "--holdout", "0.3", "-o", str(out)]).exit_code == 0
    ev = evaluate_alignment(str(out), sample_stores["old"], sample_stores["new"], queries=sample_stores["queries"])
    assert isinstance(ev, Evaluation) and isinstance(ev.pairs, PairScores)
    assert isinstance(ev.retrieval, EvaluationRetrieval)
    assert ev["pairs"]["top1"] == ev.pairs.top1 and ev["retrieval"]["k"] == 10
    assert ev.no_map is None and "no_map" not in ev          # 384-d vs 768-d: no do-nothing baseline
    assert "passed" not in ev and list(ev.as_dict()) == ["n_pairs", "held_out", "metric", "pairs", "retrieval"]
    assert list(ev.as_dict()["retrieval"]) == ["recall_mapped", "recall_native", "retention", "unreliable",
                                               "overlap", "k", "n_queries"]
    r = CliRunner().invoke(main, ["evaluate", "--alignment", str(out), "--source", sample_stores["old"], "--target",
                                  sample_stores["new"], "--json"])
    assert r.exit_code == 0, r.output
    printed = json.loads(r.stdout)
    assert list(printed) == ["n_pairs", "held_out", "metric", "pairs", "passed"] and printed["passed"] is True
