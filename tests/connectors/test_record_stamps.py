"""Each record's own stamp (how its vector was made, in which space) kept in every real store, written in the same
upsert as the vector: read back by scan and get, kept apart from the user's payload, one per vector field, filtered
by origin, refused when malformed."""
from __future__ import annotations

import json

import numpy as np
import pytest

from vecbridge.connectors import VectorBatch, base, connect
from vecbridge.connectors.base import RECORD_STAMP_BYTES, is_stamp_key, record_stamp_text, stamps_into_payloads
from vecbridge.errors import InputError

N, DIM = 30, 4


def stamp(i: int, origin: str) -> dict:
    return {"origin": origin, "made_by": "map 0123abcd", "space": "deadbeef" * 2, "digest": f"d{i:04d}",
            "residual": 0.25 + i / 100, "hubness": None}


def origin_of(i: int) -> str:
    return ("mapped", "native", "pending")[i % 3]


def _fill(url: str, stamped: bool = True):
    coll = connect(url).create(dim=DIM, metric="cosine")
    vectors = np.random.default_rng(1).normal(size=(N, DIM)).astype(np.float32)
    ids = [f"r{i:03d}" for i in range(N)]
    stamps = [stamp(i, origin_of(i)) if i % 5 else None for i in range(N)] if stamped else None
    coll.upsert(VectorBatch(ids, vectors, [{"n": i, "text": f"t{i}"} for i in range(N)], stamps=stamps))
    return coll, ids, vectors, stamps


def _scan_all(coll) -> VectorBatch:
    return VectorBatch.concat(list(coll.scan(batch_size=7)))


def test_declared(engine, new_url):
    assert connect(new_url()).capabilities.record_stamps, "every store we ship keeps record stamps somewhere"


def test_read_back_by_scan_and_get_apart_from_the_payload(engine, new_url):
    url = new_url()
    coll, ids, vectors, stamps = _fill(url)
    got = _scan_all(connect(url, read_only=True))
    by_id = dict(zip(got.ids, zip(got.payloads, got.stamps)))
    assert sorted(by_id) == ids
    for i, rid in enumerate(ids):
        payload, st = by_id[rid]
        assert payload == {"n": i, "text": f"t{i}"}, "the user's payload comes back without stamp keys"
        assert st == stamps[i], f"{rid}: stamp read back as written"
    picked = coll.get(["r007", "r000", "r014"])
    assert picked.ids == ["r007", "r000", "r014"]
    assert picked.stamps == [stamps[7], None, stamps[14]]
    assert all(not any(is_stamp_key(k) for k in p) for p in picked.payloads)
    assert coll.stamps_of(["r007", "r000", "nope"]) == {"r007": stamps[7]}


def test_a_replaced_record_without_a_stamp_has_none(engine, new_url):
    url = new_url()
    coll, ids, vectors, stamps = _fill(url)
    coll.upsert(VectorBatch(["r001"], vectors[1:2], [{"n": 1}]))
    assert coll.get(["r001"]).stamps == [None]
    coll.upsert(VectorBatch(["r002"], vectors[2:3], [{"n": 2}], stamps=[stamp(2, "native")]))
    assert coll.get(["r002"]).stamps == [stamp(2, "native")], "a new stamp replaces the old one"


def test_scan_stamps_filters_by_origin(engine, new_url):
    url = new_url()
    _fill(url)
    coll = connect(url, read_only=True)
    seen: dict = {}
    for batch_ids, batch_stamps in coll.scan_stamps(batch_size=4):
        assert len(batch_ids) == len(batch_stamps)
        seen.update(zip(batch_ids, batch_stamps))
    assert sorted(seen) == [f"r{i:03d}" for i in range(N) if i % 5], "every stamped record once, none unstamped"
    mapped = {i for ids_, _ in coll.scan_stamps(batch_size=4, origins=["mapped", "pending"]) for i in ids_}
    assert mapped == {f"r{i:03d}" for i in range(N) if i % 5 and origin_of(i) in ("mapped", "pending")}


