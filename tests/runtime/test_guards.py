"""What keeps a write job from damaging what it is given, on real stores: a checkpoint never lands on a collection's
files or the alignment, misspelled URL options are refused, a run stopped while its target was being created
resumes, a record too large for the store is named, a resumed merge counts the whole job, read-only embedded
sources are read, and duplicate source ids are named."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import collection_urls, flaky, write_collection
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.connectors import connect
from vecbridge.errors import InputError
from vecbridge.runtime.checkpoint import Checkpoint

N = 300


def alignment_file(sample, path):
    """An alignment fitted on the first N pairs of the sample (few pairs for 384 dimensions: fine for these tests)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = OrthogonalProcrustes().fit(sample.docs_old[:N], sample.docs_new[:N])
    return Alignment.from_estimator(est).save(path)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result, code, *words):
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.strip().splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    for word in words:
        assert word in lines[0], result.output
    return lines[0]


def importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@contextmanager
def immutable(path):
    """``path`` and everything in it read-only for this process, root included (``chattr -R +i``)."""
    if not shutil.which("chattr") or subprocess.run(["chattr", "-R", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("cannot make files read-only here (chattr +i refused)")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-R", "-i", str(path)], check=True)


@pytest.fixture
def small(tmp_path, sample):
    """A 300-record file-store source (old model), B (new model, the same ids) and an alignment."""
    src = write_collection(f"file://{tmp_path}/src", sample.ids[:N], sample.docs_old[:N],
                           [{"i": i} for i in range(N)])
    b = write_collection(f"file://{tmp_path}/b", sample.ids[:N], sample.docs_new[:N])
    align = alignment_file(sample, tmp_path / "align.vb")
    return {"src": src.url, "b": b.url, "align": align, "tmp": tmp_path}


# --- 1. the checkpoint path -------------------------------------------------------------------------------------------
def test_checkpoint_on_the_source_manifest_or_the_alignment_is_refused(small):
    tmp, align = small["tmp"], small["align"]
    manifest = tmp / "src" / "manifest.json"
    before = manifest.read_bytes(), align.read_bytes()
    r = run("migrate", small["src"], "--alignment", align, "--to", f"file://{tmp}/new", "--checkpoint", manifest,
            "--overwrite")
    one_line_error(r, 3, "inside the collection", "--checkpoint")
    r = run("migrate", small["src"], "--alignment", align, "--to", f"file://{tmp}/new", "--checkpoint", align)
    one_line_error(r, 3, "alignment file")
    notes = tmp / "notes.txt"
    notes.write_text("my notes")
    r = run("migrate", small["src"], "--alignment", align, "--to", f"file://{tmp}/new", "--checkpoint", notes)
    one_line_error(r, 3, "not a vecbridge checkpoint")
    r = run("merge", small["src"], small["b"], "--into", f"file://{tmp}/m", "--alignment", align, "--checkpoint",
            tmp / "b" / "ck.json")
    one_line_error(r, 3, "inside the collection", small["b"])
    r = run("migrate", small["src"], "--alignment", align, "--to", f"file://{tmp}/new", "--checkpoint",
            tmp / "new" / "ck.json")   # inside the target, which a --overwrite would remove with it
    one_line_error(r, 3, "inside the collection")
    assert (manifest.read_bytes(), align.read_bytes()) == before and notes.read_text() == "my notes"
    assert not (tmp / "new").exists() and not (tmp / "m").exists()
    assert connect(small["src"]).info().count == N


@pytest.mark.parametrize("store", ["qdrant-edge", "milvus-lite", "chroma", "qdrant-local"])
def test_checkpoint_inside_an_embedded_store_is_refused(tmp_path, sample, store):
    module = {"qdrant-edge": "qdrant_edge", "milvus-lite": "milvus_lite", "chroma": "chromadb",
              "qdrant-local": "qdrant_client"}[store]
    if not importable(module):
        pytest.skip(f"{module} is not installed")
    url, inside = {
        "qdrant-edge": (f"qdrant-edge://{tmp_path}/shard", tmp_path / "shard" / "ck.json"),
        "milvus-lite": (f"milvus://{tmp_path}/v.db/items", tmp_path / "v.db" / "ck.json"),
        "chroma": (f"chroma://{tmp_path}/ch/items", tmp_path / "ch" / "ck.json"),
        "qdrant-local": (f"qdrant://{tmp_path}/q/items", tmp_path / "q" / "ck.json"),
    }[store]
    write_collection(url, sample.ids[:50], sample.docs_old[:50])
    align = alignment_file(sample, tmp_path / "align.vb")
    r = run("migrate", url, "--alignment", align, "--to", f"file://{tmp_path}/new", "--checkpoint", inside)
    one_line_error(r, 3, "inside the collection", "--checkpoint")
    assert not inside.exists() and not (tmp_path / "new").exists()


def test_a_checkpoint_at_a_chosen_path_still_resumes(small):
    from vecbridge.jobs import migrate

    tmp = small["tmp"]
    ck = tmp / "elsewhere" / "run.json"
    with pytest.raises(ConnectionError):
        migrate(small["src"], small["align"], flaky(f"file://{tmp}/new", 2), batch_size=100, checkpoint_path=ck)
    assert Checkpoint.holds_one(ck)
    r = run("migrate", small["src"], "--alignment", small["align"], "--to", f"file://{tmp}/new", "--checkpoint", ck,
            "--resume")
    assert r.exit_code == 0, r.output
    assert connect(f"file://{tmp}/new").info().count == N and not ck.exists()


# --- 3. URL options ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["qdrant-edge://{tmp}/src?vectr=emb_new", "file://{tmp}/src?metrc=l2",
                                 "qdrant://{tmp}/q/docs?vectr=new", "milvus://{tmp}/v.db/docs?vectr=new",
                                 "chroma://{tmp}/ch/docs?tennant=x", "qdrant://localhost:6333/docs?grpcc=1"])
