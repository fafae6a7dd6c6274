"""Milvus-specific behaviour and faults: URL forms, ids the contract does not use, foreign schemas, unreachable
server, wrong credentials, and a server killed in the middle of a scan (private server, resumed after restart)."""
from __future__ import annotations

import importlib.util
import os
import time
import uuid

import numpy as np
import pytest

from .engines import milvus_lite, milvus_server


def _skip_unless(reason: str | None) -> None:
    """Skip when an engine is missing, or fail when CI requires every engine (as conftest does)."""
    if reason and os.environ.get("VECBRIDGE_REQUIRE_ENGINES"):
        pytest.fail(f"Milvus is required but unavailable: {reason}")
    if reason:
        pytest.skip(reason, allow_module_level=True)


_skip_unless(None if importlib.util.find_spec("pymilvus") else "pymilvus is not installed (pip install pymilvus)")

from tests.connectors.faults import assert_scan_resumes_after_kill  # noqa: E402
from vecbridge.connectors import VectorBatch, connect  # noqa: E402
from vecbridge.connectors.milvus import MilvusCollection  # noqa: E402
from vecbridge.errors import InputError, StoreError  # noqa: E402


def _batch(ids, dim, seed=0):
    vectors = np.random.default_rng(seed).normal(size=(len(ids), dim)).astype(np.float32)
    return VectorBatch(ids, vectors, [{"i": n, "nested": {"l": [1, True, None]}} for n in range(len(ids))])


# --- URL forms (no engine needed) -------------------------------------------------------------------------------
@pytest.mark.parametrize("url, path, name", [
    ("milvus:///data/v.db/items", "/data/v.db", "items"),
    ("milvus:///data/v.db?collection=items", "/data/v.db", "items"),
    ("milvus://./rel/v.db/items", "rel/v.db", "items"),
    ("milvus://rel/v.db/items", "rel/v.db", "items"),
])
def test_lite_url_forms(url, path, name):
    coll = MilvusCollection(url)
    assert (str(coll.lite_path), coll.name) == (path, name)


def test_server_url_forms_and_secrets(monkeypatch):
    monkeypatch.delenv("MILVUS_TOKEN", raising=False)
    coll = MilvusCollection("milvus://bob:s3cret@db.example:19531/items?db=prod&vector=emb")
    assert (coll.address, coll.name, coll.vector_name, coll.params["db"]) == \
        ("http://db.example:19531", "items", "emb", "prod")
    assert "s3cret" not in coll.display_url and "s3cret" not in repr(coll)
    assert MilvusCollection("milvus://localhost/items?secure=true").address == "https://localhost:19530"
    monkeypatch.setenv("MILVUS_TOKEN", "alice:pw")
    assert MilvusCollection("milvus://localhost/items")._token == "alice:pw"
    # a user without a password (a URL as a saved state keeps it) uses the token, not "alice:" with no password
    assert MilvusCollection("milvus://alice@localhost/items")._token == "alice:pw"
    with pytest.raises(InputError, match="no collection"):
        MilvusCollection("milvus://localhost:19530/")


def test_unreachable_server_fails_fast_with_one_line():
    url = f"milvus://root:hunter2@127.0.0.1:{milvus_server.free_port()}/items"
    coll = connect(url)   # the client is imported and built outside the timed call: only the failure is timed
    start = time.monotonic()
    with pytest.raises(StoreError) as err:
        coll.exists()
    assert time.monotonic() - start < 8
    message = str(err.value)
    assert "cannot connect" in message and "127.0.0.1" in message
    assert "hunter2" not in message and "\n" not in message


def test_missing_lite_file_is_not_created(tmp_path):
    coll = connect(f"milvus://{tmp_path}/absent.db/items")
    assert not coll.exists()
    with pytest.raises(StoreError, match="not found"):
        coll.info()
    assert not (tmp_path / "absent.db").exists()