def test_one_stamp_per_vector_field(engine, new_url):
    url = new_url()
    if not connect(url).capabilities.named_vectors:
        pytest.skip("the store has one vector field per collection")
    coll, ids, vectors, stamps = _fill(url)
    coll.add_vector_field("extra", 3)
    view = coll.with_vector_field("extra")
    new = np.random.default_rng(2).normal(size=(N, 3)).astype(np.float32)
    batch = coll.get(ids)
    view.upsert(VectorBatch(ids, new, batch.payloads, stamps=[stamp(i, "native") for i in range(N)]))
    assert view.get(["r005"]).stamps == [stamp(5, "native")], "the field's own stamp"
    assert coll.get(["r005"]).stamps == [None] and coll.get(["r006"]).stamps == [stamps[6]], \
        "the default field keeps its own"
    assert {i for ids_, _ in view.scan_stamps(origins=["native"]) for i in ids_} == set(ids)
    got = _scan_all(coll)
    assert all(not any(is_stamp_key(k) for k in p) for p in got.payloads), "no field's stamp leaks into payloads"
    assert dict(zip(got.ids, got.payloads))["r003"] == {"n": 3, "text": "t3"}


def test_malformed_stamps_are_refused_before_anything_is_written(engine, new_url):
    url = new_url()
    coll, ids, vectors, _ = _fill(url, stamped=False)
    for bad in ({"made_by": "x"}, {"origin": 3}, {"origin": "mapped", "blob": "x" * 5000},
                {"origin": "mapped", "v": float("nan")}):
        with pytest.raises(InputError):
            coll.upsert(VectorBatch(["new1", "new2"], vectors[:2], [{}, {}], stamps=[stamp(0, "mapped"), bad]))
        assert coll.get(["new1", "new2"]).ids == [], f"nothing written for {bad!r}"


# --- Qdrant (local mode and Edge): stamps are payload keys, a field view writes vector and stamp in one request ---
QDRANT_ENGINES = pytest.mark.engines("qdrant_local", "qdrant_edge")


def _writes(coll, monkeypatch) -> list:
    """What each client call of ``coll`` that writes is doing, in order (the calls still run)."""
    done: list = []
    call = coll._call

    def spy(what, fn, *args, **kwargs):
        if what.startswith(("writing", "deleting")):
            done.append(what)
        return call(what, fn, *args, **kwargs)

    monkeypatch.setattr(coll, "_call", spy)
    return done


@QDRANT_ENGINES
def test_qdrant_field_view_writes_vector_and_stamp_in_one_request(engine, new_url, monkeypatch):
    url = new_url()
    coll, ids, vectors, stamps = _fill(url)
    coll.add_vector_field("extra", 3)
    view = coll.with_vector_field("extra")
    writes = _writes(view, monkeypatch)
    new = np.random.default_rng(3).normal(size=(3, 3)).astype(np.float32)
    view.upsert(VectorBatch(["r001", "r002", "gone"], new, [{}, {}, {}],
                            stamps=[stamp(1, "native"), stamp(2, "mapped"), stamp(3, "native")]))
    assert writes == ["writing vectors"], "one request sets the vectors and their stamps"
    assert view.stamps_of(["r001", "r002", "gone"]) == {"r001": stamp(1, "native"), "r002": stamp(2, "mapped")}
    assert coll.get(["gone"]).ids == [] and view.get(["gone"]).ids == [], "a field view creates no point"
    assert coll.get(["r001", "r002"]).payloads == [{"n": 1, "text": "t1"}, {"n": 2, "text": "t2"}]
    assert coll.stamps_of(["r001", "r002"]) == {"r001": stamps[1], "r002": stamps[2]}


