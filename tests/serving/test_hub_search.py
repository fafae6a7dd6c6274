"""The hub penalty as a serving option of `vecbridge search`: candidates of a wrapped (or native) collection pay
``weight * r(d)``, r(d) the mean cosine of the candidate's new-space vector to its 10 nearest logged queries."""
from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.quality.scoring import hub_penalty
from vecbridge.serving.rerank import HubPenalizedSearch
from vecbridge.serving.wrap import search_collections, wrap
from vecbridge.vectors import l2_normalize


def _setup(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old,
                           [{"text": it["doc"]} for it in sample.items])
    fit = np.arange(0, 1500, 2)      # half the items as pairs
    est = OrthogonalProcrustes().fit(sample.docs_old[fit], sample.docs_new[fit])
    align = Alignment.from_estimator(est).save(tmp_path / "a.vb")
    return old, align


def test_penalised_scores_are_the_exact_ones_over_the_candidates(tmp_path, sample):
    old, align = _setup(tmp_path, sample)
    log, Q = sample.queries_new[:250], sample.queries_new[250:300]
    a = Alignment.load(align)
    hub = HubPenalizedSearch(wrap(old, align), log, records=old, alignment=a, weight=0.5, k_candidates=40)
    ids, scores = hub.search(Q, k=10)
    cand, _ = wrap(old, align).search(Q, 40)
    for qi in range(len(Q)):
        got = old.get(cand[qi])
        M = a.transform(got.vectors)
        s = l2_normalize(M) @ l2_normalize(Q[qi:qi + 1])[0] - 0.5 * hub_penalty(M, log, 10)
        order = np.argsort(-s, kind="stable")[:10]
        assert ids[qi] == [got.ids[j] for j in order]
        np.testing.assert_allclose(scores[qi], s[order], atol=1e-5)


def test_the_penalty_lifts_recall_on_queries_the_log_did_not_hold(tmp_path, sample):
    old, align = _setup(tmp_path, sample)
    log, Q = sample.queries_new[:250], sample.queries_new[250:]
    relevant = [sample.ids[r] for r in sample.query_rows[250:]]

    def recall(results):
        return np.mean([rel in [r["id"] for r in rows] for rows, rel in zip(results, relevant)])

    plain = recall(search_collections([(old.url, str(align))], [], Q, 10))
    penalised = recall(search_collections([(old.url, str(align))], [], Q, 10, hub_log=log, hub_weight=0.5))
    assert penalised > plain, (plain, penalised)


def test_search_cli_takes_a_query_log(tmp_path, sample):
    old, align = _setup(tmp_path, sample)
    np.save(tmp_path / "q.npy", sample.queries_new[250:260])
    np.save(tmp_path / "log.npy", sample.queries_new[:250])
    np.save(tmp_path / "bad.npy", sample.queries_old[:250])
    run = CliRunner().invoke
    r = run(main, ["search", "--wrap", f"{old.url}={align}", "--vectors", str(tmp_path / "q.npy"), "--hub-log",
                   str(tmp_path / "log.npy"), "--json"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.output)) == 10 and len(json.loads(r.output)[0]) == 10
    r = run(main, ["search", "--wrap", f"{old.url}={align}", "--vectors", str(tmp_path / "q.npy"), "--hub-log",
                   str(tmp_path / "bad.npy")])
    assert r.exit_code == 3 and "new-model query vectors" in r.output
