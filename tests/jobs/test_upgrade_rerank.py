"""The cascade: an upgrade's search re-scores its top K candidates with the new model's vectors of their texts, and
writes back what it embeds as native vectors, stamped in the same upsert (query-driven re-embedding)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from tests.embedders import mpnet_lookup
from vecbridge.cli import main
from vecbridge.jobs import upgrade as upgrade_job
from vecbridge.jobs.upgrade import Upgrade
from vecbridge.vectors import l2_normalize

MODEL = "tests.embedders:mpnet_lookup"
FIT, K = 100, 40
#: the records: the sample's last 900 (its 500 queries ask for the last 500, query j for record 1000 + j)
LO = 600
N = 1500 - LO


@pytest.fixture
def started(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", sample.ids[LO:], sample.docs_old[LO:],
                           [{"text": it["doc"]} for it in sample.items[LO:]])
    state = tmp_path / "up.sqlite"
    upgrade_job.start(old.url, model=MODEL, text_field="text", state_path=state, to=f"file://{tmp_path}/new",
                      fit_sample=FIT)
    return state


def test_candidates_are_re_scored_natively_and_written_back(started, sample):
    q = sample.queries_new
    ids_all = sample.ids[LO:]
    with Upgrade.open(started) as up:
        plain, _ = up.search_vectors(q[:30], 10)
        served, _ = up.search_vectors(q[:30], K)
        native_before = {i for i, s in up.records.of(ids_all).items() if s["origin"] == "native"}
        ids, scores = up.search_vectors(q[:30], 10, rerank=K)
        assert [r[:10] for r in plain] == [r[:10] for r in served]
        by_text = {it["doc"]: v for it, v in zip(sample.items, sample.docs_new)}
        docs = {i: by_text[it["doc"]] for i, it in zip(ids_all, sample.items[LO:])}
        for qi, cand in enumerate(served):
            cos = l2_normalize(np.stack([docs[i] for i in cand])) @ l2_normalize(q[qi:qi + 1])[0]
            want = [cand[j] for j in np.argsort(-cos, kind="stable")[:10]]
            assert ids[qi] == want, "the top K re-ranked by the new model's own vectors"
            np.testing.assert_allclose(scores[qi], np.sort(cos)[::-1][:10], atol=1e-5)
        retrieved = {i for row in served for i in row}
        stamps = up.records.of(retrieved)
        assert {s["origin"] for s in stamps.values()} == {"native"}, "every candidate embedded is now native"
        assert up.written_back == len(retrieved - native_before)
        got = up.target.get(sorted(retrieved - native_before))
        np.testing.assert_allclose(l2_normalize(got.vectors),
                                   l2_normalize(mpnet_lookup([p["text"] for p in got.payloads])), atol=1e-6)
        assert all(s.get("digest") and s["made_by"] == MODEL for s in stamps.values())
        native_now = {i for i, s in up.records.of(ids_all).items() if s["origin"] == "native"}
        again, _ = up.search_vectors(q[:30], K)   # (the written-back vectors moved some candidates in or out)
        before = up.written_back
        up.search_vectors(q[:30], 10, rerank=K)
        assert up.written_back - before == len({i for row in again for i in row} - native_now), \
            "native candidates are not embedded again"
        native_now = {i for i, s in up.records.of(ids_all).items() if s["origin"] == "native"}
        r = up.reembed()
    assert r["reembedded"] == N - len(native_now), "reembed skips what the cascade wrote back"
    assert r["counts"] == {"mapped": 0, "native": N, "pending": 0, "no-text": 0}


def test_the_cascade_retrieves_better_than_the_mapped_search(started, sample):
    q = sample.queries_new
    with Upgrade.open(started) as up:
        plain, _ = up.search_vectors(q, 10)
        cascade, _ = up.search_vectors(q, 10, rerank=K)

    def recall(rows):   # query j asks for record 1000 + j
        return float(np.mean([sample.ids[1000 + j] in row for j, row in enumerate(rows)]))
    before, after = recall(plain), recall(cascade)
    assert after >= before + 0.02, (before, after)


def test_upgrade_search_rerank_on_the_command_line(started, sample):
    r = CliRunner().invoke(main, ["upgrade", "search", "--state", str(started), sample.items[1005]["doc"], "-k",
                                  "3", "--rerank", "20", "--json"])
    assert r.exit_code == 0, r.output
    hits = json.loads(r.output)[0]
    assert hits[0]["id"] == sample.ids[1005]
    with Upgrade.open(started) as up:
        assert up.records.of([hits[0]["id"]])[hits[0]["id"]]["origin"] == "native"
    r = CliRunner().invoke(main, ["upgrade", "search", "--state", str(started), "x", "--rerank", "-1"])
    assert r.exit_code == 2


def test_with_old_model_queries_the_cascade_fuses_both_models_own_vectors(started, sample):
    from vecbridge.jobs.upgrade.serving import CASCADE_BETA

    q_new, q_old = sample.queries_new[:20], sample.queries_old[:20]
    by_text_new = {it["doc"]: v for it, v in zip(sample.items, sample.docs_new)}
    by_id_old = dict(zip(sample.ids, sample.docs_old))
    with Upgrade.open(started) as up:
        served, _ = up.search_vectors(q_new, K, old_queries=q_old)
        texts = {p_id: p["text"] for b in up.source.scan(500) for p_id, p in zip(b.ids, b.payloads)}
        ids, scores = up.search_vectors(q_new, 10, old_queries=q_old, rerank=K)
    for qi, cand in enumerate(served):
        cn = l2_normalize(np.stack([by_text_new[texts[i]] for i in cand])) @ l2_normalize(q_new[qi:qi + 1])[0]
        co = l2_normalize(np.stack([by_id_old[i] for i in cand])) @ l2_normalize(q_old[qi:qi + 1])[0]
        fused = (cn + CASCADE_BETA * co) / (1 + CASCADE_BETA)
        assert ids[qi] == [cand[j] for j in np.argsort(-fused, kind="stable")[:10]]
        np.testing.assert_allclose(scores[qi], np.sort(fused)[::-1][:10], atol=1e-5)


def test_tune_rerank_picks_the_cascade_weight_and_search_uses_it(started, sample, tmp_path):
    qn = write_collection(f"file://{tmp_path}/qn", sample.ids[1000:1100], sample.queries_new[:100])
    qo = write_collection(f"file://{tmp_path}/qo", sample.ids[1000:1100], sample.queries_old[:100])
    first = CliRunner().invoke(main, ["upgrade", "tune", "--state", str(started), "--queries", qn.url,
                                      "--old-queries", qo.url])   # the fusion's weights: the tuning's ranking
    assert first.exit_code == 0, first.output
    with Upgrade.open(started) as up:   # its top 20, the candidates the cascade's tuning re-scores
        served, _ = up.search_vectors(sample.queries_new[:100], 80, old_queries=sample.queries_old[:100],
                                      k_candidates=100)
    held = {n: np.mean([rel in row[:n] for rel, row in zip(sample.ids[1000:1100], served)]) for n in (20, 40, 80)}
    r = CliRunner().invoke(main, ["upgrade", "tune", "--state", str(started), "--queries", qn.url, "--old-queries",
                                  qo.url, "--rerank", "20", "--json"])
    assert r.exit_code == 0, r.output
    c = json.loads(r.output)["cascade"]
    assert c["rerank"] == 20 and c["recall"] == max(c["recall_by_beta"].values()) and c["written_back"] > 0
    assert c["candidates_hold_relevant"] == pytest.approx(held[20]) and c["recall"] <= held[20] < 1
    assert c["larger_k_would_hold"] == pytest.approx({"40": held[40], "80": held[80]})
    assert held[20] <= held[40] <= held[80] and held[80] > held[20], "a larger K would hold more here"
    with Upgrade.open(started) as up:
        assert up.status()["cascade_beta"] == (c["cascade_beta"] if c["cascade_beta"] != "old model alone" else "inf")
        chosen = up._cascade_beta()
        assert chosen == (np.inf if c["cascade_beta"] == "old model alone" else c["cascade_beta"])
    shown = CliRunner().invoke(main, ["upgrade", "tune", "--state", str(started), "--queries", qn.url,
                                      "--old-queries", qo.url, "--rerank", "20"])
    assert shown.exit_code == 0 and "candidates held the relevant record for" in shown.output, shown.output
    assert "(the top 40: " in shown.output and ", the top 80: " in shown.output, shown.output
    status = CliRunner().invoke(main, ["upgrade", "status", "--state", str(started)])
    assert status.exit_code == 0 and "cascade (top 20, every search unless --rerank 0): old-model weight" in status.output, status.output


def test_the_cascade_pays_the_hub_penalty_it_was_given(started, sample):
    q = sample.queries_new[:40]
    by_text = {it["doc"]: v for it, v in zip(sample.items, sample.docs_new)}
    with Upgrade.open(started) as up:
        up.search_vectors(q, 10, rerank=K)          # writes the candidates back native, each hub score stamped
        served, _ = up.search_vectors(q, K)         # (which moved some candidates in or out)
        plain, _ = up.search_vectors(q, 10, rerank=K)
        up.meta = up.state.update(cascade_hub_weight=1.0)
        assert up.status()["cascade_hub_weight"] == 1.0
        ids, scores = up.search_vectors(q, 10, rerank=K)
        got = up.target.get(list({i for row in served for i in row}))
        stamps, texts = dict(zip(got.ids, got.stamps)), {i: p["text"] for i, p in zip(got.ids, got.payloads)}
    assert all(s["origin"] == "native" and s.get("hubness") for s in stamps.values())
    for qi, cand in enumerate(served):
        cos = l2_normalize(np.stack([by_text[texts[i]] for i in cand])) @ l2_normalize(q[qi:qi + 1])[0]
        score = cos - np.array([stamps[i]["hubness"] for i in cand], dtype=np.float32)
        assert ids[qi] == [cand[j] for j in np.argsort(-score, kind="stable")[:10]]
        np.testing.assert_allclose(scores[qi], np.sort(score)[::-1][:10], atol=1e-5)
    assert ids != plain, "the penalty moved some ranking"


def test_tune_rerank_tries_the_hub_penalty_and_the_cascade_keeps_its_choice(started, sample):
    from vecbridge.jobs.upgrade import HUB_WEIGHTS

    rel = sample.ids[1000:1100]
    with Upgrade.open(started) as up:
        c = up.tune_cascade(sample.queries_new[:100], sample.queries_old[:100], rel, rerank=20)
        assert c["hub_weight"] in HUB_WEIGHTS and c["recall"] >= c["recall_without_penalty"]
        assert up.status()["cascade_hub_weight"] == c["hub_weight"]
        ids, _ = up.search_vectors(sample.queries_new[:100], 10, old_queries=sample.queries_old[:100], rerank=20)
        # searches run the tuned cascade unless told otherwise (--rerank 0: the served ranking alone)
        assert up.status()["cascade_rerank"] == 20
        tuned, _ = up.search_vectors(sample.queries_new[:100], 10, old_queries=sample.queries_old[:100])
        off, _ = up.search_vectors(sample.queries_new[:100], 10, old_queries=sample.queries_old[:100], rerank=0)
    assert np.mean([r in row for r, row in zip(rel, ids)]) == pytest.approx(c["recall"])
    assert tuned == ids != off


def test_tune_auto_chooses_how_many_candidates_and_searches_use_it(started, sample, monkeypatch):
    from vecbridge.serving import cascade
    from vecbridge.serving.weights import choose_rerank

    monkeypatch.setattr(cascade, "RERANK_LADDER", (10, 20, 40))
    rel = sample.ids[1000:1100]
    q_new, q_old = sample.queries_new[:100], sample.queries_old[:100]
    with Upgrade.open(started) as up:
        c = up.tune_cascade(q_new, q_old, rel, rerank="auto")
        by_k = {int(n): r for n, r in c["recall_by_rerank"].items()}
        assert 10 in by_k and c["rerank"] == choose_rerank(by_k) and c["recall"] == by_k[c["rerank"]]
        assert up.status()["cascade_rerank"] == c["rerank"]
        ids, _ = up.search_vectors(q_new, 10, old_queries=q_old)   # the tuned cascade, its count included
    assert np.mean([r in row for r, row in zip(rel, ids)]) == pytest.approx(c["recall"])


def test_upgrade_tune_rerank_auto_on_the_command_line(started, sample, tmp_path, monkeypatch):
    from vecbridge.serving import cascade

    monkeypatch.setattr(cascade, "RERANK_LADDER", (10, 20, 40))
    qn = write_collection(f"file://{tmp_path}/qn", sample.ids[1000:1100], sample.queries_new[:100])
    qo = write_collection(f"file://{tmp_path}/qo", sample.ids[1000:1100], sample.queries_old[:100])
    args = ["upgrade", "tune", "--state", str(started), "--queries", qn.url, "--old-queries", qo.url, "--rerank"]
    r = CliRunner().invoke(main, args + ["auto", "--json"])
    assert r.exit_code == 0, r.output
    c = json.loads(r.output)["cascade"]
    assert c["rerank"] in (10, 20, 40) and set(c["recall_by_rerank"]) >= {"10"}
    status = CliRunner().invoke(main, ["upgrade", "status", "--state", str(started)])
    assert f"cascade (top {c['rerank']}, every search" in status.output, status.output
    shown = CliRunner().invoke(main, args + ["auto"])
    assert shown.exit_code == 0 and "candidates tried (Recall@10): top 10 " in shown.output, shown.output
    bad = CliRunner().invoke(main, args + ["many"])
    assert bad.exit_code == 2 and "'many' is not a number of candidates" in bad.output, bad.output


def test_a_tuning_stopped_midway_keeps_what_it_wrote_back(started, sample, monkeypatch):
    from vecbridge.serving import cascade

    monkeypatch.setattr(cascade, "TUNE_CHUNK", 25)   # 100 queries: four chunks, each written back before the next
    rel, q_new, q_old = sample.ids[1000:1100], sample.queries_new[:100], sample.queries_old[:100]
    calls = []

    def failing(texts):
        calls.append(list(texts))
        if len(calls) == 2:
            raise RuntimeError("the model server went away")
        return mpnet_lookup(texts)

    with Upgrade.open(started) as up:
        before = up.recount()["native"]
        with pytest.raises(RuntimeError, match="went away"):
            up.tune_cascade(q_new, q_old, rel, rerank=K, embed=failing)
        kept = up.recount()["native"]
    assert kept - before == len(calls[0]) > 0, "the first chunk's candidates stayed native"
    seen = []

    def recording(texts):
        seen.extend(texts)
        return mpnet_lookup(texts)

    with Upgrade.open(started) as up:
        c = up.tune_cascade(q_new, q_old, rel, rerank=K, embed=recording)
    assert seen and not set(seen) & set(calls[0]), "what the stopped tuning wrote back is not embedded again"
    assert c["written_back"] == len(seen)