@QDRANT_ENGINES
def test_qdrant_stamps_of_each_vector_follow_their_vector(engine, new_url):
    url = new_url()
    coll, ids, vectors, stamps = _fill(url)
    coll.add_vector_field("extra", 3)
    view = coll.with_vector_field("extra")
    new = np.random.default_rng(4).normal(size=(3, 3)).astype(np.float32)
    view.upsert(VectorBatch(["r001", "r002", "r003"], new, [{}] * 3, stamps=[stamp(i, "native") for i in (1, 2, 3)]))
    view.upsert(VectorBatch(["r001"], new[:1] * 2, [{}]))
    assert view.stamps_of(["r001"]) == {"r001": stamp(1, "native")}, "an unstamped field update keeps the stamp"
    view.upsert(VectorBatch(["r002"], new[1:2] * 2, [{}], stamps=[None]))
    assert view.get(["r002"]).stamps == [None], "a stamped batch's None entry leaves the record unstamped"
    coll.upsert(VectorBatch(["r003"], vectors[3:4], [{"n": 33}], stamps=[stamp(3, "mapped")]))
    got = view.get(["r003"])
    assert got.stamps == [stamp(3, "native")] and got.payloads == [{"n": 33}], \
        "a whole point written through the default vector keeps the other vector and its stamp"
    assert coll.get(["r003"]).stamps == [stamp(3, "mapped")]
    assert sorted(i for ids_, _ in view.scan_stamps(origins=["native"]) for i in ids_) == ["r001", "r003"]


# --- Qdrant and Milvus: the stamp scan is the store's own filtered read, not a scan of the records ---------------
@pytest.mark.engines("qdrant_local", "qdrant_edge", "milvus_lite", "milvus_server")
def test_scan_stamps_and_stamps_of_read_no_records(engine, new_url, monkeypatch):
    url = new_url()
    _fill(url)
    coll = connect(url, read_only=True)
    for name in ("scan", "get", "sample"):
        monkeypatch.setattr(coll, name, lambda *a, **k: pytest.fail("read the records, vectors and all"))
    pages = list(coll.scan_stamps(batch_size=4, origins=["pending", "pending"]))
    assert all(0 < len(ids_) <= 4 for ids_, _ in pages)
    got = {i: s for ids_, stamps_ in pages for i, s in zip(ids_, stamps_)}
    assert got == {f"r{i:03d}": stamp(i, "pending") for i in range(N) if i % 5 and origin_of(i) == "pending"}
    assert list(coll.scan_stamps(origins=[])) == []
    assert coll.stamps_of(["r002", "r005", "r004"]) == {"r002": stamp(2, "pending"), "r004": stamp(4, "native")}


# --- Milvus: stamps live where the payload does (JSON field, else dynamic fields) ---------------------------------
MILVUS_ENGINES = pytest.mark.engines("milvus_lite", "milvus_server")


def _milvus_made_by_hand(url: str, *, dynamic: bool):
    """A collection another tool made: VARCHAR key ``pk``, vector ``emb``, a scalar ``text``, no JSON payload."""
    from pymilvus import DataType, MilvusClient

    coll = connect(url)
    client = coll._client
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=dynamic)
    schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=100)
    schema.add_field("text", DataType.VARCHAR, max_length=100)
    schema.add_field("emb", DataType.FLOAT_VECTOR, dim=DIM)
    index = client.prepare_index_params()
    index.add_index(field_name="emb", index_type="FLAT", metric_type="COSINE")
    client.create_collection(coll.name, schema=schema, index_params=index, consistency_level="Strong")
    return coll


@MILVUS_ENGINES
def test_milvus_dynamic_fields_keep_the_stamps(engine, new_url):
    url = new_url()
    coll = _milvus_made_by_hand(url, dynamic=True)
    vectors = np.random.default_rng(5).normal(size=(3, DIM)).astype(np.float32)
    coll.upsert(VectorBatch([7, "a", "b"], vectors, [{"text": "x", "lang": "en"}, {"text": "y"}, {"text": "z"}],
                            stamps=[stamp(7, "mapped"), None, stamp(9, "native")]))
    got = connect(url, read_only=True).get([7, "a", "b"])
    assert got.ids == [7, "a", "b"] and got.stamps == [stamp(7, "mapped"), None, stamp(9, "native")]
    assert got.payloads == [{"text": "x", "lang": "en"}, {"text": "y"}, {"text": "z"}]
    assert [(ids_, s) for ids_, s in coll.scan_stamps(origins=["mapped"])] == [([7], [stamp(7, "mapped")])]
    assert coll.stamps_of([7, "a", "b"]) == {7: stamp(7, "mapped"), "b": stamp(9, "native")}