def test_lite_access_problems_are_classified_by_the_file_system(tmp_path, monkeypatch):
    """Unit test of the classification (``_lite_access_problem``), with ``os.access`` monkeypatched to deny writes
    to one directory: the tests run as root, for whom ``chmod`` denies nothing."""
    from vecbridge.connectors import milvus

    ro = tmp_path / "ro"
    (ro / "data.db").mkdir(parents=True)                      # an existing Lite database (a data directory)
    (ro / "data.db" / "LOCK").write_bytes(b"")
    real_access = os.access
    monkeypatch.setattr(milvus.os, "access",
                        lambda p, mode, **kw: False if str(p).startswith(str(ro)) else real_access(p, mode, **kw))
    assert milvus._lite_access_problem(ro / "data.db") == f"cannot write {ro / 'data.db'}: permission denied"
    assert milvus._lite_access_problem(ro / "new.db") == f"cannot write {ro}: permission denied"  # to be created
    (tmp_path / "ok.db").mkdir()
    assert milvus._lite_access_problem(tmp_path / "ok.db") is None     # writable: the cause is elsewhere (a lock)
    assert milvus._lite_access_problem(tmp_path / "new.db") is None
    assert milvus._lite_access_problem(tmp_path / "no" / "new.db") == f"cannot write {tmp_path / 'no'}: " \
                                                                       f"no such directory"


def test_lite_in_an_unwritable_place_is_not_reported_as_a_lock(tmp_path):
    """A real Milvus Lite open that fails for a file-system reason. As root (the tests' usual user) ``chmod`` cannot
    make a directory unwritable, so the unwritable place is a path under a regular file (ENOTDIR); as another user
    a read-only (0o555) directory is tested too."""
    _skip_unless(milvus_lite.unavailable())
    (tmp_path / "afile").write_text("not a directory")
    with pytest.raises(StoreError) as err:
        connect(f"milvus://{tmp_path}/afile/x.db/items").create(dim=4)
    assert f"cannot write {tmp_path / 'afile'}: not a directory" in str(err.value)
    assert "one process" not in str(err.value)
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        try:
            with pytest.raises(StoreError, match=f"cannot write {ro}: permission denied") as err:
                connect(f"milvus://{ro}/x.db/items").create(dim=4)
            assert "one process" not in str(err.value)
        finally:
            ro.chmod(0o755)


def test_lite_database_open_in_another_process_says_so(tmp_path):
    """The lock case keeps its message: another process has the Lite database open."""
    _skip_unless(milvus_lite.unavailable())
    import subprocess
    import sys

    db = tmp_path / "held.db"
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from pymilvus import MilvusClient
MilvusClient({str(db)!r})
print("open", flush=True)
time.sleep(120)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(StoreError, match="one process at a time"):
            connect(f"milvus://{db}/items").create(dim=4)
    finally:
        holder.kill()
        holder.wait()


# --- a private server (with authorization on) and a Lite file -----------------------------------------------------
@pytest.fixture(scope="module")
def private_server(tmp_path_factory):
    _skip_unless(milvus_server.unavailable())
    server = milvus_server.MilvusServer(tmp_path_factory.mktemp("milvus_private"), auth=True,
                                        config=milvus_server.TEST_CONFIG).start()
    yield server
    server.stop()


@pytest.fixture(params=["server", "lite"])
def milvus_url(request, tmp_path):
    """Fresh collection URLs on the private server or in a Lite file (the session engines are left alone: switching
    pytest's session engine back and forth would restart the server)."""
    if request.param == "server":
        server = request.getfixturevalue("private_server")
        make = server.url
    else:
        _skip_unless(milvus_lite.unavailable())
        make = lambda name: f"milvus://{tmp_path}/lite.db/{name}"  # noqa: E731
    return lambda: make(f"c_{uuid.uuid4().hex[:12]}")


def test_string_ids_with_quotes_and_backslashes_scan_and_get(milvus_url):
    ids = ['plain', 'a"quote', "back\\slash", "back\\", 'uni-ça-😀', "new\nline", "x > 'y'", "z" * 300]
    coll = connect(milvus_url()).create(dim=4, metric="l2")
    coll.upsert(_batch(ids, 4))
    seen, cursor = [], None
    while True:  # one record per batch: every cursor is a tricky key
        batch = next(iter(coll.scan(batch_size=1, after=cursor)), None)
        if batch is None:
            break
        seen.extend(batch.ids)
        cursor = batch.cursor
    assert sorted(seen) == sorted(ids) and len(seen) == len(ids)
    got = coll.get(list(reversed(ids)))
    assert got.ids == list(reversed(ids))


