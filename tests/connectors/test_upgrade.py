"""A model upgrade end to end on every real engine (Milvus as Lite; the server's alias has a test of its own): start
-> reembed (killed with SIGKILL, resumed) -> records added, changed and deleted mid-upgrade -> cutover -> rollback ->
cutover -> finalize. After each step the old vectors are bit-exact, no record is missing or doubled, and each
record's stamp says how its new vector was made."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from vecbridge.align import Alignment, FewPairsWarning
from vecbridge.cli import main
from vecbridge.connectors import VectorBatch, connect
from vecbridge.jobs.upgrade import Upgrade, start
from vecbridge.jobs.upgrade.state import UpgradeState

from .conftest import WORKFLOW_ENGINES

MODEL = "tests.embedders:mpnet_lookup"     # the real all-mpnet-base-v2 vectors of the sample's texts
ROOT = Path(__file__).resolve().parents[2]
#: stores opened in-process with a single owner (or in memory): a second process cannot reach them
EMBEDDED = {"milvus_lite", "qdrant_edge", "chroma_persistent", "qdrant_local"}


def _failing_after(n_batches: int, model):
    """The model, failing like a lost API connection after ``n_batches`` calls."""
    calls = []

    def embed(texts):
        calls.append(len(texts))
        if len(calls) > n_batches:
            raise ConnectionError("the embedding API went away")
        return model(texts)

    return embed


def _snapshot(coll) -> dict:
    return {i: v.tobytes() for b in coll.scan(500) for i, v in zip(b.ids, b.vectors)}


def _check_new_vectors(up: Upgrade, sample, alignment: Alignment):
    """Every record has exactly one new vector, and it is what its stamp says: the model's, or the map's."""
    by_text = {it["doc"]: v for it, v in zip(sample.items, sample.docs_new)}
    got = {i: (v, p) for b in up.target.scan(500) for i, v, p in zip(b.ids, b.vectors, b.payloads)}
    src = {i: (v, p) for b in up.source.scan(500) for i, v, p in zip(b.ids, b.vectors, b.payloads)}
    assert set(got) == set(src), "a record is missing from, or extra in, the new vectors"
    stamps = {i: (st["origin"], st["made_by"]) for i, st in up.records.of(list(src)).items()}
    metric = up.target.info().metric
    for i, (v_old, payload) in src.items():
        origin, _ = stamps[i]
        expected = by_text[payload["text"]] if origin == "native" else alignment.transform(v_old[None])[0]
        v = got[i][0]
        if metric == "cosine":   # stores that normalise cosine vectors on insert
            v, expected = v / np.linalg.norm(v), expected / np.linalg.norm(expected)
        np.testing.assert_allclose(v, expected, atol=2e-5, err_msg=f"{i} ({origin})")
    return stamps


def _native(state_path) -> int:
    try:
        st = UpgradeState.open(state_path)
        try:
            return (st.meta.get("counts") or {}).get("native", 0)   # kept by the run as its batches land
        finally:
            st.close()
    except Exception:   # the file is being written
        return 0


@pytest.mark.engines(*WORKFLOW_ENGINES)   # Milvus through Lite; the server's alias below
def test_upgrade_end_to_end(engine, new_url, sample, tmp_path):
    url = new_url("up")
    src = connect(url).create(dim=384)
    n = 1200
    src.upsert(VectorBatch(sample.ids[:n], sample.docs_old[:n], [{"text": it["doc"]} for it in sample.items[:n]]))
    before = _snapshot(connect(url))
    in_place = "add_vector_field" in engine.features
    where = {"field": "v_mpnet"} if in_place else {"to": new_url("upnew")}
    state_path = tmp_path / "u.upgrade.sqlite"
    status = start(url, model=MODEL, text_field="text", state_path=state_path, fit_sample=500, **where)
    assert status["counts"] == {"mapped": n - 500, "native": 500, "pending": 0, "no-text": 0}
    assert _snapshot(connect(url)) == before                       # the old vectors are never written
    with Upgrade.open(state_path) as up:
        alignment = Alignment.load(up.meta["alignment"])
        _check_new_vectors(up, sample, alignment)
        stamp = up.target.read_stamp()   # the new vectors' field or collection says which space it is in
        assert stamp["origin"] == "upgrade" and stamp["space"]["model"] == MODEL and stamp["space"]["dim"] == 768

    # re-embed, interrupted part-way, then resumed: every record ends native exactly once. Stores a second process
    # can reach are re-embedded by the CLI and killed with SIGKILL; an embedded store has one owner (this process),
    # so there the run is broken off by a failing model instead
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "vecbridge.cli", "upgrade", "reembed", "--state", str(state_path),
            "--batch-size", "25", "--max-per-second", "400", "--json"]
    if engine.name in EMBEDDED:
        with Upgrade.open(state_path) as up:
            up._model = _failing_after(4, up.model)
            with pytest.raises(ConnectionError):
                up.reembed(batch_size=25)
    else:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None and _native(state_path) < 700:
            time.sleep(0.05)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert 500 < _native(state_path) < n, "the interruption did not land mid-run"

    # a record the source gains mid-upgrade and one its application rewrites (another text, its old vector
    # re-made), through another handle: the source belongs to its application
    connect(url).upsert(VectorBatch([sample.ids[n]], sample.docs_old[n:n + 1], [{"text": sample.items[n]["doc"]}]))
    connect(url).upsert(VectorBatch([sample.ids[0]], sample.docs_old[n + 1:n + 2],
                                    [{"text": sample.items[n + 1]["doc"]}]))
    connect(url).delete([sample.ids[1]])    # and one it deletes: gone from the new vectors too
    before = _snapshot(connect(url))
    if engine.name in EMBEDDED:
        with Upgrade.open(state_path) as up:
            up.reembed(batch_size=25)
    else:   # the CLI again, in this process: only the run killed with SIGKILL needs a process of its own
        done = CliRunner().invoke(main, [*args[3:-3], "--json"])
        assert done.exit_code == 0, done.output
    with Upgrade.open(state_path) as up:
        stamps = _check_new_vectors(up, sample, alignment)
        assert len(stamps) == n and {o for o, _ in stamps.values()} == {"native"}
        assert sample.ids[1] not in up.records.of([sample.ids[1]])
        assert up.status()["native_fraction"] == 1.0
    assert _snapshot(connect(url)) == before

    # cut over, roll back, cut over, finalize: what is served moves; the old vectors never change
    with Upgrade.open(state_path) as up:
        assert up.cutover()["serving"] == "new"
        assert up.rollback()["serving"] == "old"
        assert _snapshot(connect(url)) == before
        assert up.cutover()["stage"] == "cutover"
        assert up.finalize()["stage"] == "finalized"
        with pytest.raises(Exception, match="finalized"):
            up.reembed()
        ids, _ = up.search([sample.items[5]["doc"]], k=3)
        assert ids[0][0] == sample.ids[5]                  # a record's own text finds it first
    assert _snapshot(connect(url)) == before


def test_pgvector_cutover_switches_the_serving_view_atomically(engine, new_url, sample, tmp_path):
    if engine.name != "pgvector":
        pytest.skip("the serving view is PostgreSQL's")
    url = new_url("view")
    src = connect(url).create(dim=384)
    src.upsert(VectorBatch(sample.ids[:200], sample.docs_old[:200], [{"text": it["doc"]} for it in sample.items[:200]]))
    with pytest.warns(FewPairsWarning):   # 200 pairs for 384 dimensions: enough for this test of the view
        start(url, model=MODEL, text_field="text", state_path=tmp_path / "v.upgrade.sqlite", field="v_new",
              fit_sample=200)
    view_url = url.replace(f"table={src.table}", f"table={src.table}_serving")
    with Upgrade.open(tmp_path / "v.upgrade.sqlite") as up:
        up.cutover()
        assert connect(view_url).info().dim == 768
        up.rollback()
        view = connect(view_url, read_only=True)
        assert view.info().dim == 384 and view.info().count == 200
        np.testing.assert_array_equal(view.get(sample.ids[:5]).vectors, sample.docs_old[:5].astype(np.float32))
        # re-embed everything, cut over, finalize dropping the old column: the view keeps serving the new one
        up.reembed()
        up.cutover()
        up.finalize(drop_old=True)
    assert set(connect(f"{url}&vector=v_new").info().vector_fields) == {"v_new"}   # the old column is gone
    served = connect(view_url, read_only=True)
    assert served.info().dim == 768 and served.info().count == 200


def _alias_target(coll, alias: str) -> str:
    """The collection an alias names, read with the store's own client."""
    if coll.scheme == "qdrant":
        return {a.alias_name: a.collection_name for a in coll._client().get_aliases().aliases}[alias]
    return coll._client.describe_alias(alias)["collection_name"]