@MILVUS_ENGINES
def test_milvus_without_a_payload_field_refuses_stamps_before_writing(engine, new_url):
    from vecbridge.errors import StoreError

    url = new_url()
    coll = _milvus_made_by_hand(url, dynamic=False)
    vectors = np.ones((2, DIM), dtype=np.float32)
    with pytest.raises(StoreError, match="cannot keep record stamps"):
        coll.upsert(VectorBatch(["a", "b"], vectors, [{"text": "x"}] * 2, stamps=[None, stamp(1, "mapped")]))
    assert coll.get(["a", "b"]).ids == []
    coll.upsert(VectorBatch(["a", "b"], vectors, [{"text": "x"}] * 2, stamps=[None, None]))
    assert coll.get(["a", "b"]).stamps == [None, None] and list(coll.scan_stamps()) == []


# --- PostgreSQL+pgvector and Chroma: filtered stamp reads, tables made before, hand-made tables ----------------------
@pytest.mark.engines("pgvector", "chroma_persistent", "chroma_server")
def test_pg_chroma_scan_stamps_and_stamps_of_read_no_records(engine, new_url, monkeypatch):
    """PostgreSQL filters on the origin column, Chroma on the origin key (``$in``), as Qdrant and Milvus do."""
    test_scan_stamps_and_stamps_of_read_no_records(engine, new_url, monkeypatch)


@pytest.mark.engines("pgvector", "chroma_persistent")
def test_pg_chroma_integer_ids_keep_their_type(engine, new_url):
    url = new_url() + ("&id_type=bigint" if engine.name == "pgvector" else "")
    coll = connect(url).create(dim=DIM)
    vectors = np.random.default_rng(5).normal(size=(5, DIM)).astype(np.float32)
    coll.upsert(VectorBatch([10, 11, 12, 13, 14], vectors, [{}] * 5,
                            stamps=[stamp(i, origin_of(i)) for i in range(5)]))
    assert coll.stamps_of([12, 99]) == {12: stamp(2, "pending")}
    assert [i for ids_, _ in coll.scan_stamps(batch_size=2) for i in ids_] == [10, 11, 12, 13, 14]
    assert [i for ids_, _ in coll.scan_stamps(batch_size=2, origins=["native"]) for i in ids_] == [11, 14]


@pytest.mark.engines("chroma_persistent")
def test_chroma_payload_stamp_keys_are_never_written_as_a_stamp(engine, new_url):
    """A payload that carries stamp keys of its own (made by hand, or read elsewhere) writes no stamp, and a record
    replaced without one loses the one it had."""
    url = new_url()
    coll, ids, vectors, stamps = _fill(url)
    forged = {"n": 1, "vecbridge_origin": "native", "vecbridge_stamp": '{"origin":"native"}'}
    coll.upsert(VectorBatch(["r001", "r002"], vectors[1:3], [forged, {"n": 2}]))
    assert coll.get(["r001", "r002"]).stamps == [None, None]
    assert coll.get(["r001"]).payloads == [{"n": 1}]
    assert coll.stamps_of(["r001", "r002", "r003"]) == {"r003": stamps[3]}


def _pg(engine):
    """A plain connection to the test server, the ``vector`` extension made."""
    import psycopg

    conn = psycopg.connect(engine.server.dsn(), autocommit=True)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return conn


def _pg_columns(engine, table: str) -> set:
    with _pg(engine) as conn:
        return {r[0] for r in conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND "
                                           "attnum > 0 AND NOT attisdropped", [table]).fetchall()}


PG_ENGINE = pytest.mark.engines("pgvector")


