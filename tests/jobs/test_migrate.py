"""Rewrite, resume, verify, wrap and federated search on the built-in file store with real vectors."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import flaky, write_collection
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.connectors import connect
from vecbridge.errors import InputError, StoreError
from vecbridge.jobs import MappedEmbeddings, federated_search, migrate, verify, wrap


@pytest.fixture
def setup(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old,
                           [{"text": it["doc"], "pos": it["pos"]} for it in sample.items])
    est = OrthogonalProcrustes().fit(sample.docs_old[:1000], sample.docs_new[:1000])
    path = Alignment.from_estimator(est, source_model="minilm6", target_model="mpnet").save(tmp_path / "align.vb")
    return {"old": old.url, "align": path, "tmp": tmp_path, "est": est}


def snapshot(url):
    """Every record of a collection, as a dict id -> (vector, payload)."""
    return {i: (v, p) for b in connect(url).scan(batch_size=500) for i, v, p in zip(b.ids, b.vectors, b.payloads)}


def dir_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def test_rewrite_maps_every_vector_and_keeps_ids_and_payloads(setup, sample):
    before = dir_digest(setup["tmp"] / "old")
    result = migrate(setup["old"], setup["align"], f"file://{setup['tmp']}/new", batch_size=256)
    assert result["written"] == 1500
    new = snapshot(f"file://{setup['tmp']}/new")
    old = snapshot(setup["old"])
    assert set(new) == set(old)
    expected = setup["est"].transform(sample.docs_old.astype(np.float64))
    for j, i in enumerate(sample.ids):
        np.testing.assert_allclose(new[i][0], expected[j], atol=1e-5, rtol=1e-5)
        assert new[i][1] == old[i][1]
    assert dir_digest(setup["tmp"] / "old") == before   # the source is untouched
    assert verify(setup["old"], f"file://{setup['tmp']}/new", setup["align"])["ok"]


def test_dry_run_writes_nothing(setup):
    out = migrate(setup["old"], setup["align"], f"file://{setup['tmp']}/new", dry_run=True)
    plan = out["plan"]
    assert (plan["count"], plan["source_dim"], plan["target_dim"]) == (1500, 384, 768)
    assert plan["estimated_target_bytes"] > 1500 * 768 * 4
    assert not connect(f"file://{setup['tmp']}/new").exists()
    assert not list(setup["tmp"].glob("*.migrate.json"))


def test_refuses_to_write_into_the_source(setup):
    with pytest.raises(InputError, match="source collection itself"):
        migrate(setup["old"], setup["align"], setup["old"])


def test_existing_target_needs_overwrite(setup):
    write_collection(f"file://{setup['tmp']}/new", ["x"], np.ones((1, 768)))
    with pytest.raises(StoreError, match="already exists"):
        migrate(setup["old"], setup["align"], f"file://{setup['tmp']}/new")
    migrate(setup["old"], setup["align"], f"file://{setup['tmp']}/new", overwrite=True)
    assert connect(f"file://{setup['tmp']}/new").info().count == 1500


def test_bad_inputs_are_refused(setup, tmp_path, sample):
    write_collection(f"file://{tmp_path}/wide", ["a"], np.ones((1, 768)))
    with pytest.raises(InputError, match="holds 768-d vectors"):
        migrate(f"file://{tmp_path}/wide", setup["align"], f"file://{tmp_path}/x")
    connect(f"file://{tmp_path}/empty").create(dim=384)
    with pytest.raises(InputError, match="empty"):
        migrate(f"file://{tmp_path}/empty", setup["align"], f"file://{tmp_path}/x")
    with pytest.raises(StoreError, match="not found"):
        migrate(f"file://{tmp_path}/missing", setup["align"], f"file://{tmp_path}/x")
    assert not connect(f"file://{tmp_path}/x").exists()


def test_nan_in_the_source_leaves_no_half_written_target(setup, tmp_path, sample):
    vecs = sample.docs_old.copy()
    vecs[1200, 5] = np.nan    # stores refuse NaN on write, so the dirty source is a plain numpy directory
    (tmp_path / "dirty").mkdir()
    np.save(tmp_path / "dirty" / "vectors.npy", vecs)
    (tmp_path / "dirty" / "ids.json").write_text(json.dumps(sample.ids))
    with pytest.raises(InputError, match="NaN"):
        migrate(f"file://{tmp_path}/dirty", setup["align"], f"file://{tmp_path}/x", batch_size=100)
    assert not connect(f"file://{tmp_path}/x").exists()
    assert not list(setup["tmp"].glob("*.migrate.json"))


def test_interrupted_migration_resumes_to_the_same_state(setup):
    target = f"file://{setup['tmp']}/new"
    with pytest.raises(ConnectionError):
        migrate(setup["old"], setup["align"], flaky(target, 3), batch_size=200)
    partial = snapshot(target)
    assert len(partial) == 600
    with pytest.raises(InputError, match="--resume"):
        migrate(setup["old"], setup["align"], target, batch_size=200)
    result = migrate(setup["old"], setup["align"], target, batch_size=200, resume=True)
    assert result["resumed_from"] == 600 and result["written"] == 900
    migrate(setup["old"], setup["align"], f"file://{setup['tmp']}/ref", batch_size=200)
    got, ref = snapshot(target), snapshot(f"file://{setup['tmp']}/ref")
    assert got.keys() == ref.keys()
    for i in ref:
        np.testing.assert_allclose(got[i][0], ref[i][0], atol=1e-6)
        assert got[i][1] == ref[i][1]
    assert not list(setup["tmp"].glob("*.migrate.json"))   # a finished run leaves no checkpoint behind
    with pytest.raises(StoreError, match="target already exists"):
        migrate(setup["old"], setup["align"], target)


def test_resume_with_a_different_alignment_is_refused(setup, sample):
    target = f"file://{setup['tmp']}/new"
    with pytest.raises(ConnectionError):
        migrate(setup["old"], setup["align"], flaky(target, 1), batch_size=200)
    other = OrthogonalProcrustes().fit(sample.docs_old[500:1500], sample.docs_new[500:1500])
    other_path = Alignment.from_estimator(other).save(setup["tmp"] / "other.vb")
    ckpt = next(setup["tmp"].glob("align.vb.*.migrate.json"))
    with pytest.raises(InputError, match="different alignment"):
        migrate(setup["old"], other_path, target, resume=True, checkpoint_path=ckpt)


def _cli_migrate(args, env=None):
    return subprocess.Popen([sys.executable, "-m", "vecbridge.cli", "migrate", *map(str, args)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kill_9_at_a_random_point_then_resume_gives_the_exact_state(tmp_path, sample, seed):
    rng = np.random.default_rng(seed)
    n = 6000
    vectors = np.tile(sample.docs_old, (4, 1))[:n] * rng.uniform(0.5, 1.5, size=(n, 1)).astype(np.float32)
    ids = [f"doc-{i}" for i in range(n)]
    old = write_collection(f"file://{tmp_path}/old", ids, vectors, [{"i": i} for i in range(n)]).url
    align = Alignment.from_estimator(OrthogonalProcrustes().fit(sample.docs_old, sample.docs_new)).save(tmp_path / "a.vb")
    target = f"file://{tmp_path}/new"
    args = [old, "--alignment", align, "--to", target, "--batch-size", 50, "--json"]
    proc = _cli_migrate(args)
    stop_at = int(rng.integers(200, 4000))
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        ck = list(tmp_path.glob("a.vb.*.migrate.json"))
        if ck:
            try:
                if sum(p["written"] for p in json.loads(ck[0].read_text())["phases"].values()) >= stop_at:
                    break
            except (ValueError, KeyError):
                pass
        time.sleep(0.005)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = _cli_migrate(args + ["--resume"])
    assert done.wait(timeout=120) == 0, done.stderr.read().decode()
    got = snapshot(target)
    assert len(got) == n
    expected = Alignment.load(align).transform(vectors)
    for j, i in enumerate(ids):
        np.testing.assert_allclose(got[i][0], expected[j], atol=1e-6)
        assert got[i][1] == {"i": j}
    assert verify(old, target, align)["ok"]


def test_verify_detects_a_corrupted_target(setup, sample):
    target = f"file://{setup['tmp']}/new"
    migrate(setup["old"], setup["align"], target)
    bad = connect(target).get([sample.ids[3]])
    connect(target).upsert(bad.with_vectors(bad.vectors * -1))
    report = verify(setup["old"], target, setup["align"], sample=1500)
    assert not report["ok"] and [c["name"] for c in report["checks"] if not c["ok"]] == ["vectors"]
    r = CliRunner().invoke(main, ["verify", setup["old"], target, "--alignment", str(setup["align"]), "--sample", "1500"])
    assert r.exit_code == 1 and "FAIL vectors" in r.stdout


def test_wrapped_search_equals_rewritten_search_for_a_rotation(setup, sample):
    target = f"file://{setup['tmp']}/new"
    migrate(setup["old"], setup["align"], target)
    w = wrap(connect(setup["old"]), setup["align"])
    assert w.exact
    ids_w, sc_w = w.search(sample.queries_new[:50], 10)
    ids_n, sc_n = connect(target).search(sample.queries_new[:50], 10)
    assert ids_w == ids_n
    np.testing.assert_allclose(sc_w, sc_n, atol=1e-5)


@pytest.mark.parametrize("metric", ["dot", "cosine", "l2"])
def test_wrapped_search_with_a_centred_map(tmp_path, sample, metric):
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old, metric=metric).url
    est = OrthogonalProcrustes(center=True).fit(sample.docs_old[:1000], sample.docs_new[:1000])
    align = Alignment.from_estimator(est).save(tmp_path / "c.vb")
    migrate(old, align, f"file://{tmp_path}/new")
    w = wrap(connect(old), align)
    assert w.exact == (metric == "dot")
    ids_w, sc_w = w.search(sample.queries_new[:40], 10)
    ids_n, sc_n = connect(f"file://{tmp_path}/new").search(sample.queries_new[:40], 10)
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids_w, ids_n)])
    assert overlap > (0.999 if metric != "cosine" else 0.95), overlap
    same = [a == b for a, b in zip(ids_w, ids_n)]
    np.testing.assert_allclose(sc_w[same], sc_n[same], rtol=1e-4, atol=1e-3)


def test_federated_search_merges_and_dedupes(setup, sample, tmp_path):
    # the NEW collection already holds the first 1,000 items re-embedded natively; the wrapped OLD holds all 1,500
    native = write_collection(f"file://{tmp_path}/native", sample.ids[:1000], sample.docs_new[:1000])
    w = wrap(connect(setup["old"]), setup["align"])
    merged = federated_search([w, native], sample.queries_new[:20], 10)
    for rows in merged:
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)) == 10
        assert all(a["score"] >= b["score"] for a, b in zip(rows, rows[1:]))
    assert any(r["source"].startswith("wrap(") for rows in merged for r in rows)
    assert any(not r["source"].startswith("wrap(") for rows in merged for r in rows)


def test_mapped_embeddings_plug_in_where_an_embedding_function_is_expected(setup, sample):
    table = dict(zip([it["query"] for it in sample.items[1000:]], sample.queries_new))
    emb = MappedEmbeddings(lambda texts: np.stack([table[t] for t in texts]), setup["align"])
    text = sample.items[1000]["query"]
    vec = emb.embed_query(text)
    assert len(vec) == 384
    ids, _ = connect(setup["old"]).search(np.array([vec]), 10)
    ids_w, _ = wrap(connect(setup["old"]), setup["align"]).search(sample.queries_new[:1], 10)
    assert ids == ids_w
    assert np.asarray(emb.embed_documents([text, text])).shape == (2, 384)


def test_cli_migrate_verify_search(setup, sample):
    runner = CliRunner()
    target = f"file://{setup['tmp']}/new"
    r = runner.invoke(main, ["migrate", setup["old"], "--alignment", str(setup["align"]), "--to", target, "--dry-run"])
    assert r.exit_code == 0 and "nothing was written" in r.stdout
    r = runner.invoke(main, ["migrate", setup["old"], "--alignment", str(setup["align"]), "--to", target, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["written"] == 1500
    r = runner.invoke(main, ["verify", setup["old"], target, "--alignment", str(setup["align"]), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["ok"]
    np.save(setup["tmp"] / "q.npy", sample.queries_new[:2])
    r = runner.invoke(main, ["search", "--wrap", f"{setup['old']}={setup['align']}", "--native", target,
                             "--vectors", str(setup["tmp"] / "q.npy"), "-k", "3", "--json"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.stdout)) == 2
    r = runner.invoke(main, ["migrate", setup["old"], "--alignment", str(setup["align"]), "--to", setup["old"]])
    assert r.exit_code == 3 and "source collection itself" in r.output
    r = runner.invoke(main, ["migrate", setup["old"], "--alignment", str(setup["align"]), "--field", "v2"])
    assert r.exit_code == 4 and "not supported" in r.output


def test_cli_search_serving_options_keep_more_quality_than_the_map_alone(tmp_path, sample, sample_stores):
    """--old-vectors (dual-query fusion) and --rerank-model (re-scoring candidates with the new model) are run from
    the command line, and each finds at least as many relevant documents as the wrapped map alone."""
    est = OrthogonalProcrustes().fit(sample.docs_old[:1000], sample.docs_new[:1000])
    align = Alignment.from_estimator(est).save(tmp_path / "a.vb")
    q_new, q_old = tmp_path / "q_new.npy", tmp_path / "q_old.npy"
    np.save(q_new, sample.queries_new[:100])
    np.save(q_old, sample.queries_old[:100])
    relevant = sample.ids[1000:1100]          # query i is about document 1000 + i

    def recall(extra):
        r = CliRunner().invoke(main, ["search", "--wrap", f"{sample_stores['old']}={align}", "--vectors", q_new,
                                      "-k", 10, "--json", *map(str, extra)])
        assert r.exit_code == 0, r.output
        rows = json.loads(r.output)
        return np.mean([rel in {h["id"] for h in hits} for rel, hits in zip(relevant, rows)])

    plain = recall([])
    fused = recall(["--old-vectors", q_old])
    reranked = recall(["--rerank-model", "tests.embedders:mpnet_lookup", "--candidates", 50])
    assert fused >= plain and reranked >= plain and max(fused, reranked) > plain, (plain, fused, reranked)
    r = CliRunner().invoke(main, ["search", "--native", sample_stores["new"], "--vectors", q_new, "--old-vectors",
                                  q_old])
    assert r.exit_code == 2 and "apply to --wrap" in r.output