def test_cutover_moves_the_stores_alias(engine, new_url, sample, tmp_path):
    """Qdrant and Milvus: new vectors in a new collection of the same server; cutover and rollback move the alias
    ``<collection>_serving`` between the two in one request."""
    if engine.name not in ("qdrant_local", "milvus_lite", "milvus_server"):
        pytest.skip("aliases are Qdrant's and Milvus'")
    url = new_url("al")
    to = f"{url.rsplit('/', 1)[0]}/{connect(url).identity.name}_v2"   # the same server or database file
    src = connect(url).create(dim=384)
    src.upsert(VectorBatch(sample.ids[:600], sample.docs_old[:600], [{"text": it["doc"]} for it in sample.items[:600]]))
    state = tmp_path / "a.upgrade.sqlite"
    start(url, model=MODEL, text_field="text", state_path=state, to=to, fit_sample=500)
    alias = f"{src.identity.name}_serving"
    with Upgrade.open(state) as up:
        assert up.cutover()["serving_via"] == f"alias {alias}"
        assert _alias_target(connect(url), alias) == connect(to).identity.name
        up.rollback()
        assert _alias_target(connect(url), alias) == src.identity.name
    connect(to).drop()


#: where the real model runs: a new collection on a file store, a new vector field on pgvector (every engine but
#: the Milvus server, WORKFLOW_ENGINES, runs the same upgrade with a lookup embedder in test_upgrade_end_to_end)
REAL_MODEL_ENGINES = {"file", "pgvector"}