@PG_ENGINE
def test_pgvector_stamps_are_two_columns_with_an_index(engine, new_url):
    url = new_url()
    coll, ids, vectors, stamps = _fill(url)
    coll.add_vector_field("extra", 3)
    table = coll.table
    assert {"vecbridge_origin", "vecbridge_stamp", "vecbridge_origin__extra",
            "vecbridge_stamp__extra"} <= _pg_columns(engine, table)
    with _pg(engine) as conn:
        rows = dict(conn.execute(f"SELECT id, vecbridge_origin FROM {table} WHERE vecbridge_origin IS NOT NULL")
                    .fetchall())
        indexed = [r[0] for r in conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s",
                                              [table]).fetchall()]
    assert rows == {ids[i]: origin_of(i) for i in range(N) if i % 5}
    assert any("(vecbridge_origin)" in d for d in indexed) and any("(vecbridge_origin__extra)" in d for d in indexed)


@PG_ENGINE
def test_pgvector_a_table_made_before_gets_its_columns_on_the_first_stamped_upsert(engine, new_url, monkeypatch):
    import vecbridge.connectors.pgvector as pg

    url = new_url()
    table = url.rsplit("table=", 1)[1]
    with _pg(engine) as conn:   # the layout vecbridge made before record stamps
        conn.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, payload jsonb, embedding vector({DIM}))")
        conn.execute(f"INSERT INTO {table} VALUES ('a', '{{\"n\": 1}}', '[1,2,3,4]'), ('b', '{{}}', '[4,3,2,1]')")
    coll, replica, stale = connect(url), connect(url, read_only=True), connect(url)
    assert coll.get(["a", "b"]).stamps == [None, None] and list(coll.scan_stamps()) == []
    stale.info()   # a writer that read the table's columns before they were added
    assert replica.stamps_of(["a"]) == {}
    vectors = np.ones((2, DIM), np.float32)
    with pytest.raises(InputError):   # a payload that is not JSON: nothing of the batch, the columns neither
        coll.upsert(VectorBatch(["a", "c"], vectors, [{"x": object()}, {}], stamps=[stamp(1, "native"), None]))
    assert not any(is_stamp_key(c) for c in _pg_columns(engine, table))
    coll.upsert(VectorBatch(["a", "c"], vectors, [{"n": 1}, {"n": 3}], stamps=[stamp(1, "native"), None]))
    assert {"vecbridge_origin", "vecbridge_stamp"} <= _pg_columns(engine, table)
    got = coll.get(["a", "b", "c"])
    assert got.stamps == [stamp(1, "native"), None, None] and got.payloads == [{"n": 1}, {}, {"n": 3}]
    monkeypatch.setattr(pg, "_STAMP_RECHECK_S", 0.0)
    assert replica.stamps_of(["a", "b"]) == {"a": stamp(1, "native")}, "a handle opened before sees them"
    stale.upsert(VectorBatch(["a"], vectors[:1], [{"n": 1}]))
    assert coll.get(["a"]).stamps == [None], "a row replaced without a stamp has none, whatever the handle knew"


@PG_ENGINE
def test_pgvector_hand_made_table_never_shows_stamp_columns_as_payload(engine, new_url):
    url = new_url()
    table = url.rsplit("table=", 1)[1]
    keys = [f"00000000-0000-0000-0000-00000000000{i}" for i in range(1, 6)]
    with _pg(engine) as conn:
        conn.execute(f"CREATE TABLE {table} (doc_id uuid PRIMARY KEY, content text, emb vector(3))")
        for i, k in enumerate(keys):
            conn.execute(f"INSERT INTO {table} VALUES (%s, %s, '[1,2,{i}]')", [k, f"doc {i}"])
    coll = connect(url + "&vector=emb&id=doc_id")
    coll.upsert(VectorBatch(keys[:2], np.ones((2, 3), np.float32), [{}] * 2, stamps=[stamp(0, "mapped"), None]))
    coll.with_vector_field("emb").upsert(VectorBatch(keys[2:3], np.ones((1, 3), np.float32), [{}],
                                                     stamps=[stamp(2, "native")]))
    assert {"vecbridge_origin__emb", "vecbridge_stamp__emb"} <= _pg_columns(engine, table)
    got = VectorBatch.concat(list(connect(url + "&vector=emb&id=doc_id", read_only=True).scan(batch_size=2)))
    assert got.payloads == [{"content": f"doc {i}"} for i in range(5)], "stamp columns are not payload"
    assert got.stamps == [stamp(0, "mapped"), None, stamp(2, "native"), None, None]
    assert [i for ids_, _ in coll.scan_stamps(batch_size=1) for i in ids_] == [keys[0], keys[2]]


