"""Qdrant-specific behaviour and faults (``qdrant://`` via qdrant-client, ``qdrant-edge://`` via qdrant-edge-py).

No Qdrant server can be installed here: server-side errors (wrong credentials, a 503 that is retried) are produced by
a tiny local HTTP stub speaking Qdrant's REST error format, and the "killed in the middle of a scan" fault is tested
on the embedded Edge engine, whose owner process is killed with SIGKILL.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import InputError, StoreError

pytest.importorskip("qdrant_client")
from vecbridge.connectors import qdrant  # noqa: E402 - after the skip above

SECRET = "s3cr3t-key-never-shown"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mem_url() -> str:
    return f"qdrant://:memory:/t_{uuid.uuid4().hex[:10]}"


class _Stub:
    """A loopback HTTP server answering every request with the next scripted (status, JSON body)."""

    def __init__(self, replies):
        self.replies, self.seen = list(replies), []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self):
                stub.seen.append((self.command, self.path, self.headers.get("api-key")))
                status, body = stub.replies.pop(0) if len(stub.replies) > 1 else stub.replies[0]
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = _reply

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub(request):
    made = []

    def make(*replies):
        made.append(_Stub(replies))
        return made[-1]

    yield make
    for s in made:
        s.close()


# --- URLs -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("url, mode, location, name", [
    ("qdrant://localhost:6333/docs", "server", "localhost:6333", "docs"),
    ("qdrant://:memory:/docs", "memory", ":memory:", "docs"),
    ("qdrant:///data/qdrant/docs", "local", "/data/qdrant", "docs"),
    ("qdrant://./data/docs?vector=text", "local", "data", "docs"),
])
def test_url_forms(url, mode, location, name):
    coll = connect(url)
    assert (coll.mode, coll.name) == (mode, name)
    assert coll.location == location or coll.location.endswith(location)


@pytest.mark.parametrize("url", ["qdrant://localhost:6333/", "qdrant://localhost/a/b", "qdrant:///docs",
                                 "qdrant://:memory:/"])
def test_bad_urls_are_input_errors(url):
    with pytest.raises(InputError):
        connect(url)


# --- server faults (no server here: a closed port, and a stub speaking Qdrant's REST errors) --------------------------
@pytest.mark.parametrize("query", ["", "?grpc=1"])
def test_unreachable_host_fails_fast_with_a_clear_error(query):
    url = f"qdrant://127.0.0.1:{_free_port()}/docs{query}{'&' if query else '?'}api_key={SECRET}"
    coll = connect(url)   # the client is imported and built outside the timed call: only the failure is timed
    start = time.monotonic()
    with pytest.raises(StoreError, match="cannot reach Qdrant") as err:
        coll.info()
    assert time.monotonic() - start < 5
    assert SECRET not in str(err.value) and "127.0.0.1" in str(err.value)


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_wrong_credentials_are_a_store_error_without_the_secret(stub, monkeypatch):
    server = stub((403, {"status": {"error": "Invalid api-key"}, "time": 0}))
    monkeypatch.setenv("QDRANT_API_KEY", SECRET)
    with pytest.raises(StoreError, match="refused the credentials") as err:
        connect(f"qdrant://127.0.0.1:{server.port}/docs?https=0").info()
    assert SECRET not in str(err.value)
    assert server.seen[0][2] == SECRET  # the key from the environment was sent, as a header


def test_transient_server_errors_are_retried(stub):
    server = stub((503, {"status": {"error": "busy"}}), (200, {"result": {"exists": True}, "status": "ok", "time": 0}))
    assert connect(f"qdrant://127.0.0.1:{server.port}/docs").exists()
    assert len(server.seen) == 2


def test_missing_collection_on_a_server(stub):
    server = stub((404, {"status": {"error": "Not found: Collection `docs` doesn't exist!"}, "time": 0}))
    with pytest.raises(StoreError, match="collection not found: qdrant://127.0.0.1"):
        connect(f"qdrant://127.0.0.1:{server.port}/docs").info()


# --- ids, named vectors, metrics (both connectors) --------------------------------------------------------------------
@pytest.fixture(params=["qdrant", "qdrant-edge"])
def url(request, tmp_path):
    if request.param == "qdrant":
        return _mem_url()
    pytest.importorskip("qdrant_edge")
    return f"qdrant-edge://{tmp_path / 'shard'}"


IDS = [0, 7, 2 ** 63, -3, "doc-1", str(uuid.uuid4()), "ÄÖ ü"]


def test_ids_round_trip(url):
    coll = connect(url).create(dim=4, metric="dot")
    coll.upsert(VectorBatch(IDS, np.arange(28, dtype=np.float32).reshape(7, 4), [{"i": i} for i in range(7)]))
    got = coll.get(IDS[::-1])
    assert got.ids == IDS[::-1] and [p["i"] for p in got.payloads] == list(range(7))[::-1]
    assert sorted(map(str, (i for b in coll.scan(batch_size=3) for i in b.ids))) == sorted(map(str, IDS))
    with pytest.raises(InputError):
        coll.upsert(VectorBatch([-2 ** 64], np.ones((1, 4))))


def test_point_ids_are_native_where_qdrant_allows_and_stable_uuid5_elsewhere():
    from vecbridge.connectors.qdrant_points import original_id, point_id

    uid = "0b8f1c2e-3d4a-4b5c-8d6e-7f8091a2b3c4"
    assert point_id(7) == (7, False) and point_id(uid) == (uid, False)
    pid, keep = point_id("doc-7")
    assert keep and pid == point_id("doc-7")[0] and pid != point_id("doc-8")[0]
    assert point_id(-3)[1] and point_id(-3)[0] != point_id("-3")[0]      # int -3 and string "-3" stay distinct
    payload = {"_vb_id": "doc-7", "x": 1}
    assert original_id(pid, payload) == "doc-7" and payload == {"x": 1}
    with pytest.raises(InputError):
        point_id(1.5)


def test_wrong_dimension_is_refused_before_writing(url):
    coll = connect(url).create(dim=4)
    with pytest.raises(InputError, match="dimension"):
        coll.upsert(VectorBatch(["a", "b"], np.ones((2, 5))))
    assert coll.info().count == 0


def test_add_vector_field_keeps_the_other_vectors(url):
    coll = connect(url).create(dim=4, metric="l2")
    old = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    ids = [f"r{i}" for i in range(20)]
    coll.upsert(VectorBatch(ids, old, [{"n": i} for i in range(20)]))
    coll.add_vector_field("new", 3, "dot")
    info = coll.info()
    assert info.vector_fields == {"": (4, "l2"), "new": (3, "dot")} and info.count == 20
    new = connect(url + "?vector=new")
    assert (new.info().dim, new.info().metric, new.info().count) == (3, "dot", 0)
    new.upsert(VectorBatch(ids[:10], np.ones((10, 3)), [{"n": i} for i in range(10)]))
    assert new.info().count == 10 and sorted(i for b in new.scan() for i in b.ids) == sorted(ids[:10])
    np.testing.assert_allclose(coll.get(ids).vectors, old, atol=1e-6)  # the first vector survived the upsert
    found, scores = new.search(np.ones((1, 3)), k=5)
    assert len(found[0]) == 5 and np.allclose(scores, 3.0)


def test_field_view_writes_only_its_vector_and_keeps_payloads(url):
    """``with_vector_field``: a view of the same collection on one named vector; its upserts set that vector only
    (other vectors bit-exact, payloads of existing points untouched) and never create a point (one the application
    deleted meanwhile stays deleted)."""
    coll = connect(url).create(dim=4, metric="l2")
    old = np.random.default_rng(1).normal(size=(12, 4)).astype(np.float32)
    ids = [f"r{i}" for i in range(10)] + [5, str(uuid.UUID(int=9))]
    payloads = [{"n": i, "tag": "orig"} for i in range(12)]
    coll.upsert(VectorBatch(ids, old, payloads))
    view = coll.with_vector_field("v2")  # before the field exists: the view reads nothing yet
    coll.add_vector_field("v2", 3, "dot")
    assert view.info().count == 0 and view.info().dim == 3
    new = np.random.default_rng(2).normal(size=(12, 3)).astype(np.float32)
    assert view.upsert(VectorBatch(ids, new, [{"other": True}] * 12)) == 12  # payloads given here not written
    assert view.upsert(VectorBatch(["fresh"], np.ones((1, 3)), [{"only": "v2"}])) == 0  # no such point: none made
    assert view.info().count == 12 and coll.info().count == 12
    got_old = coll.get(ids)
    assert got_old.ids == ids and got_old.payloads == payloads
    np.testing.assert_array_equal(got_old.vectors, old)  # the original vectors, bit-exact
    got_new = view.get(ids + ["fresh"])
    assert got_new.ids == ids and got_new.payloads == payloads
    np.testing.assert_array_equal(got_new.vectors, new)
    assert sorted(map(str, (i for b in view.scan(batch_size=5) for i in b.ids))) == sorted(map(str, ids))
    found, _ = view.search(new[:1], k=20)
    assert sorted(map(str, found[0])) == sorted(map(str, ids))  # every point of the field, no other
    same = connect(url + "?vector=v2")  # the URL form names the same field
    assert same.info().count == 12
    assert "vector=v2" in view.display_url


def test_in_place_field_migration_on_local_qdrant(tmp_path, sample):
    """End to end through the CLI: ``migrate qdrant:///DIR/coll --field NAME`` on a local-mode directory with a real
    fitted alignment fills the new field and leaves the original vectors, payloads and count as they were."""
    from click.testing import CliRunner

    from vecbridge.align import Alignment, OrthogonalProcrustes
    from vecbridge.cli import main
    from vecbridge.jobs import verify

    n = 300
    url = f"qdrant://{tmp_path}/q/coll"
    coll = connect(url).create(dim=sample.docs_old.shape[1], metric="cosine")
    payloads = [{"text": it["doc"]} for it in sample.items[:n]]
    coll.upsert(VectorBatch(sample.ids[:n], sample.docs_old[:n], payloads))
    before = {i: (v, p) for b in coll.scan(100) for i, v, p in zip(b.ids, b.vectors, b.payloads)}
    est = OrthogonalProcrustes().fit(sample.docs_old[:1000], sample.docs_new[:1000])
    align = Alignment.from_estimator(est).save(tmp_path / "a.vb")
    r = CliRunner().invoke(main, ["migrate", url, "--alignment", str(align), "--field", "emb_new", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["written"] == n
    info = connect(url).info()
    assert info.count == n and set(info.vector_fields) == {"", "emb_new"}
    after = {i: (v, p) for b in connect(url).scan(100) for i, v, p in zip(b.ids, b.vectors, b.payloads)}
    assert after.keys() == before.keys()
    for i, (v, p) in before.items():
        np.testing.assert_array_equal(after[i][0], v)  # original vectors bit-exact
        assert after[i][1] == p                       # payloads unchanged
    field = connect(url).with_vector_field("emb_new")
    assert field.info().count == n
    got = field.get(sample.ids[:n])
    expected = est.transform(sample.docs_old[:n].astype(np.float64))
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)  # Qdrant normalises cosine vectors on insert
    np.testing.assert_allclose(got.vectors, expected, atol=1e-5)
    assert got.payloads == payloads
    assert verify(url, url, align, field="emb_new")["ok"]


def test_several_named_vectors_need_a_choice(url):
    connect(url + "?vector=a").create(dim=4)
    connect(url).add_vector_field("b", 2)
    with pytest.raises(StoreError, match=r"\?vector=NAME"):
        connect(url).info()
    with pytest.raises(StoreError, match="no dense vector named 'c'"):
        connect(url + "?vector=c").info()
    assert connect(url + "?vector=b").info().dim == 2


def test_search_with_k_larger_than_the_collection(url):
    coll = connect(url).create(dim=4, metric="l2")
    coll.upsert(VectorBatch(["a", "b"], np.eye(2, 4)))
    found, scores = coll.search(np.eye(1, 4), k=10)
    assert found == [["a", "b"]] and scores.shape == (1, 2)
    np.testing.assert_allclose(scores[0], [0.0, -np.sqrt(2)], atol=1e-6)


def test_unsupported_manhattan_metric_is_refused():
    url = _mem_url()
    coll = connect(url)
    client = coll._client()
    client.create_collection(coll.name, vectors_config=qdrant.models.VectorParams(
        size=4, distance=qdrant.models.Distance.MANHATTAN))
    with pytest.raises(StoreError, match="(?i)manhattan"):
        coll.info()


# --- local directory mode ---------------------------------------------------------------------------------------------
def _python(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, **kwargs)


def test_local_directory_persists_and_is_locked_by_its_owner(tmp_path):
    url = f"qdrant://{tmp_path}/store/docs"
    assert not connect(url).exists() and not tmp_path.joinpath("store").exists()  # a read creates nothing
    write = _python(f"""
        import numpy as np
        from vecbridge.connectors import VectorBatch, connect
        coll = connect({url!r}).create(dim=8, metric="l2")
        coll.upsert(VectorBatch([f"d{{i}}" for i in range(50)], np.ones((50, 8)), [{{"i": i}} for i in range(50)]))
    """)
    assert write.returncode == 0, write.stderr
    coll = connect(url)
    assert (coll.info().count, coll.info().metric) == (50, "l2")
    assert coll.get(["d7"]).payloads == [{"i": 7}]
    other = _python(f"from vecbridge.connectors import connect; connect({url!r}).info()")
    assert other.returncode != 0 and "in use by another process" in other.stderr


# --- an embedded engine killed in the middle of a scan ---------------------------------------------------------------
def test_edge_scan_resumes_after_the_owner_process_is_killed(tmp_path):
    pytest.importorskip("qdrant_edge")
    url = f"qdrant-edge://{tmp_path / 'shard'}"
    ids = [f"id-{i:04d}" for i in range(1050)]
    writer = _python(f"""
        import numpy as np
        from vecbridge.connectors import VectorBatch, connect
        coll = connect({url!r}).create(dim=8)
        coll.upsert(VectorBatch({ids!r}, np.random.default_rng(0).normal(size=(1050, 8))))
        seen = []
        for n, batch in enumerate(coll.scan(batch_size=100)):
            seen.extend(batch.ids)
            print(__import__("json").dumps({{"cursor": batch.cursor, "ids": seen}}), flush=True)
            if n == 2:
                __import__("os").kill(__import__("os").getpid(), 9)  # dies holding the shard, nothing flushed
    """)
    assert writer.returncode == -9, writer.stderr
    last = json.loads(writer.stdout.strip().splitlines()[-1])
    rest = [i for batch in connect(url).scan(batch_size=100, after=last["cursor"]) for i in batch.ids]
    assert len(last["ids"]) == 300 and len(rest) == 750
    assert sorted(last["ids"] + rest) == sorted(ids)


def test_edge_shard_is_locked_by_its_owner(tmp_path):
    pytest.importorskip("qdrant_edge")
    url = f"qdrant-edge://{tmp_path / 'shard'}"
    connect(url).create(dim=4)
    other = _python(f"from vecbridge.connectors import connect; connect({url!r}).info()")
    assert other.returncode != 0 and "open in another process" in other.stderr


def test_edge_refuses_a_directory_that_is_not_a_shard(tmp_path):
    pytest.importorskip("qdrant_edge")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("mine")
    url = f"qdrant-edge://{tmp_path / 'data'}"
    with pytest.raises(StoreError, match="not an empty directory"):
        connect(url).create(dim=4)
    with pytest.raises(StoreError, match="collection not found"):
        connect(url).drop()
    assert (tmp_path / "data" / "notes.txt").exists()


def test_a_collection_created_with_a_named_vector_takes_upserts(tmp_path):
    """``?vector=NAME`` on a new collection creates the named vector, and writes through the same URL fill it."""
    url = f"qdrant://{tmp_path}/q/docs?vector=old"
    coll = connect(url).create(dim=4)
    coll.upsert(VectorBatch(["a", "b"], np.eye(2, 4, dtype=np.float32)))
    assert coll.info().vector_fields == {"old": (4, "cosine")} and coll.info().count == 2
    np.testing.assert_allclose(connect(url).get(["b"]).vectors, np.eye(2, 4)[1:], atol=1e-6)