def test_unknown_url_options_are_refused(tmp_path, url):
    url = url.format(tmp=tmp_path)
    option = url.rsplit("?", 1)[1].split("=")[0]
    with pytest.raises(InputError, match=f"unknown option '{option}'.*know"):
        connect(url)
    r = run("info", url)
    one_line_error(r, 3, f"'{option}'")


def test_a_misspelled_vector_option_on_qdrant_edge_migrates_nothing(tmp_path, sample):
    if not importable("qdrant_edge"):
        pytest.skip("qdrant-edge-py is not installed")
    src = write_collection(f"qdrant-edge://{tmp_path}/src", sample.ids[:N], sample.docs_old[:N])
    align = alignment_file(sample, tmp_path / "align.vb")
    r = run("migrate", f"qdrant-edge://{tmp_path}/src?vectr=emb_new", "--alignment", align, "--to",
            f"qdrant-edge://{tmp_path}/dst")
    one_line_error(r, 3, "'vectr'", "vector")
    r = run("migrate", src.url, "--alignment", align, "--to", f"qdrant-edge://{tmp_path}/dst?vectr=emb_new")
    one_line_error(r, 3, "'vectr'")
    assert not (tmp_path / "dst").exists()


# --- 4. a target being created; a record too large --------------------------------------------------------------------
@pytest.fixture
def milvus_lite_url(tmp_path):
    if not (importable("milvus_lite") and importable("pymilvus")):
        pytest.skip("milvus-lite is not installed")
    return lambda name: f"milvus://{tmp_path}/{name}.db/{name}"


def test_ctrl_c_while_a_milvus_target_is_created_then_resume(small, milvus_lite_url, monkeypatch):
    from vecbridge.connectors.milvus import MilvusCollection

    real_create = MilvusCollection.create

    def interrupted(self, *args, **kwargs):
        real_create(self, *args, **kwargs)   # the collection is made, and then the user presses Ctrl-C
        raise KeyboardInterrupt

    target = milvus_lite_url("tgt")
    args = ["migrate", small["src"], "--alignment", small["align"], "--to", target]
    monkeypatch.setattr(MilvusCollection, "create", interrupted)
    r = run(*args)
    one_line_error(r, 130, "--resume")
    monkeypatch.setattr(MilvusCollection, "create", real_create)
    r = run(*args, "--resume")
    assert r.exit_code == 0, r.output
    assert connect(target).info().count == N


