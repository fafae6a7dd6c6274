"""`upgrade plan` predicts Recall@10 at the collection's size, not only within its re-embedded pool."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.cli import main
from vecbridge.quality.at_size import JEFFREYS, beta_prior, cascade_hit_probability, hit_probability, recall_at_size
from vecbridge.serving.weights import FUSION_BETAS


def test_a_top_ranked_record_can_still_miss_in_a_huge_collection():
    """No distractor of 2,000 above it says p < ~1/2,000, not p = 0: among a billion records it misses."""
    assert hit_probability([0], 2000, 10**9)[0] < 0.01
    assert hit_probability([0], 2000, 10**9, prior=JEFFREYS)[0] < 1


def test_at_the_pool_size_the_prediction_is_the_pool_recall():
    rng = np.random.default_rng(0)
    above = rng.geometric(0.1, 300) - 1                              # counts among 2,000 distractors
    pool_recall = float(np.mean(above <= 9))
    assert recall_at_size(above, 2000, 2001) == pool_recall           # every record of the collection was seen
    assert abs(recall_at_size(above, 2000, 2001, prior=JEFFREYS) - pool_recall) < 1e-12


def test_the_prediction_falls_as_the_collection_grows():
    above = np.random.default_rng(1).geometric(0.2, 300) - 1
    sizes = [2001, 5000, 10**4, 10**5, 10**6, 10**8]
    levels = [recall_at_size(above, 2000, n) for n in sizes]
    assert all(a >= b for a, b in zip(levels, levels[1:])) and levels[0] > levels[-1]


def test_the_prior_is_fitted_on_the_counts_and_jeffreys_when_unidentified():
    """Most queries have p near 0: the fitted Beta puts less weight on large p than Jeffreys (a < 1/2)."""
    rng = np.random.default_rng(2)
    above = rng.binomial(2000, rng.beta(0.1, 3.0, 500))
    a, b = beta_prior(above, 2000)
    assert 0.05 < a < 0.2 and 1.5 < b < 6
    assert beta_prior([0, 0, 0], 2000) == JEFFREYS


def test_where_the_gradient_search_stops_early_the_prior_is_still_fitted():
    """Counts most of which are 0 (a strong ranking) can stop the bounded gradient search early; the prior is then the
    simplex search's maximum likelihood, not Jeffreys, which put too much weight on large p and predicted low."""
    rng = np.random.default_rng(3)
    p = rng.beta(0.05, 50, 500)                       # each query's true share of outranking records
    above = rng.binomial(2000, p)                     # 86% of them 0 among 2,000 distractors
    prior = beta_prior(above, 2000)
    assert prior != JEFFREYS and abs(prior[0] - 0.05) < 0.02, prior
    # Recall@10 among 10,000 records: the fitted prior's prediction is close to what the true shares give
    truth = float(np.mean([np.mean(rng.binomial(8000, q, 200) + a <= 9) for q, a in zip(p, above)]))
    assert abs(recall_at_size(above, 2000, 10_000) - truth) < 0.01
    assert recall_at_size(above, 2000, 10_000, prior=JEFFREYS) < truth - 0.03