def test_upgrade_with_a_real_model(engine, new_url, sample, tmp_path, minilm_model, minilm_vectors):
    """A collection of all-mpnet-base-v2 vectors upgraded to all-MiniLM-L6-v2, which really runs: start fits on texts
    it encodes, reembed encodes the rest, every native vector is the model's output for the record's text, the old
    vectors stay bit-exact, and search with the model's own query encoding finds a record by its text."""
    if engine.name not in REAL_MODEL_ENGINES:
        pytest.skip("the real model runs on one store per write path (new collection, new vector field)")
    path, _ = minilm_model
    n = len(minilm_vectors)
    url = new_url("real")
    connect(url).create(dim=768).upsert(VectorBatch(sample.ids[:n], sample.docs_new[:n],
                                                    [{"text": it["doc"]} for it in sample.items[:n]]))
    before = _snapshot(connect(url))
    where = {"field": "v_minilm"} if "add_vector_field" in engine.features else {"to": new_url("realnew")}
    state = tmp_path / "real.upgrade.sqlite"
    start(url, model=path, text_field="text", state_path=state, fit_sample=460, **where)
    with Upgrade.open(state) as up:
        up.reembed(batch_size=50)
        got = up.target.get(sample.ids[:n])
        expected = minilm_vectors
        for i, v in zip(got.ids, got.vectors):
            np.testing.assert_allclose(v / np.linalg.norm(v), expected[i] / np.linalg.norm(expected[i]), atol=1e-5)
        assert len(got) == n and up.status()["native_fraction"] == 1.0
        ids, _ = up.search([sample.items[9]["doc"]], k=1)
        assert ids[0] == [sample.ids[9]]
    assert _snapshot(connect(url)) == before