def test_merge_stopped_while_creating_its_target_resumes(small, monkeypatch):
    from vecbridge.connectors.file import FileCollection

    real_create = FileCollection.create

    def interrupted(self, *args, **kwargs):
        real_create(self, *args, **kwargs)
        raise KeyboardInterrupt

    args = ["merge", small["src"], small["b"], "--into", f"file://{small['tmp']}/m", "--alignment", small["align"]]
    monkeypatch.setattr(FileCollection, "create", interrupted)
    one_line_error(run(*args), 130, "--resume")
    monkeypatch.setattr(FileCollection, "create", real_create)
    r = run(*args, "--resume", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["count"] == N and json.loads(r.stdout)["linked"] == N


def test_kill_9_right_after_the_target_is_created_then_resume(small, milvus_lite_url):
    target = milvus_lite_url("killed")
    args = [sys.executable, "-m", "vecbridge.cli", "migrate", small["src"], "--alignment", str(small["align"]),
            "--to", target]
    env = {**os.environ, "VECBRIDGE_FAULT_AT": "migrate.target-created"}
    killed = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    env.pop("VECBRIDGE_FAULT_AT")
    resumed = subprocess.run(args + ["--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert connect(target).info().count == N


def test_a_record_too_large_for_milvus_is_named(tmp_path, sample, milvus_engine):
    """The server's JSON payload limit (64 KiB): the run stops with the record's id, and no target is left."""
    n = 2500
    payloads = [{"i": i} for i in range(n)]
    payloads[2100] = {"text": "x" * 70_000}
    src = write_collection(f"file://{tmp_path}/src", [f"r{i}" for i in range(n)], np.tile(sample.docs_old, (2, 1))[:n],
                           payloads)
    align = alignment_file(sample, tmp_path / "align.vb")
    target = collection_urls(milvus_engine, tmp_path)("big")
    r = run("migrate", src.url, "--alignment", align, "--to", target, "--batch-size", 1000)
    one_line_error(r, 3, "'r2100'", "too large", "65,536")
    assert not connect(target).exists()


def test_an_id_too_long_for_a_milvus_key_is_named(tmp_path, sample, milvus_lite_url):
    ids = [f"r{i}" for i in range(50)]
    ids[30] = "k" * 70_000
    src = write_collection(f"file://{tmp_path}/src", ids, sample.docs_old[:50])
    align = alignment_file(sample, tmp_path / "align.vb")
    target = milvus_lite_url("keys")
    line = one_line_error(run("migrate", src.url, "--alignment", align, "--to", target), 3, "too large", "kkk")
    assert len(line) < 400
    assert not connect(target).exists()


# --- 7. merge counts, read-only sources, duplicate ids ----------------------------------------------------------------
def test_a_resumed_merge_reports_every_linked_pair(small):
    from vecbridge.jobs import merge

    tmp = small["tmp"]
    with pytest.raises(ConnectionError):
        merge(small["src"], small["b"], flaky(f"file://{tmp}/m", 2), small["align"], batch_size=100)
    r = run("merge", small["src"], small["b"], "--into", f"file://{tmp}/m", "--alignment", small["align"],
            "--resume", "--json")
    assert r.exit_code == 0, r.output
    assert (json.loads(r.stdout)["linked"], json.loads(r.stdout)["count"]) == (N, N)


MAKE_STORES = """
import sys
import numpy as np
from vecbridge.connectors import VectorBatch, connect
rng = np.random.default_rng(0)
for url in sys.argv[1:]:
    connect(url).create(dim=8).upsert(VectorBatch([f"i{i}" for i in range(40)], rng.normal(size=(40, 8)), None))
"""


@pytest.mark.parametrize("store", ["milvus-lite", "qdrant-edge"])
def test_read_only_embedded_sources_are_migrated(tmp_path, store):
    module = {"milvus-lite": "milvus_lite", "qdrant-edge": "qdrant_edge"}[store]
    if not importable(module):
        pytest.skip(f"{module} is not installed")
    ro = tmp_path / "ro"
    ro.mkdir()
    url = {"milvus-lite": f"milvus://{ro}/v.db/items", "qdrant-edge": f"qdrant-edge://{ro}/shard"}[store]
    subprocess.run([sys.executable, "-c", MAKE_STORES, url], check=True, timeout=300)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 8))
    align = Alignment.from_estimator(OrthogonalProcrustes().fit(X, X)).save(tmp_path / "align.vb")
    listing = sorted(str(p.relative_to(ro)) for p in ro.rglob("*"))
    with immutable(ro):
        done = subprocess.run([sys.executable, "-m", "vecbridge.cli", "migrate", url, "--alignment", str(align),
                               "--to", f"file://{tmp_path}/out"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "cannot write" not in done.stderr
    assert connect(f"file://{tmp_path}/out").info().count == 40
    assert sorted(str(p.relative_to(ro)) for p in ro.rglob("*")) == listing


def test_duplicate_ids_in_a_source_table_are_named(tmp_path, sample, pg_engine):
    """A hand-made table without a primary key holds an id twice, in different batches: the count check names it."""
    import psycopg

    table = f"dups_{os.getpid()}"
    url = pg_engine.url(table)
    with psycopg.connect(url.split("?")[0]) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(f"CREATE TABLE {table} (id text, embedding vector(384), payload jsonb)")
        with conn.cursor() as cur:
            for i in range(N):
                vec = "[" + ",".join(f"{v:.6f}" for v in sample.docs_old[i]) + "]"
                cur.execute(f"INSERT INTO {table} VALUES (%s, %s, '{{}}')", ("dup" if i in (3, 250) else f"r{i}", vec))
    align = alignment_file(sample, tmp_path / "align.vb")
    r = run("migrate", url, "--alignment", align, "--to", f"file://{tmp_path}/new", "--batch-size", 100)
    line = one_line_error(r, 3, "duplicate id 'dup' in the source")
    assert "may have changed" not in line
