"""Chroma beyond the shared contract: faults, how payloads map onto metadata and documents, URL forms.

The open-source Chroma server has no authentication, so there is no wrong-credentials test here.
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from tests.connectors.engines import chroma_server
from tests.connectors.faults import assert_scan_resumes_after_kill
from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import InputError, StoreError

if chroma_server.unavailable():
    if os.environ.get("VECBRIDGE_REQUIRE_ENGINES"):
        pytest.fail(f"engine chroma is required but unavailable: {chroma_server.unavailable()}", pytrace=False)
    pytest.skip(f"engine chroma unavailable: {chroma_server.unavailable()}", allow_module_level=True)

import chromadb  # noqa: E402
from chromadb.config import Settings  # noqa: E402


def _batch(n: int, dim: int, start: int = 0) -> VectorBatch:
    rng = np.random.default_rng(start)
    return VectorBatch([f"id-{i:05d}" for i in range(start, start + n)],
                       rng.normal(size=(n, dim)).astype(np.float32), [{"n": i} for i in range(start, start + n)])


def test_unreachable_server_fails_fast():
    port = chroma_server.free_port()  # nothing listens there
    coll = connect(f"chroma://127.0.0.1:{port}/docs")   # built outside the timed call: only the failure is timed
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot connect") as err:
        coll.info()
    assert time.monotonic() - started < 6
    assert f"127.0.0.1:{port}" in str(err.value) and "\n" not in str(err.value)


def test_wrong_dimension_is_refused_and_nothing_is_written(tmp_path):
    coll = connect(f"chroma://{tmp_path}/vectors").create(dim=8)
    with pytest.raises(InputError, match="dimension"):
        coll.upsert(_batch(3, 9))
    assert coll.info().count == 0


def test_missing_directory_is_not_found_and_not_created(tmp_path):
    coll = connect(f"chroma://{tmp_path}/nothing-here/vectors")
    assert not coll.exists()
    with pytest.raises(StoreError, match="not found"):
        coll.info()
    assert not (tmp_path / "nothing-here").exists()


def test_url_forms_name_the_same_collection(tmp_path, monkeypatch):
    connect(f"chroma://{tmp_path}/db/vectors").create(dim=4, metric="dot")
    assert connect(f"chroma://{tmp_path}/db?collection=vectors").info().metric == "dot"
    monkeypatch.chdir(tmp_path)
    assert connect("chroma://./db/vectors").info().dim == 4
    with pytest.raises(InputError, match="collection"):
        connect("chroma://localhost:8000/")


def test_payloads_documents_nested_values_and_int_ids_round_trip(tmp_path):
    coll = connect(f"chroma://{tmp_path}/vectors").create(dim=3)
    payloads = [{"document": "first text", "tags": ["a", "b"], "meta": {"x": [1, None]}, "none": None, "ok": True},
                {"n": 2, "document": 7, "_vb_json": "user value", "#odd": 1.5}]
    coll.upsert(VectorBatch([11, "eleven"], np.eye(2, 3), payloads))
    got = coll.get([11, "eleven", 12])
    assert got.ids == [11, "eleven"]
    assert got.payloads == payloads
    ids, _ = coll.search(np.eye(1, 3), k=1)
    assert ids == [[11]]
    # replaced whole: keys and the document the new payload lacks are gone
    coll.upsert(VectorBatch([11], np.eye(1, 3), [{"n": 1}]))
    assert coll.get([11]).payloads == [{"n": 1}]
    assert coll.info().count == 2


def test_collection_made_by_plain_chroma_is_read_as_it_is(tmp_path):
    client = chromadb.PersistentClient(path=str(tmp_path), settings=Settings(anonymized_telemetry=False))
    made = client.create_collection("theirs", embedding_function=None)  # Chroma's default space: l2
    made.add(ids=["a", "b"], embeddings=[[1.0, 0.0], [0.0, 2.0]], documents=["doc a", "doc b"],
             metadatas=[{"lang": "en"}, None])
    coll = connect(f"chroma://{tmp_path}/theirs")
    assert (coll.info().dim, coll.info().metric, coll.info().count) == (2, "l2", 2)
    assert coll.get(["b", "a"]).payloads == [{"document": "doc b"}, {"lang": "en", "document": "doc a"}]
    _, scores = coll.search([[0.0, 0.0]], k=2)
    np.testing.assert_allclose(scores, [[-1.0, -4.0]])  # negative squared distances


def test_server_killed_mid_scan_then_resume_after_restart(tmp_path):
    server = chroma_server.ChromaServer(tmp_path).start()
    try:
        url = server.url("killed")
        coll = connect(url).create(dim=8)
        for lo in range(0, 1500, 500):
            coll.upsert(_batch(500, 8, lo))
        err = assert_scan_resumes_after_kill(coll, kill=server.kill, restart=server.start, reopen=lambda: connect(url),
                                             batch_size=200, kill_after=3,
                                             expected_ids=[f"id-{i:05d}" for i in range(1500)])
        assert "cannot read records" in str(err)
    finally:
        server.stop()