@PG_ENGINE
def test_pgvector_a_vector_column_takes_its_stamps_along(engine, new_url):
    """Dropped with its column, absent from a column added again, and served under the serving view's names."""
    url = new_url()
    coll, ids, vectors, stamps = _fill(url)
    coll.add_vector_field("extra", 3)
    view = coll.with_vector_field("extra")
    view.upsert(VectorBatch(ids[:4], np.ones((4, 3), np.float32), [{}] * 4,
                            stamps=[stamp(i, "native") for i in range(4)]))
    view.upsert(VectorBatch(ids[:1], np.ones((1, 3), np.float32) * 2, [{}]))
    assert view.stamps_of(ids[:1]) == {ids[0]: stamp(0, "native")}, "a field update without a stamp keeps it"
    name = coll.serving_view("extra")
    served = connect(url.rsplit("table=", 1)[0] + f"table={name}", read_only=True)
    assert served.get(ids[:2]).stamps == [stamp(0, "native"), stamp(1, "native")]
    assert served.get(ids[:2]).payloads == [{"n": 0, "text": "t0"}, {"n": 1, "text": "t1"}]
    coll.serving_view(coll.vector_column)
    assert served.get(ids[:2]).stamps == [None, stamps[1]]
    with _pg(engine) as conn:
        conn.execute(f"DROP VIEW {name}")
    coll.drop_vector_field("extra")
    assert not {"vecbridge_origin__extra", "vecbridge_stamp__extra"} & _pg_columns(engine, coll.table)
    coll.add_vector_field("extra", 3)
    assert list(coll.with_vector_field("extra").scan_stamps()) == []
    assert coll.stamps_of(ids[:2]) == {ids[1]: stamps[1]}


@PG_ENGINE
def test_pgvector_long_vector_column_names_keep_their_own_stamp_columns(engine, new_url):
    url = new_url()
    coll, ids, vectors, _ = _fill(url)
    long_a, long_b = "v" * 50 + "_a", "v" * 50 + "_b"
    for name, origin in ((long_a, "native"), (long_b, "mapped")):
        coll.add_vector_field(name, 3)
        coll.with_vector_field(name).upsert(VectorBatch(ids[:1], np.ones((1, 3), np.float32), [{}],
                                                        stamps=[stamp(0, origin)]))
    assert coll.with_vector_field(long_a).stamps_of(ids[:1]) == {ids[0]: stamp(0, "native")}
    assert coll.with_vector_field(long_b).stamps_of(ids[:1]) == {ids[0]: stamp(0, "mapped")}


# --- what stamping costs: one reusable encoder, writing and refusing exactly what json.dumps did ------------------
DUMPS = {"ensure_ascii": False, "allow_nan": False, "separators": (",", ":")}
ODD_STAMPS = [stamp(3, "mapped"),
              {"origin": "native", "note": "é \"quoted\"\n\u2028 \U0001f600 \\", 1: [1, 2.5, None, True, False],
               "d": {"x": -0.0, "big": 10 ** 30, "tiny": 1e-300, "nested": [[], {}]}}]


def test_record_stamp_text_writes_what_json_dumps_writes():
    for st in ODD_STAMPS:
        assert record_stamp_text(st) == json.dumps(st, **DUMPS)


def test_without_the_c_json_encoder_stamps_read_the_same(monkeypatch):
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    encode = base._stamp_encoder()
    for st in ODD_STAMPS:
        assert encode(st) == json.dumps(st, **DUMPS)


def test_stamping_a_batch_builds_no_json_encoder_per_record(monkeypatch):
    """``json.dumps`` with options builds a new encoder for every call: at one stamp per record that cost more than
    the encoding itself (stamped file-store writes took 2.5 times as long as plain ones)."""
    built = []
    real_init = json.JSONEncoder.__init__

    def counting_init(self, *args, **kwargs):
        built.append(1)
        real_init(self, *args, **kwargs)
    monkeypatch.setattr(json.JSONEncoder, "__init__", counting_init)
    n = 50
    out = stamps_into_payloads(VectorBatch([f"r{i}" for i in range(n)], np.zeros((n, DIM), np.float32),
                                           [{"n": i} for i in range(n)], stamps=[stamp(i, "mapped") for i in range(n)]))
    assert len(out) == n and built == []