def test_int_ids_round_trip_as_ints(milvus_url):
    coll = connect(milvus_url()).create(dim=4, metric="dot")
    coll.upsert(_batch([3, 1, 2], 4))
    assert sorted(i for b in coll.scan() for i in b.ids) == [1, 2, 3]
    got = coll.get([2, "2", 9])
    assert got.ids == [2, 2] and got.payloads[0] == {"i": 2, "nested": {"l": [1, True, None]}}
    ids, scores = coll.search(got.vectors[:1], k=10)
    assert ids[0][0] == 2 and scores.shape == (1, 3)  # fewer records than k: as many columns as hits
    url = milvus_url()
    native = connect(url + ("&" if "?" in url else "?") + "id_type=int").create(dim=4)
    native.upsert(_batch([30, -1, 2 ** 40], 4))
    first = next(iter(native.scan(batch_size=1)))
    assert first.ids == [-1] and first.cursor == -1
    assert [i for b in native.scan(after=first.cursor) for i in b.ids] == [30, 2 ** 40]
    with pytest.raises(InputError, match="64-bit integers"):
        native.upsert(_batch(["text"], 4))
    with pytest.raises(InputError, match="cursor"):
        next(iter(native.scan(after="text")))


def test_collection_made_by_another_tool_reads_fields_as_payload(milvus_url):
    from pymilvus import DataType, MilvusClient

    url = milvus_url()
    coll = connect(url)
    client = coll._client
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
    schema.add_field("pk", DataType.INT64, is_primary=True)
    schema.add_field("text", DataType.VARCHAR, max_length=100)
    schema.add_field("emb", DataType.FLOAT_VECTOR, dim=4)
    index = client.prepare_index_params()
    index.add_index(field_name="emb", index_type="HNSW", metric_type="IP", params={"M": 8, "efConstruction": 64})
    client.create_collection(coll.name, schema=schema, index_params=index, consistency_level="Strong")
    coll.upsert(VectorBatch([7], np.ones((1, 4)), [{"text": "hello", "lang": "en"}]))
    info = coll.info()
    assert (info.dim, info.metric, info.count, info.vector_fields) == (4, "dot", 1, {"emb": (4, "dot")})
    got = coll.get([7])
    assert got.ids == [7] and got.payloads == [{"text": "hello", "lang": "en"}]


def test_add_vector_field_is_not_supported(milvus_url):
    coll = connect(milvus_url()).create(dim=4)
    with pytest.raises(StoreError, match="not supported"):
        coll.add_vector_field("v2", 8)


# --- the private server: credentials, and a crash in the middle of a scan ---------------------------------------
def test_wrong_credentials_are_refused_without_echoing_them(private_server, monkeypatch):
    monkeypatch.delenv("MILVUS_TOKEN", raising=False)
    bad = f"milvus://root:NotThePassword@127.0.0.1:{private_server.port}/items"
    with pytest.raises(StoreError, match="authentication failed") as err:
        connect(bad).exists()
    assert "NotThePassword" not in str(err.value)
    with pytest.raises(StoreError, match="authentication failed"):
        connect(f"milvus://127.0.0.1:{private_server.port}/items").exists()
    monkeypatch.setenv("MILVUS_TOKEN", f"root:{milvus_server.ROOT_PASSWORD}")
    assert connect(f"milvus://127.0.0.1:{private_server.port}/items").exists() is False


def test_wrong_dimension_is_refused_by_the_server_connector(private_server):
    coll = connect(private_server.url("wrongdim")).create(dim=8)
    with pytest.raises(InputError, match="dimension"):
        coll.upsert(VectorBatch(["a"], np.ones((1, 7))))
    assert coll.info().count == 0


def test_server_killed_mid_scan_then_resumed_after_restart(private_server):
    coll = connect(private_server.url("crash", timeout="3")).create(dim=16)
    ids = [f"r{i:05d}" for i in range(3000)]
    coll.upsert(_batch(ids, 16))

    # the restart keeps the data directory but may move the port: the reconnection asks the server for its URL
    err = assert_scan_resumes_after_kill(coll, kill=private_server.kill, restart=private_server.start,
                                         reopen=lambda: connect(private_server.url("crash", timeout="3")),
                                         batch_size=500, kill_after=2, expected_ids=ids,
                                         secret=milvus_server.ROOT_PASSWORD)
    assert "127.0.0.1" in str(err)
