"""PostgreSQL + pgvector beyond the shared contract: auth, faults, several vector columns, integer and foreign keys.

All of it runs against one private server with password authentication (scram-sha-256), separate from the session
engine because one test kills it.
"""
from __future__ import annotations

import os
import time
import uuid

import numpy as np
import psycopg
import pytest

from tests.connectors.engines import pgvector as engine
from tests.connectors.faults import assert_scan_resumes_after_kill
from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import InputError, StoreError

PASSWORD = "pg-S3cret-" + uuid.uuid4().hex[:8]

if engine.unavailable():
    if os.environ.get("VECBRIDGE_REQUIRE_ENGINES"):
        pytest.fail(f"engine pgvector is required but unavailable: {engine.unavailable()}", pytrace=False)
    pytest.skip(f"engine pgvector unavailable: {engine.unavailable()}", allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = engine.PgServer(tmp_path_factory.mktemp("pg-private"), password=PASSWORD).start()
    yield srv
    srv.stop()


def _table() -> str:
    return f"t_{uuid.uuid4().hex[:10]}"


def _batch(n: int, dim: int, start: int = 0) -> VectorBatch:
    rng = np.random.default_rng(start)
    return VectorBatch([f"id-{i:05d}" for i in range(start, start + n)],
                       rng.normal(size=(n, dim)).astype(np.float32), [{"n": i} for i in range(start, start + n)])


def test_unreachable_host_fails_fast_with_the_redacted_url():
    port = engine.free_port()  # nothing listens there
    coll = connect(f"postgresql://postgres:hunter2@127.0.0.1:{port}/postgres?table=items")   # built outside the timer
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot connect") as err:
        coll.info()
    assert time.monotonic() - started < 5
    message = str(err.value)
    assert "hunter2" not in message and f"127.0.0.1:{port}" in message and "\n" not in message


def test_wrong_password_is_refused_without_echoing_it(server):
    with pytest.raises(StoreError, match="password authentication failed") as err:
        connect(server.url(_table(), password="not-the-" + PASSWORD)).exists()
    assert PASSWORD not in str(err.value) and "not-the-" not in str(err.value)


def test_password_from_pgpassword(server, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    coll = connect(server.url(_table())).create(dim=4)
    assert coll.info().count == 0
    coll.drop()


def test_wrong_dimension_is_refused_and_nothing_is_written(server):
    coll = connect(server.url(_table(), password=PASSWORD)).create(dim=8)
    with pytest.raises(InputError, match="dimension"):
        coll.upsert(_batch(3, 9))
    assert coll.info().count == 0
    coll.drop()


def test_a_payload_that_is_not_json_aborts_the_whole_batch(server):
    """Payloads are encoded chunk by chunk while the COPY streams: a bad one late in a large batch rolls it all back."""
    coll = connect(server.url(_table(), password=PASSWORD)).create(dim=4)
    n = 12_000                                   # more than two COPY chunks
    payloads = [{"i": i} for i in range(n)]
    payloads[-1] = {"bad": object()}
    with pytest.raises(InputError, match="JSON"):
        coll.upsert(VectorBatch([f"p{i}" for i in range(n)], np.ones((n, 4), np.float32), payloads))
    assert coll.info().count == 0
    coll.upsert(VectorBatch(["ok"], np.ones((1, 4), np.float32), [{"fine": 1}]))   # the connection still works
    assert coll.info().count == 1
    coll.drop()


def test_server_killed_mid_scan_then_resume_after_restart(server):
    url = server.url(_table(), password=PASSWORD)
    coll = connect(url).create(dim=16)
    for lo in range(0, 3000, 1000):
        coll.upsert(_batch(1000, 16, lo))
    assert_scan_resumes_after_kill(coll, kill=server.kill, restart=server.start, reopen=lambda: connect(url),
                                   batch_size=400, kill_after=3, expected_ids=[f"id-{i:05d}" for i in range(3000)],
                                   secret=PASSWORD)
    connect(url).drop()


def test_add_vector_field_and_write_it_through_a_view(server):
    url = server.url(_table(), password=PASSWORD)
    coll = connect(url).create(dim=8, metric="cosine")
    old = _batch(50, 8)
    coll.upsert(old)
    coll.add_vector_field("embedding_v2", dim=4, metric="l2")
    assert coll.info().vector_fields == {"embedding": (8, "cosine"), "embedding_v2": (4, "l2")}
    v2 = coll.with_vector_field("embedding_v2")
    assert "vector=embedding_v2" in v2.display_url
    assert (v2.info().dim, v2.info().metric, v2.info().count) == (4, "l2", 0)
    new = _batch(20, 4, start=0)
    v2.upsert(VectorBatch(new.ids, new.vectors, [{"replaced": True}] * 20))
    got = v2.get(new.ids)
    np.testing.assert_allclose(got.vectors, new.vectors)
    assert got.payloads == old.payloads[:20]  # a field view leaves payloads alone
    assert [b.ids for b in v2.scan(batch_size=100)] == [new.ids]  # rows without this vector are not in it
    np.testing.assert_allclose(coll.get(old.ids).vectors, old.vectors)  # the first field is untouched
    assert coll.info().count == 50
    ids, scores = v2.search(new.vectors[:1], k=3)
    assert ids[0][0] == new.ids[0] and scores.shape == (1, 3) and abs(scores[0, 0]) < 1e-5
    same = connect(url + "&vector=embedding_v2")  # the URL form names the same field
    assert same.info().count == 20
    with pytest.raises(StoreError, match="already exists"):
        coll.add_vector_field("embedding_v2", dim=4)
    coll.drop()


def test_integer_ids_round_trip_as_integers(server):
    coll = connect(server.url(_table(), password=PASSWORD) + "&id_type=bigint").create(dim=4, metric="l2")
    vectors = np.random.default_rng(1).normal(size=(30, 4)).astype(np.float32)
    coll.upsert(VectorBatch(list(range(100, 130)), vectors))
    batches = list(coll.scan(batch_size=7))
    assert [i for b in batches for i in b.ids] == list(range(100, 130))
    assert batches[0].cursor == 106
    assert coll.get([129, 5, 100]).ids == [129, 100]
    assert sorted(coll.sample(10, seed=3).ids) == sorted(set(coll.sample(10, seed=3).ids))
    with pytest.raises(InputError, match="integer"):
        coll.upsert(VectorBatch(["abc"], vectors[:1]))
    coll.drop()


def test_hand_made_table_reads_its_other_columns_as_payload(server):
    table = _table()
    url = server.url(table, password=PASSWORD) + "&vector=emb&id=doc_id"
    import psycopg

    with psycopg.connect(server.dsn(password=PASSWORD), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(f"CREATE TABLE {table} (doc_id uuid PRIMARY KEY, content text, emb vector(3))")
        conn.execute(f"CREATE INDEX ON {table} USING hnsw (emb vector_ip_ops)")
        conn.execute(f"INSERT INTO {table} VALUES ('00000000-0000-0000-0000-000000000001', 'hello', '[1,2,3]')")
    coll = connect(url)
    assert (coll.info().dim, coll.info().metric, coll.info().count) == (3, "dot", 1)
    batch = coll.get(["00000000-0000-0000-0000-000000000001"])
    assert batch.ids == ["00000000-0000-0000-0000-000000000001"]
    assert batch.payloads == [{"content": "hello"}]
    np.testing.assert_array_equal(batch.vectors, [[1, 2, 3]])
    coll.upsert(VectorBatch(batch.ids, [[3, 2, 1]], [{"ignored": True}]))
    assert coll.get(batch.ids).payloads == [{"content": "hello"}]
    coll.drop()


def test_url_without_table_is_an_input_error():
    with pytest.raises(InputError, match="table"):
        connect("postgresql://postgres@127.0.0.1:5432/postgres")


def test_a_second_writer_of_a_table_is_refused_by_the_server(server, monkeypatch, tmp_path):
    """The advisory lock lives in PostgreSQL, so it holds across machines: the local lock files are moved aside
    here to show that the server alone refuses the second writer (and names the first one's pid)."""
    from vecbridge.runtime.guard import exclusive_writer

    url = server.url(_table(), password=PASSWORD)
    first, second = connect(url), connect(url.replace("127.0.0.1", "localhost") + "&vector=other")
    with first.writer_lock():
        with pytest.raises(StoreError, match=rf"another run is writing this target \(pid {os.getpid()}\)") as exc:
            with second.writer_lock():
                pass
        assert PASSWORD not in str(exc.value)
        monkeypatch.setenv("VECBRIDGE_LOCK_DIR", str(tmp_path / "other-machine"))
        with pytest.raises(StoreError, match="another run is writing this target"):
            with exclusive_writer(second):
                pass
    with second.writer_lock():   # released with its session
        pass


def test_a_misspelled_url_option_is_bad_input_before_any_connection():
    with pytest.raises(InputError, match=r'"vectr".*own options: table, vector') as err:
        connect("postgresql://postgres:hunter2@127.0.0.1:1/postgres?table=items&vectr=emb")
    assert "hunter2" not in str(err.value) and "\n" not in str(err.value)
    connect("postgresql://postgres@127.0.0.1:1/postgres?table=items&sslmode=disable&connect_timeout=2")   # libpq's


def test_hnsw_search_returns_k_rows_past_the_default_candidate_list_across_reconnects(server):
    """pgvector's HNSW scan stops at ``hnsw.ef_search`` rows (40 by default): the connector raises it for the
    session, and a new session (a lost connection) gets it again."""
    url = server.url(_table(), password=PASSWORD)
    coll = connect(url).create(dim=16)   # with its HNSW index, maintained as rows land
    for lo in range(0, 5000, 2500):      # enough rows for the planner to take the index
        coll.upsert(_batch(2500, 16, lo))
    q = _batch(3, 16, 5000).vectors
    for k in (60, 10, 450):
        ids, scores = coll.search(q, k)
        assert [len(row) for row in ids] == [k] * 3
        assert np.all(np.diff(scores, axis=1) <= 1e-6)
    with pytest.raises(psycopg.OperationalError):   # the server ends this session (a restart, a failover)
        coll._connection().execute("SELECT pg_terminate_backend(pg_backend_pid())")
    ids, _ = coll.search(q, 450)
    assert [len(row) for row in ids] == [450] * 3
    connect(url).drop()
