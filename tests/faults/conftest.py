"""What the fault-injection suite shares: the stores it runs on, the CLI in a subprocess, and exact snapshots.

Each job is run by the real CLI in a child process, killed with SIGKILL at a named point
(:mod:`vecbridge.faultpoint`, ``VECBRIDGE_FAULT_AT``), resumed, and its result compared bit for bit (ids, vectors
as bytes, payloads) with an uninterrupted run on the same store. The stores: the file store, PostgreSQL+pgvector
(one server for the session) and Qdrant Edge (embedded: a shard has one owning process, so this process closes
every shard it opened before a child runs).
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import numpy as np
import pytest

from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import VecbridgeError

ROOT = Path(__file__).resolve().parents[2]
MODEL = "tests.embedders:mpnet_lookup"   # the real all-mpnet-base-v2 vectors of the sample's texts
N = 240                                  # records per collection: four batches of 64
BATCH = 64
STORES = ("file", "pgvector", "qdrant_edge")


def release() -> None:
    """Close every Qdrant Edge shard this process holds, so that a child process can open it."""
    from vecbridge.connectors import qdrant_edge

    with qdrant_edge._SHARDS_LOCK:
        for shard in qdrant_edge._SHARDS.values():
            shard.flush()
            shard.close()
        qdrant_edge._SHARDS.clear()


class Store:
    """URLs of new collections on one store (each name made unique), and how the store keeps new vectors."""

    def __init__(self, kind: str, engine=None, root: Path | None = None):
        self.kind, self.engine, self.root = kind, engine, root

    def url(self, name: str) -> str:
        unique = f"{name}_{uuid.uuid4().hex[:8]}"
        return f"file://{self.root / unique}" if self.engine is None else self.engine.url(unique)

    @property
    def in_place(self) -> bool:
        """Whether an upgrade writes its new vectors into a new vector field of the source (named vectors)."""
        return self.kind != "file"

    def __repr__(self) -> str:
        return self.kind


@pytest.fixture(scope="session")
def scratch(tmp_path_factory) -> Path:
    """Where the suite's files go: memory (``/dev/shm``) where there is one, so that the many small syncs of the
    killed-and-resumed runs (checkpoints, state commits) do not dominate the suite's time."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        root = Path(tempfile.mkdtemp(prefix="vecbridge-faults-", dir=shm))
        yield root
        shutil.rmtree(root, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("faults")


@pytest.fixture
def work(scratch, request) -> Path:
    """A new folder for one test's files (state, checkpoints)."""
    return Path(tempfile.mkdtemp(prefix=request.node.name[:40].replace("/", "_") + "-", dir=scratch))


@pytest.fixture(scope="session", params=STORES)
def store(request, scratch):
    if request.param == "file":
        root = scratch / "files"
        root.mkdir()
        yield Store("file", root=root)
    elif request.param == "pgvector":
        yield Store("pgvector", request.getfixturevalue("pg_engine"))
    else:
        from tests.connectors.conftest import started_engine

        class InScratch:   # the shards in memory too
            @staticmethod
            def mktemp(name):
                (scratch / name).mkdir()
                return scratch / name

        for eng in started_engine("qdrant_edge", InScratch):
            yield Store("qdrant_edge", eng)
            release()


@pytest.fixture(scope="session")
def alignment_file(scratch, sample) -> Path:
    """The old model -> new model map of the sample (MiniLM 384-d -> MPNet 768-d)."""
    path = scratch / "a.vb"
    return Alignment.from_estimator(OrthogonalProcrustes().fit(sample.docs_old, sample.docs_new)).save(path)


def write(url: str, ids, vectors, payloads) -> str:
    """Create the collection ``url`` holding these records; returns the URL (the shard released)."""
    coll = connect(url).create(dim=vectors.shape[1])
    coll.upsert(VectorBatch(list(ids), np.asarray(vectors, dtype=np.float32), payloads))
    release()
    return url


def old_records(sample, lo: int = 0, hi: int = N):
    """Records ``lo..hi`` of the sample in the old model, each with its text (what an upgrade re-embeds)."""
    return (sample.ids[lo:hi], sample.docs_old[lo:hi],
            [{"text": it["doc"], "n": j, "tags": ["a", "é"]} for j, it in enumerate(sample.items[lo:hi], lo)])


def snapshot(url: str, field: str | None = None) -> dict:
    """Every record of the collection (or of its vector ``field``): id -> (vector bytes, payload as sorted JSON, its
    stamp as sorted JSON)."""
    coll = connect(url, read_only=True)
    if field is not None:
        coll = coll.with_vector_field(field)
    out = {}
    try:
        for batch in coll.scan(batch_size=500):
            for i, v, p, s in zip(batch.ids, batch.vectors, batch.payloads, batch.stamps or [None] * len(batch)):
                assert i not in out, f"{i!r} is held twice"
                out[i] = (np.asarray(v, dtype=np.float32).tobytes(), json.dumps(p, sort_keys=True),
                          json.dumps(s, sort_keys=True))
    finally:
        release()
    return out


def exists(url: str) -> bool:
    try:
        return connect(url, read_only=True).exists()
    finally:
        release()


def cli(*args, fault: str | None = None, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m vecbridge.cli ARGS`` in a child process (in the repository, so ``tests.embedders`` imports),
    killed with SIGKILL at the point ``fault`` (``NAME`` or ``NAME:N``)."""
    release()
    child_env = {k: v for k, v in os.environ.items() if k not in ("VECBRIDGE_FAULT_AT", "VECBRIDGE_DEBUG")}
    if fault:
        child_env["VECBRIDGE_FAULT_AT"] = fault
    child_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "vecbridge.cli", *map(str, args)], cwd=ROOT, env=child_env,
                          capture_output=True, text=True, timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr.strip()[-1500:]}"
    assert "Traceback" not in proc.stderr
    return proc


def killed(proc: subprocess.CompletedProcess) -> None:
    """The child died at its fault point by SIGKILL (not by an error, and not by finishing first)."""
    assert proc.returncode == -9, (f"expected death by SIGKILL at the fault point, got exit {proc.returncode}: "
                                   f"{proc.stderr.strip()[-800:]}")


def state_of(path) -> dict:
    """What an upgrade's state file says, without the file's own paths and times: the stage, what is served, the
    records per origin and the hub reference (each record's stamp is in the store: see :func:`snapshot`)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        meta = json.loads(db.execute("SELECT doc FROM meta").fetchone()[0])
        reference = db.execute("SELECT rows, dim, data FROM reference").fetchall()
    finally:
        db.close()
    return {"stage": meta.get("stage"), "serving": meta.get("serving"), "dropped": bool(meta.get("dropped")),
            "via": (meta.get("serving_via") or "").split(" ")[0], "counts": meta.get("counts"),
            "reference": reference}


FIT = 120           # records re-embedded to fit the map (half the collection)
REEMBED_BATCH = 32  # the other 120 in four batches
FIELD = "v_new"
def _rows(url: str, field: str | None = None):
    """The collection's records, or what reading it raised (a dropped collection or field)."""
    try:
        return snapshot(url, field)
    except VecbridgeError as exc:
        return f"unreadable: {type(exc).__name__}"


class Up:
    """One upgrade of a new source collection: the new vectors in a new field of it (stores with named vectors)
    or in a new collection (the file store)."""

    def __init__(self, store, sample, work):
        self.src = write(store.url("src"), *old_records(sample))
        self.old_field = None if store.kind == "file" else ("embedding" if store.kind == "pgvector" else "")
        self.to = None if store.in_place else store.url("new")
        self.state = work / "u.upgrade.sqlite"
        self.old = self.old_rows()
        #: finalize drops the old vectors too, where the store can (a Qdrant Edge shard cannot drop a named vector)
        self.drop_old = store.kind != "qdrant_edge"

    def old_rows(self):
        return _rows(self.src, self.old_field)

    def start(self, fault: str | None = None):
        where = ["--field", FIELD] if self.to is None else ["--to", self.to]
        return cli("upgrade", "start", self.src, "--to-model", MODEL, "--fit-sample", FIT, "--state", self.state,
                   *where, fault=fault)

    def run(self, command: str, *args, fault: str | None = None):
        return cli("upgrade", command, "--state", self.state, *args, fault=fault)

    def reembed(self, fault: str | None = None):
        return self.run("reembed", "--batch-size", REEMBED_BATCH, fault=fault)

    def finalize(self, fault: str | None = None):
        return self.run("finalize", *(["--drop-old", "--yes"] if self.drop_old else []), fault=fault)

    def result(self) -> dict:
        """The new vectors (ids, bytes, payloads), the state file's stage and stamps, and the old vectors."""
        new = _rows(self.src, FIELD) if self.to is None else _rows(self.to)
        return {"new": new, "state": state_of(self.state), "old": self.old_rows()}