def test_stamps_into_payloads_copies_and_strips_what_came_from_elsewhere():
    mine, theirs = {"text": "a"}, {"text": "b", "vecbridge_stamp": "{}", "vecbridge_origin__img": "mapped", 7: "x"}
    out = stamps_into_payloads(VectorBatch(["a", "b", "c"], np.zeros((3, DIM), np.float32), [mine, theirs, {}],
                                           stamps=[stamp(0, "mapped"), None, stamp(2, "native")]))
    assert mine == {"text": "a"} and out[0] is not mine, "the caller's payload is never edited"
    assert list(out[0]) == ["text", "vecbridge_origin", "vecbridge_stamp"]
    assert out[0]["vecbridge_stamp"] == json.dumps(stamp(0, "mapped"), **DUMPS)
    assert out[1] == {"text": "b", 7: "x"}, "stamp keys from elsewhere are dropped, a record without a stamp has none"
    assert out[2] == {"vecbridge_origin": "native", "vecbridge_stamp": record_stamp_text(stamp(2, "native"))}
    field = stamps_into_payloads(VectorBatch(["a"], np.zeros((1, DIM), np.float32), [theirs],
                                             stamps=[stamp(0, "mapped")]), "img")
    assert set(field[0]) == {"text", 7, "vecbridge_origin__img", "vecbridge_stamp__img"}


def _limit_stamp(extra: int, char: str = "x") -> dict:
    """A stamp whose JSON takes exactly RECORD_STAMP_BYTES + ``extra`` bytes (``char``: a one- or two-byte one)."""
    room = RECORD_STAMP_BYTES + extra - len(json.dumps({"origin": "m", "t": ""}, **DUMPS))
    text = char * (room // len(char.encode())) + "x" * (room % len(char.encode()))
    st = {"origin": "m", "t": text}
    assert len(json.dumps(st, **DUMPS).encode()) == RECORD_STAMP_BYTES + extra
    return st


@pytest.mark.parametrize("char", ["x", "é"])
def test_the_stamp_size_limit_counts_utf8_bytes(char):
    assert record_stamp_text(_limit_stamp(0, char))
    with pytest.raises(InputError, match="at most 2,048 bytes"):
        record_stamp_text(_limit_stamp(1, char))
    with pytest.raises(InputError, match="at most 2,048 bytes"):   # 1,100 characters, 2,200 bytes and more
        record_stamp_text({"origin": "mapped", "t": "é" * 1100})


def test_bad_record_stamps_are_refused_in_one_line():
    circular = {"origin": "mapped"}
    circular["self"] = circular
    for bad, says in (({"made_by": "x"}, "string 'origin'"), ([("origin", "x")], "string 'origin'"),
                      ({"origin": "mapped", "v": float("nan")}, "JSON-serialisable"),
                      ({"origin": "mapped", "v": float("-inf")}, "JSON-serialisable"),
                      ({"origin": "mapped", "o": object()}, "JSON-serialisable"),
                      ({"origin": "mapped", "s": {1, 2}}, "JSON-serialisable"),
                      (circular, r"JSON-serialisable \(.*contains itself")):
        with pytest.raises(InputError, match=says) as err:
            record_stamp_text(bad)
        assert "\n" not in str(err.value) and str(err.value).startswith("a record's stamp")


@pytest.mark.engines("file")
def test_file_stamps_survive_a_delete_that_rewrites_their_segment(engine, new_url):
    coll, ids, _, stamps = _fill(new_url())
    assert coll.delete(ids[:3]) == 3
    got = _scan_all(connect(coll.url))
    assert got.ids == ids[3:] and got.stamps == stamps[3:]
    assert coll.stamps_of(ids) == {i: s for i, s in zip(ids[3:], stamps[3:]) if s is not None}