def test_plan_json_carries_the_figures_at_the_collections_size(tmp_path, sample, monkeypatch):
    from vecbridge.jobs.upgrade import planning
    from vecbridge.serving.weights import RERANK_TIE

    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old,
                           [{"text": it["doc"]} for it in sample.items])
    q_ids = [sample.ids[r] for r in sample.query_rows[:200]]
    qn = write_collection(f"file://{tmp_path}/qn", q_ids, sample.queries_new[:200])
    qo = write_collection(f"file://{tmp_path}/qo", q_ids, sample.queries_old[:200])
    r = CliRunner().invoke(main, ["upgrade", "plan", old.url, "--to-model", "tests.embedders:mpnet_lookup",
                                  "--queries", qn.url, "--old-queries", qo.url, "--pool", "400",
                                  "--fit-sample", "500", "--json"])
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)["predicted"]
    assert p["collection_size"] == 1500 and 0 < p["staying_at_size"] <= p["staying"]
    for st in p["stages"]:
        assert 0 < st["recall_at_size"] <= st["recall"] and 0 < st["recall_fused_at_size"] <= st["recall_fused"]
    assert p["stages"][-1]["recall_at_size"] > p["stages"][0]["recall_at_size"]
    for st in p["stages"]:   # the cascade: both models' own vectors of the served top 100, at the collection's size
        assert 0 < st["recall_cascade_at_size"] <= 1 and st["cascade_beta"] in (0.0, "inf", *FUSION_BETAS)
    assert p["stages"][0]["recall_cascade_at_size"] > p["stages"][0]["recall_fused_at_size"]
    shown = CliRunner().invoke(main, ["upgrade", "plan", old.url, "--to-model", "tests.embedders:mpnet_lookup",
                                      "--queries", qn.url, "--old-queries", qo.url, "--pool", "400",
                                      "--fit-sample", "500"])
    assert shown.exit_code == 0 and "cascade," in shown.output and "--rerank" in shown.output, shown.output
    assert f"{p['stages'][0]['recall_cascade_at_size']:.3f}" in shown.output
    wider = CliRunner().invoke(main, ["upgrade", "plan", old.url, "--to-model", "tests.embedders:mpnet_lookup",
                                      "--queries", qn.url, "--old-queries", qo.url, "--pool", "400",
                                      "--fit-sample", "500", "--rerank", "300", "--json"])
    w = json.loads(wider.stdout)["predicted"]
    assert w["rerank"] == 300 and all(a["recall_cascade_at_size"] >= b["recall_cascade_at_size"] - 1e-9
                                      for a, b in zip(w["stages"], p["stages"])), "more candidates, never fewer hits"
    args = ["upgrade", "plan", old.url, "--to-model", "tests.embedders:mpnet_lookup", "--queries", qn.url,
            "--old-queries", qo.url, "--pool", "400", "--fit-sample", "500", "--json", "--rerank"]
    few = json.loads(CliRunner().invoke(main, args + ["10"]).stdout)["predicted"]
    monkeypatch.setattr(planning, "RERANK_LADDER", (10, 100))   # auto: the count `upgrade tune --rerank auto` keeps
    a = json.loads(CliRunner().invoke(main, args + ["auto"]).stdout)["predicted"]
    for st, at10, at100 in zip(a["stages"], few["stages"], p["stages"]):
        larger = at100["recall_cascade_at_size"] > at10["recall_cascade_at_size"] + RERANK_TIE
        assert st["cascade_rerank"] == (100 if larger else 10)
        assert st["recall_cascade_at_size"] == (at100 if larger else at10)["recall_cascade_at_size"]
    assert a["rerank"] == "auto" and 100 in {st["cascade_rerank"] for st in a["stages"]}
    shown = CliRunner().invoke(main, args[:-2] + ["--rerank", "auto"])
    assert shown.exit_code == 0 and "(top" in shown.output, shown.output   # each stage's count beside its cascade


def test_the_cascade_hits_where_both_its_stages_do():
    """The record must be among the served top K and in the re-score's top k: the smaller of the two."""
    rng = np.random.default_rng(0)
    served, rescored = rng.integers(0, 40, 300), rng.integers(0, 40, 300)
    both = cascade_hit_probability({"above": served}, {"above": rescored}, 1000, 20_000, rerank=100, k=10)
    np.testing.assert_allclose(both, np.minimum(hit_probability(served, 1000, 20_000, 100),
                                                hit_probability(rescored, 1000, 20_000, 10)))
    always = cascade_hit_probability({"above": np.zeros(300)}, {"above": rescored}, 1000, 20_000, rerank=100, k=10)
    assert np.all(always >= both) and np.all(both <= hit_probability(served, 1000, 20_000, 100))
