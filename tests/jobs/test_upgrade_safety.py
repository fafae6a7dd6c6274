"""`vecbridge upgrade` never writes where it must not, and survives interruptions: the source (or its own vector
field) and other existing collections are refused as the upgrade's target; an interrupted start continues with its
fit sample; a failed start leaves nothing that overrides the corrected rerun; one state file, one collection; one
writer per upgrade; cutover and rollback that are killed half-way complete when run again; records without text
are never counted as re-embedded; source changes are seen by status and cutover. File store and PostgreSQL."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.cli import main
from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import InputError
from vecbridge.jobs import upgrade as upgrade_job
from vecbridge.jobs.upgrade import Upgrade, starting
from vecbridge.jobs.upgrade.state import UpgradeState

MODEL = "tests.embedders:mpnet_lookup"
ROOT = Path(__file__).resolve().parents[2]


def run(*args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], **kwargs)


def _payloads(sample, n=None, every=None):
    items = sample.items[:n] if n else sample.items
    return [{} if every and j % every == 0 else {"text": it["doc"]} for j, it in enumerate(items)]


def _old(tmp_path, sample, name="old", n=None, every=None):
    n = n or len(sample.ids)
    return write_collection(f"file://{tmp_path}/{name}", sample.ids[:n], sample.docs_old[:n],
                            _payloads(sample, n, every))


def _snapshot(coll) -> dict:
    return {i: v.tobytes() for b in coll.scan(500) for i, v in zip(b.ids, b.vectors)}


def _counts(state) -> dict:
    with Upgrade.open(state) as up:
        return up.records.counts()


# --- A: the source, its own vector field and other existing collections are never written ----------------------
def test_start_refuses_the_source_however_spelled(tmp_path, sample, monkeypatch):
    old = _old(tmp_path, sample)
    before = _snapshot(connect(old.url))
    monkeypatch.chdir(tmp_path)
    state = tmp_path / "up.sqlite"
    for to in (old.url, "file://./old"):
        for extra in ((), ("--overwrite",)):
            r = run("upgrade", "start", old.url, "--to-model", MODEL, "--to", to, "--state", state,
                    "--fit-sample", 300, *extra)
            assert r.exit_code == 3 and "source" in r.output, r.output
            assert len(r.output.strip().splitlines()) == 1
    assert _snapshot(connect(old.url)) == before
    assert not state.exists()                         # refused before any state was written


def test_start_refuses_an_existing_collection_unless_overwrite(tmp_path, sample):
    old = _old(tmp_path, sample)
    other = write_collection(f"file://{tmp_path}/other", ["x", "y"], np.ones((2, 768)), [{}, {}])
    state = tmp_path / "up.sqlite"
    r = run("upgrade", "start", old.url, "--to-model", MODEL, "--to", other.url, "--state", state,
            "--fit-sample", 500)
    assert r.exit_code == 4 and "already exists" in r.output and "--overwrite" in r.output, r.output   # as migrate
    assert sorted(i for b in connect(other.url).scan() for i in b.ids) == ["x", "y"] and not state.exists()
    r = run("upgrade", "start", old.url, "--to-model", MODEL, "--to", other.url, "--state", state,
            "--fit-sample", 500, "--overwrite", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["counts"]["native"] == 500
    assert connect(other.url).info().count == len(sample.ids)     # dropped and recreated: no stray record
    assert not connect(other.url).get(["x"]).ids


def _interrupt_after_first_batch(monkeypatch):
    """`upgrade start` stopped (as by Ctrl-C) after the fit, once migrate has written one batch."""
    real = starting.migrate

    def stopped(*args, **kwargs):
        def boom(n):
            raise KeyboardInterrupt

        return real(*args, **{**kwargs, "batch_size": 200, "on_progress": boom})

    monkeypatch.setattr(starting, "migrate", stopped)


# --- B: an interrupted start keeps its re-embedded fit sample, priority scores and hub reference ----------------
def test_interrupted_start_continues_with_its_fit_sample(tmp_path, sample, monkeypatch):
    old = _old(tmp_path, sample)
    state = tmp_path / "up.sqlite"
    args = dict(model=MODEL, text_field="text", state_path=state, to=f"file://{tmp_path}/new", fit_sample=500)
    with monkeypatch.context() as m:
        _interrupt_after_first_batch(m)
        with pytest.raises(KeyboardInterrupt):
            upgrade_job.start(old.url, **args)
    assert connect(f"file://{tmp_path}/new").exists()
    status = upgrade_job.start(old.url, **args)           # the same command again: continues into its own target
    assert status["counts"] == {"mapped": 1000, "native": 500, "pending": 0, "no-text": 0}
    st = UpgradeState.open(state)
    assert st.reference() is not None and st.reference().shape == (500, 768)
    st.close()
    with Upgrade.open(state) as up:
        stamps = up.records.of(sample.ids)
        assert len(stamps) == len(sample.ids)
        assert all(s.get("residual") is not None for s in stamps.values() if s["origin"] == "mapped")  # kept
        assert all(s.get("hubness") is not None for s in stamps.values())                               # kept
        native = [i for i, s in stamps.items() if s["origin"] == "native"]
        got = up.target.get(native)
        by_id = dict(zip(sample.ids, sample.docs_new))
        np.testing.assert_allclose(got.vectors, np.stack([by_id[i] for i in got.ids]), atol=1e-6)
    assert connect(f"file://{tmp_path}/new").info().count == len(sample.ids)


# --- C and D: a failed or other start never leaves settings behind that override the next one ------------------
def test_failed_start_leaves_nothing_behind_and_the_corrected_rerun_wins(tmp_path, sample):
    old = _old(tmp_path, sample)
    state = tmp_path / "up.sqlite"
    to = f"file://{tmp_path}/new"
    r = run("upgrade", "start", old.url, "--to-model", MODEL, "--to", to, "--state", state, "--text-field", "body",
            "--fit-sample", 500)
    assert r.exit_code == 3 and "'body'" in r.output, r.output
    assert not state.exists() and not connect(to).exists()
    r = run("upgrade", "start", old.url, "--to-model", MODEL, "--to", old.url, "--state", state, "--fit-sample", 500)
    assert r.exit_code == 3 and not state.exists()
    r = run("upgrade", "start", old.url, "--to-model", MODEL, "--to", to, "--state", state, "--text-field", "text",
            "--fit-sample", 500, "--json")
    assert r.exit_code == 0, r.output
    r = run("upgrade", "reembed", "--state", state, "--limit", 100, "--json")
    out = json.loads(r.output)
    assert r.exit_code == 0 and out["reembedded"] == 100 and out["counts"]["native"] == 600, r.output
    assert out["changed_in_source"] == 0


def test_rerun_with_other_settings_or_another_collection_is_refused(tmp_path, sample, monkeypatch):
    old = _old(tmp_path, sample)
    other = _old(tmp_path, sample, name="old2", n=800)
    state = tmp_path / "up.sqlite"
    to = f"file://{tmp_path}/new"
    with monkeypatch.context() as m:
        _interrupt_after_first_batch(m)
        with pytest.raises(KeyboardInterrupt):
            upgrade_job.start(old.url, model=MODEL, text_field="text", state_path=state, to=to, fit_sample=500)
    r = run("upgrade", "start", other.url, "--to-model", MODEL, "--to", f"file://{tmp_path}/new2", "--state", state,
            "--fit-sample", 500)
    assert r.exit_code == 3 and "another collection" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not connect(f"file://{tmp_path}/new2").exists()
    r = run("upgrade", "start", old.url, "--to-model", "tests.embedders:minilm_lookup", "--to", to, "--state", state,
            "--fit-sample", 500)
    assert r.exit_code == 3 and "other settings" in r.output and "model" in r.output, r.output
    st = UpgradeState.open(state)
    assert st.meta["source"].endswith("/old") and st.meta["model"] == MODEL
    st.close()
    r = run("upgrade", "start", old.url, "--to-model", MODEL, "--to", to, "--state", state, "--fit-sample", 500,
            "--json")
    assert r.exit_code == 0 and json.loads(r.output)["counts"]["native"] == 500, r.output


# --- E: one writer per upgrade ------------------------------------------------------------------------------------
def test_a_second_reembed_of_the_same_upgrade_is_refused_at_once(tmp_path, sample):
    old = _old(tmp_path, sample)
    state = tmp_path / "up.sqlite"
    assert run("upgrade", "start", old.url, "--to-model", MODEL, "--to", f"file://{tmp_path}/new", "--state", state,
               "--fit-sample", 500).exit_code == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen([sys.executable, "-m", "vecbridge.cli", "upgrade", "reembed", "--state", str(state),
                              "--batch-size", "10", "--max-per-second", "100", "--json"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and _counts(state)["native"] <= 500:
            time.sleep(0.05)
        assert first.poll() is None, first.stderr.read()
        t0 = time.time()
        r = run("upgrade", "reembed", "--state", state, "--json")
        assert r.exit_code == 4 and "another run" in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1 and time.time() - t0 < 10
    finally:
        first.kill()
        first.wait()


# --- F: cutover and rollback killed between the switch and the state ----------------------------------------------
def _killed_after_switch(monkeypatch, state, move: str) -> None:
    """Run ``move`` (cutover or rollback), stopped right after the store was switched, before the state says so."""
    real = Upgrade._serve

    def serve_then_die(self, which):
        real(self, which)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(Upgrade, "_serve", serve_then_die)
        with Upgrade.open(state) as up, pytest.raises(KeyboardInterrupt):
            getattr(up, move)()


# --- H: a cutover where the store cannot switch says what clients must query --------------------------------------
def test_qdrant_field_cutover_says_what_clients_query(tmp_path, sample):
    pytest.importorskip("qdrant_client")
    url = f"qdrant://:memory:/up_{uuid.uuid4().hex[:10]}"
    connect(url).create(dim=384).upsert(VectorBatch(sample.ids[:600], sample.docs_old[:600], _payloads(sample, 600)))
    state = tmp_path / "q.sqlite"
    try:
        r = run("upgrade", "start", url, "--to-model", MODEL, "--state", state, "--fit-sample", 500,
                "--field", "v_new")
        assert r.exit_code == 0, r.output
        r = run("upgrade", "cutover", "--state", state)
        out = " ".join(r.output.split())
        assert r.exit_code == 0 and "using='v_new'" in out and "nothing switched" in out, out
        r = run("upgrade", "rollback", "--state", state)
        assert r.exit_code == 0 and "nothing switched" in " ".join(r.output.split()), r.output
    finally:
        connect(url).drop()


# --- G: records without text ----------------------------------------------------------------------------------------
def test_records_without_text_are_not_counted_as_re_embedded(tmp_path, sample):
    old = _old(tmp_path, sample, every=3)               # a third have no text
    no_text = sum(1 for j in range(len(sample.ids)) if j % 3 == 0)
    state = tmp_path / "up.sqlite"
    r = run("upgrade", "start", old.url, "--to-model", MODEL, "--to", f"file://{tmp_path}/new", "--state", state,
            "--fit-sample", 900, "--json")
    assert r.exit_code == 0, r.output
    fitted = json.loads(r.output)["counts"]["native"]       # the fit sample's records with text
    r = run("upgrade", "reembed", "--state", state, "--json")
    out = json.loads(r.output)
    assert out["reembedded"] == len(sample.ids) - no_text - fitted and out["without_text"] == no_text, out
    assert out["counts"]["no-text"] == no_text
    r = run("upgrade", "reembed", "--state", state)
    out = " ".join(r.output.split())
    assert r.exit_code == 0 and "re-embedded 0 records" in out
    assert f"{no_text:,} records without text in 'text' keep their mapped vectors" in out, out
    assert run("upgrade", "cutover", "--state", state).exit_code == 0
    r = run("upgrade", "finalize", "--state", state)
    out = " ".join(r.output.split())
    assert r.exit_code == 3 and f"{no_text:,} records have no native vector" in out and "without text" in out, out


# --- I: source changes since the last reembed ---------------------------------------------------------------------
def test_status_and_cutover_see_source_changes(tmp_path, sample):
    n = 1200
    old = _old(tmp_path, sample, n=n)
    state = tmp_path / "up.sqlite"
    new = f"file://{tmp_path}/new"
    assert run("upgrade", "start", old.url, "--to-model", MODEL, "--to", new, "--state", state,
               "--fit-sample", 500).exit_code == 0
    connect(old.url).upsert(VectorBatch([sample.ids[n]], sample.docs_old[n:n + 1], [{"text": sample.items[n]["doc"]}]))
    connect(old.url).upsert(VectorBatch([sample.ids[0]], sample.docs_old[n + 1:n + 2],
                                        [{"text": sample.items[n + 1]["doc"]}]))
    r = run("upgrade", "status", "--state", state, "--json")
    changes = json.loads(r.output)["source_changes"]
    assert (changes["added"], changes["changed"], changes["removed"]) == (1, 1, 0), r.output
    r = run("upgrade", "status", "--state", state)
    assert "1 added, 1 changed" in " ".join(r.output.split()), r.output
    r = run("upgrade", "cutover", "--state", state, "--json")
    assert r.exit_code == 0, r.output
    with Upgrade.open(state) as up:
        alignment = up.alignment
        got = up.target.get([sample.ids[n], sample.ids[0]])
        assert got.ids == [sample.ids[n], sample.ids[0]]
        np.testing.assert_allclose(got.vectors, alignment.transform(sample.docs_old[n:n + 2]), atol=1e-5)
    r = run("upgrade", "status", "--state", state, "--json")
    assert json.loads(r.output)["source_changes"] == {"added": 0, "changed": 0, "removed": 0}


def _cut_over(tmp_path, sample):
    """An upgrade of 700 records into a new collection, fully re-embedded and cut over: (old collection, state)."""
    old = _old(tmp_path, sample, n=700)
    state = tmp_path / "up.sqlite"
    assert run("upgrade", "start", old.url, "--to-model", MODEL, "--to", f"file://{tmp_path}/new", "--state", state,
               "--fit-sample", 500).exit_code == 0
    assert run("upgrade", "reembed", "--state", state).exit_code == 0
    assert run("upgrade", "cutover", "--state", state).exit_code == 0
    return old, state


# --- J: finalize --drop-old without a terminal, and after a plain finalize -----------------------------------------
def test_finalize_drop_old_without_a_terminal_and_after_a_plain_finalize(tmp_path, sample):
    old, state = _cut_over(tmp_path, sample)
    r = run("upgrade", "finalize", "--state", state, "--drop-old")
    assert r.exit_code == 2 and "--yes" in r.output and connect(old.url).exists(), r.output
    r = run("upgrade", "finalize", "--state", state)
    assert r.exit_code == 0 and connect(old.url).exists()
    r = run("upgrade", "finalize", "--state", state, "--drop-old", "--yes", "--json")
    assert r.exit_code == 0 and "old collection" in json.loads(r.output)["dropped"], r.output
    assert not connect(old.url).exists()
    r = run("upgrade", "finalize", "--state", state, "--drop-old", "--yes")
    assert r.exit_code == 3 and "already" in r.output, r.output


# --- K: the plan's closing sentence follows its table -----------------------------------------------------------
def test_plan_sentence_follows_the_numbers(capsys):
    from vecbridge.render.console import console as _console
    from vecbridge.render.upgrade import plan as _print_plan

    stages = [{"native_fraction": f, "recall": r, "recall_fused": 0.95, "beta": 1.0}
              for f, r in ((0.0, 0.70), (0.1, 0.72), (0.25, 0.75), (0.5, 0.80), (1.0, 0.887))]
    plan = {"source": "file://x", "count": 10, "with_text": 1.0, "dim": 384, "model": "m", "seconds_per_text": 0.001,
            "full_reembed_seconds": 0.01, "stages": [],
            "predicted": {"k": 10, "queries": 100, "pool": 200, "method": "orthogonal", "fit_sample": 100,
                          "staying": 0.947, "stages": stages, "new_model_alone_from": None}}
    _print_plan(plan, _console())
    out = " ".join(capsys.readouterr().out.split())
    assert "only after a full re-embed" not in out
    assert "not even after a full re-embed" in out and "0.887" in out and "0.947" in out, out
    plan["predicted"]["new_model_alone_from"] = 1.0
    _print_plan(plan, _console())
    assert "only after a full re-embed" in " ".join(capsys.readouterr().out.split())


# --- L: the state never keeps a password; continuing takes credentials from the environment -------------------
def test_state_keeps_no_password_and_credentials_come_from_the_environment(monkeypatch):
    from vecbridge.jobs.upgrade import url_without_secrets

    kept = url_without_secrets("milvus://root:s3cret@127.0.0.1:19530/items?db=d")
    assert "s3cret" not in kept and "root" not in kept
    monkeypatch.setenv("MILVUS_TOKEN", "root:s3cret")
    assert connect(kept)._token == "root:s3cret"
    kept = url_without_secrets("postgresql://app:pw@db.example:5432/prod?table=items&password=pw")
    assert "pw" not in kept.replace("app", "") and kept.startswith("postgresql://app@db.example:5432/prod")


# --- PostgreSQL ---------------------------------------------------------------------------------------------------
@pytest.fixture
def pg_table(pg_engine, sample):
    """A PostgreSQL table of 700 records (old vectors, texts); dropped afterwards with its serving view."""
    url = pg_engine.url(f"up_{uuid.uuid4().hex[:10]}")
    n = 700
    connect(url).create(dim=384).upsert(VectorBatch(sample.ids[:n], sample.docs_old[:n], _payloads(sample, n)))
    yield url, n
    table = connect(url)
    try:
        with table._connect() as db:
            db.execute(f"DROP VIEW IF EXISTS {table.table}_serving")
        table.drop()
    except Exception:
        pass


def test_pg_start_never_writes_the_source_vector_column(pg_table, sample, tmp_path):
    url, n = pg_table
    before = _snapshot(connect(url))
    state = tmp_path / "pg.sqlite"
    for where in (("--field", "embedding"), ("--field", "embedding", "--overwrite"), ("--to", f"{url}&vector=x")):
        r = run("upgrade", "start", url, "--to-model", MODEL, "--state", state, "--fit-sample", 500, *where)
        assert r.exit_code == 3, r.output
        assert len(r.output.strip().splitlines()) == 1
    assert _snapshot(connect(url)) == before and not state.exists()
    assert set(connect(url).info().vector_fields) == {"embedding"}
    connect(url).add_vector_field("v_app", 768)           # a vector column of the application's
    for extra in ((), ("--overwrite",)):
        r = run("upgrade", "start", url, "--to-model", MODEL, "--state", state, "--fit-sample", 500,
                "--field", "v_app", *extra)
        assert r.exit_code == 3 and "already exists" in r.output and not state.exists(), r.output
    assert set(connect(url).info().vector_fields) == {"embedding", "v_app"}


def test_pg_cutover_and_rollback_killed_half_way_complete_when_run_again(pg_table, tmp_path, monkeypatch):
    url, n = pg_table
    state = tmp_path / "pg.sqlite"
    r = run("upgrade", "start", url, "--to-model", MODEL, "--state", state, "--fit-sample", 500, "--field", "v_new")
    assert r.exit_code == 0, r.output
    src = connect(url)
    view_url = url.replace(f"table={src.table}", f"table={src.table}_serving")

    def served_dim():
        return connect(view_url, read_only=True).info().dim

    assert served_dim() == 384                       # the serving view exists from the start, over the old vectors
    _killed_after_switch(monkeypatch, state, "cutover")
    assert served_dim() == 768
    r = run("upgrade", "status", "--state", state)
    assert "interrupted" in r.output, r.output
    r = run("upgrade", "rollback", "--state", state, "--json")      # completes the cutover, then rolls back
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["stage"], out["serving"]) == ("rolled-back", "old") and served_dim() == 384
    _killed_after_switch(monkeypatch, state, "cutover")
    r = run("upgrade", "cutover", "--state", state, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["stage"], out["serving"]) == ("cutover", "new") and served_dim() == 768
    _killed_after_switch(monkeypatch, state, "rollback")
    assert served_dim() == 384
    r = run("upgrade", "rollback", "--state", state, "--json")
    assert r.exit_code == 0 and json.loads(r.output)["stage"] == "rolled-back" and served_dim() == 384, r.output


def test_pg_status_and_cutover_see_inserts_and_updates(pg_table, sample, tmp_path):
    url, n = pg_table
    state = tmp_path / "pg.sqlite"
    assert run("upgrade", "start", url, "--to-model", MODEL, "--state", state, "--fit-sample", 500,
               "--field", "v_new").exit_code == 0
    connect(url).upsert(VectorBatch([sample.ids[n]], sample.docs_old[n:n + 1], [{"text": sample.items[n]["doc"]}]))
    connect(url).upsert(VectorBatch([sample.ids[0]], sample.docs_old[n + 1:n + 2],
                                    [{"text": sample.items[n + 1]["doc"]}]))
    r = run("upgrade", "status", "--state", state, "--json")
    changes = json.loads(r.output)["source_changes"]
    assert (changes["added"], changes["changed"]) == (1, 1), r.output
    assert run("upgrade", "cutover", "--state", state).exit_code == 0
    src = connect(url)
    view = connect(url.replace(f"table={src.table}", f"table={src.table}_serving"), read_only=True)
    got = view.get([sample.ids[n], sample.ids[0]])
    assert got.ids == [sample.ids[n], sample.ids[0]] and got.vectors.shape == (2, 768)
    with Upgrade.open(state) as up:
        np.testing.assert_allclose(got.vectors, up.alignment.transform(sample.docs_old[n:n + 2]), atol=1e-5)


# --- L: finalize --drop-old killed after the drop, before the state said so -------------------------------------
def test_a_drop_killed_before_the_state_recorded_it_is_completed_by_status_or_finalize(tmp_path, sample,
                                                                                      monkeypatch):
    old, state = _cut_over(tmp_path, sample)
    real = Upgrade._drop_old

    def drop_then_die(self):
        real(self)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(Upgrade, "_drop_old", drop_then_die)
        with Upgrade.open(state) as up, pytest.raises(KeyboardInterrupt):
            up.finalize(drop_old=True)
    assert not connect(old.url).exists()
    copies = {name: tmp_path / f"{name}.sqlite" for name in ("finalize", "reembed")}
    for path in copies.values():
        path.write_bytes(state.read_bytes())
    r = run("upgrade", "reembed", "--state", copies["reembed"])          # never on a half-finalized upgrade
    assert r.exit_code == 3 and "finalize --drop-old --yes" in r.output, r.output
    r = run("upgrade", "status", "--state", state, "--json")              # the drop is done: status records it
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["stage"] == "finalized" and "old collection" in out["dropped"] and not out["dropping"]
    r = run("upgrade", "finalize", "--state", copies["finalize"], "--drop-old", "--yes", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["stage"] == "finalized" and "old collection" in out["dropped"] and not out["dropping"]
    r = run("upgrade", "finalize", "--state", copies["finalize"], "--drop-old", "--yes")
    assert r.exit_code == 3 and "already" in r.output, r.output


# --- M: a rerun of an interrupted start reuses the collection it made, and replaces one it was asked to ---------
def test_rerun_of_a_start_reuses_its_own_target_and_replaces_an_overwritten_one(tmp_path, sample, monkeypatch):
    old = _old(tmp_path, sample)
    drops = []
    coll_type = type(connect(old.url))
    real_drop = coll_type.drop
    monkeypatch.setattr(coll_type, "drop", lambda self: (drops.append(self.display_url), real_drop(self))[1])

    def stopped_at(point):
        def fault(name):
            if name == point:
                raise KeyboardInterrupt
        return fault

    for name, existing in (("own", False), ("replaced", True)):
        to = f"file://{tmp_path}/{name}"
        if existing:
            write_collection(to, ["x", "y"], np.ones((2, 768)), [{}, {}])
        args = dict(model=MODEL, text_field="text", state_path=tmp_path / f"{name}.sqlite", to=to, fit_sample=500,
                    overwrite=existing)
        point = "upgrade-start.mapped" if not existing else "upgrade-start.fitted"
        with monkeypatch.context() as m:
            m.setattr(starting, "fault_point", stopped_at(point))
            with pytest.raises(KeyboardInterrupt):
                upgrade_job.start(old.url, **args)
        drops.clear()
        status = upgrade_job.start(old.url, **args)
        assert status["counts"] == {"mapped": 1000, "native": 500, "pending": 0, "no-text": 0}
        assert connect(to).info().count == len(sample.ids) and not connect(to).get(["x"]).ids
        assert bool(drops) == existing, (name, drops)   # its own target kept; the replaced one dropped


# --- N: a damaged state is refused in one line, naming the file ----------------------------------------------------
@pytest.mark.parametrize("doc", ['{"stage": "mapped"}', '{"source": "file:///x", "stage": 3, "serving": "old", '
                                 '"model": "m", "text_field": "t", "alignment": "", "target": "file:///y"}',
                                 '{"source": "file:///x", "stage": "mapped", "serving": "old", "model": "m", '
                                 '"text_field": "t", "alignment": ""}', '"a string"', 'null'])
def test_a_state_whose_document_lacks_what_it_needs_is_refused(tmp_path, doc):
    import sqlite3

    path = tmp_path / "s.upgrade.sqlite"
    UpgradeState.create(path, {"source": "file:///x", "stage": "mapped", "serving": "old", "model": "m",
                               "text_field": "t", "alignment": "", "target": "file:///y"}).close()
    UpgradeState.open(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET doc = ?", (doc,))
    db.close()
    with pytest.raises(InputError, match=str(path)):
        UpgradeState.open(path)
    r = run("upgrade", "status", "--state", path)
    assert r.exit_code == 3 and str(path) in " ".join(r.output.split()) and "Traceback" not in r.output, r.output


# --- O: a state file of an earlier version (stamps in the file) is carried over into the store, once -----------------
def test_a_state_file_with_its_stamps_in_it_is_carried_over_into_the_store(tmp_path, sample):
    import sqlite3

    old = _old(tmp_path, sample, n=200)
    state = tmp_path / "up.sqlite"
    upgrade_job.start(old.url, model=MODEL, text_field="text", state_path=state, to=f"file://{tmp_path}/new",
                      fit_sample=50)
    new = connect(f"file://{tmp_path}/new")
    with Upgrade.open(state) as up:
        before = up.records.of(sample.ids[:200])
    # what an earlier version left: the store's records without stamps, one row per record in the state file
    rows = new.get(sample.ids[:200])
    new.upsert(rows.with_stamps(None))
    assert new.stamps_of(sample.ids[:200]) == {}
    db = sqlite3.connect(state)
    db.execute("CREATE TABLE records (id TEXT PRIMARY KEY, origin TEXT NOT NULL, made_by TEXT NOT NULL, updated REAL "
               "NOT NULL, shuffle INTEGER NOT NULL, residual REAL, hubness REAL, query_hits REAL, digest TEXT)")
    db.executemany("INSERT INTO records VALUES (?, ?, ?, 0, 0, ?, ?, NULL, ?)",
                   [(json.dumps(i), s["origin"], s["made_by"], s.get("residual"), s.get("hubness"), s["digest"])
                    for i, s in before.items()])
    db.commit()
    db.close()
    with Upgrade.open(state) as up:
        after = up.records.of(sample.ids[:200])
        assert after == before, "every stamp back in the store as it was"
        assert up.state.has_legacy_rows() is False
        assert any(e["stage"] == "carried-over" for e in up.status()["events"])
        assert up.status()["counts"] == {"mapped": 150, "native": 50, "pending": 0, "no-text": 0}


# --- P: before any tuning, searches with old-model queries serve what the application had ---------------------------
def test_untuned_search_serves_the_old_model_until_cutover_then_the_new_one(tmp_path, sample):
    """Fusion with untuned weights measured below staying on most model pairs, so until `tune` has run a search with
    old-model queries answers exactly as staying on the old model does; after cutover, as the new model alone;
    `status` says it is not tuned. Tuned weights are used as soon as there are some."""
    old = _old(tmp_path, sample, n=300)
    state = tmp_path / "up.sqlite"
    upgrade_job.start(old.url, model=MODEL, text_field="text", state_path=state, to=f"file://{tmp_path}/new",
                      fit_sample=100)
    q_new, q_old = sample.queries_new[:40], sample.queries_old[:40]
    with Upgrade.open(state) as up:
        assert up.status()["fusion_beta"].startswith("not tuned: the old model alone")
        ids, _ = up.search_vectors(q_new, 10, old_queries=q_old)
        staying, _ = up.source.search(q_old, 10)
        assert ids == [list(r) for r in staying], "before tuning, exactly what staying on the old model serves"
        up.reembed()
        up.cutover()
        assert up.status()["fusion_beta"].startswith("not tuned: the new model alone")
        ids, _ = up.search_vectors(q_new, 10, old_queries=q_old)
        new_only, _ = up.target.search(q_new, 10)
        assert ids == [list(r) for r in new_only], "after cutover, the new model alone"
        up.meta = up.state.update(fusion_beta=1.0, fusion_stays=False)
        fused, _ = up.search_vectors(q_new, 10, old_queries=q_old)
        assert fused != ids and up.status()["fusion_beta"] == 1.0, "tuned weights are used once there are some"
