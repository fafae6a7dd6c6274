"""PostgreSQL keeps the stamps an upgrade writes in typed columns, their shared fields once in a side table: read
back exactly as written by every read path and by a handle that never wrote them, cleared when a row is replaced
without them, switched with the serving view, and a set whose id holds other fields is refused before anything is
written. Stamps that do not fit the columns are kept whole, as before; tables stamped before read as they did."""
from __future__ import annotations

import numpy as np
import pytest

from vecbridge.connectors import VectorBatch, connect
from vecbridge.connectors import pgvector_stamps as stamp_cols
from vecbridge.errors import StoreError
from vecbridge.records import StampColumns
from vecbridge.runtime.record_stamps import Stamper

from .test_record_stamps import _pg, _pg_columns

pytestmark = pytest.mark.engines("pgvector")
DIM = 4
N = 12


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)


def _stamps(origin: str = "mapped", n: int = N, made_by: str = "map 0123") -> StampColumns:
    return Stamper(origin, made_by, None, DIM)(
        n, digests=[f"{i:024x}" for i in range(n)], residuals=0.1 + np.arange(n) / 7,
        hubness=[None if i % 4 == 3 else 0.5 + i / 3 for i in range(n)])


def _fill(url: str, stamps) -> tuple:
    coll = connect(url).create(dim=DIM)
    ids = [f"r{i:03d}" for i in range(N)]
    coll.upsert(VectorBatch(ids, _vectors(N), [{"n": i} for i in range(N)], stamps=stamps))
    return coll, ids


def test_a_stampers_columns_read_back_as_the_dicts_it_made_by_every_read(engine, new_url):
    url = new_url()
    stamps = _stamps()
    coll, ids = _fill(url, stamps)
    want = list(stamps)
    assert "hubness" not in want[3] and want[4]["hubness"] == 0.5 + 4 / 3
    reader = connect(url, read_only=True)   # a replica: knows no set yet, reads it from the side table
    assert VectorBatch.concat(list(reader.scan(batch_size=5))).stamps == want
    assert reader.get([ids[7], ids[2]]).stamps == [want[7], want[2]]
    assert reader.stamps_of([ids[3], "nope"]) == {ids[3]: want[3]}
    assert [s for _, page in reader.scan_stamps(batch_size=5, origins=["mapped"]) for s in page] == want
    assert list(reader.scan_stamps(origins=["native"])) == []
    assert [p for p in reader.get(ids[:2]).payloads] == [{"n": 0}, {"n": 1}], "stamp columns are no payload"


def test_the_stamp_is_typed_columns_and_one_shared_set(engine, new_url):
    url = new_url()
    coll, ids = _fill(url, _stamps())
    names = stamp_cols.column_names(None, 63)
    with _pg(engine) as conn:
        row = conn.execute(f"SELECT {names['origin']}, {names['stamp']}, {names['set']}, {names['digest']}, "
                           f"{names['residual']}, {names['hubness']} FROM {coll.table} WHERE id = 'r003'").fetchone()
        named = conn.execute(f"SELECT DISTINCT {names['set']} FROM {coll.table}").fetchall()
        shared = conn.execute(f"SELECT shared::text FROM {stamp_cols.SETS_TABLE} WHERE id = %s", [row[2]]).fetchall()
    assert row[0] == "mapped" and row[1] is None, "no whole stamp: its shared fields are in the side table"
    assert row[3:] == (f"{3:024x}", 0.1 + 3 / 7, None)
    assert named == [(row[2],)], "one set for all the write's records"
    assert shared == [('{"origin":"mapped","made_by":"map 0123","dim":4}',)]


def test_missing_scores_and_digests_are_null_and_read_back_absent(engine, new_url):
    stamps = Stamper("native", "model m", None, DIM)(N, digests=[None if i % 2 else f"d{i}" for i in range(N)],
                                                    residuals=[np.nan] * N)
    coll, ids = _fill(new_url(), stamps)
    got = coll.get(ids).stamps
    assert got == list(stamps)
    assert got[1] == {"origin": "native", "made_by": "model m", "dim": DIM}
    assert got[2] == {"origin": "native", "made_by": "model m", "dim": DIM, "digest": "d2"}


def test_replacing_a_row_clears_the_stamp_columns_it_does_not_write(engine, new_url):
    url = new_url()
    coll, ids = _fill(url, _stamps())
    whole = [{"origin": "native", "made_by": "model m", "hits": 3}] * 2
    coll.upsert(VectorBatch(ids[:2], _vectors(2, 1), [{}] * 2, stamps=whole))   # merged: the rows exist
    coll.upsert(VectorBatch(ids[2:4], _vectors(2, 1), [{}] * 2))
    native = _stamps("native", 2, "model m")
    coll.upsert(VectorBatch(ids[4:6], _vectors(2, 1), [{}] * 2, stamps=native))
    got = connect(url, read_only=True).get(ids[:7]).stamps
    assert got[:2] == whole and got[2:4] == [None, None] and got[4:6] == list(native)
    assert got[6] == list(_stamps())[6]
    coll.upsert(VectorBatch(ids[:1], _vectors(1, 2), [{}], stamps=native[:1]))
    assert coll.stamps_of(ids[:1]) == {ids[0]: native[0]}, "a typed stamp replaces a whole one"


def test_a_field_view_writes_typed_stamps_and_keeps_them_without(engine, new_url):
    url = new_url()
    coll, ids = _fill(url, _stamps())
    coll.add_vector_field("extra", 3)
    view = coll.with_vector_field("extra")
    native = _stamps("native", 4, "model m")
    view.upsert(VectorBatch(ids[:4], np.ones((4, 3), np.float32), [{}] * 4, stamps=native))
    view.upsert(VectorBatch(ids[:1], np.ones((1, 3), np.float32) * 2, [{}]))
    assert view.stamps_of(ids[:4]) == dict(zip(ids[:4], native))
    assert coll.stamps_of(ids[:1]) == {ids[0]: list(_stamps())[0]}, "each vector column its own stamps"
    name = coll.serving_view("extra")
    served = connect(url.rsplit("table=", 1)[0] + f"table={name}", read_only=True)
    assert served.get(ids[:2]).stamps == list(native[:2])
    with _pg(engine) as conn:
        conn.execute(f"DROP VIEW {name}")
    coll.drop_vector_field("extra")
    assert not any(c.endswith("__extra") for c in _pg_columns(engine, coll.table))


def test_a_table_stamped_before_gets_the_columns_and_reads_both(engine, new_url, monkeypatch):
    import vecbridge.connectors.pgvector as pg

    url = new_url()
    table = url.rsplit("table=", 1)[1]
    with _pg(engine) as conn:   # the layout of a table stamped by an earlier release: origin and jsonb only
        conn.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, payload jsonb, embedding vector({DIM}), "
                     "vecbridge_origin text, vecbridge_stamp jsonb)")
        conn.execute(f"INSERT INTO {table} VALUES ('old', '{{}}', '[1,2,3,4]', 'native', "
                     "'{\"origin\": \"native\", \"made_by\": \"m\"}')")
    coll, replica = connect(url), connect(url, read_only=True)
    assert coll.stamps_of(["old"]) == {"old": {"origin": "native", "made_by": "m"}}
    assert replica.stamps_of(["old"]) == {"old": {"origin": "native", "made_by": "m"}}
    stamps = _stamps(n=2)
    coll.upsert(VectorBatch(["a", "b"], _vectors(2), [{}] * 2, stamps=stamps))
    monkeypatch.setattr(pg, "_STAMP_RECHECK_S", 0.0)
    assert replica.stamps_of(["a"]) == {"a": stamps[0]}, "a handle that knew the old columns sees the new ones"
    assert set(stamp_cols.column_names(None, 63).values()) <= _pg_columns(engine, table)
    fresh = connect(url, read_only=True)
    assert fresh.stamps_of(["old", "a", "b"]) == {"old": {"origin": "native", "made_by": "m"}, "a": stamps[0],
                                                   "b": stamps[1]}
    assert sorted(i for ids_, _ in fresh.scan_stamps(origins=["mapped"]) for i in ids_) == ["a", "b"]


def test_a_set_id_holding_other_fields_is_refused_before_anything_is_written(engine, new_url):
    url = new_url()
    connect(url).create(dim=DIM)
    stamps = _stamps(n=2)
    text = stamp_cols.copy_fields(stamps).shared[1]
    with _pg(engine) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {stamp_cols.SETS_TABLE} (id int8 PRIMARY KEY, shared json NOT NULL)")
        conn.execute(f"INSERT INTO {stamp_cols.SETS_TABLE} VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET shared = "
                     "EXCLUDED.shared", [stamp_cols.set_id(text), '{"origin":"native","made_by":"someone else"}'])
    coll = connect(url)
    with pytest.raises(StoreError, match="shared stamp fields"):
        coll.upsert(VectorBatch(["a", "b"], _vectors(2), [{}] * 2, stamps=stamps))
    assert coll.info().count == 0
    with _pg(engine) as conn:
        conn.execute(f"DELETE FROM {stamp_cols.SETS_TABLE} WHERE id = %s", [stamp_cols.set_id(text)])


def test_first_stamped_writes_into_two_tables_at_once_share_the_side_table(engine, new_url):
    """Two writers of one schema, each the first to need the side table: one makes it, neither fails."""
    import threading

    with _pg(engine) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {stamp_cols.SETS_TABLE}")
    colls = [connect(new_url()).create(dim=DIM) for _ in range(2)]
    barrier, errors = threading.Barrier(2), []

    def write(coll, made_by):
        barrier.wait()
        try:
            coll.upsert(VectorBatch(["a", "b"], _vectors(2), [{}] * 2, stamps=_stamps(n=2, made_by=made_by)))
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(c, f"map {i}")) for i, c in enumerate(colls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i, coll in enumerate(colls):
        assert connect(coll.url, read_only=True).stamps_of(["a"]) == {"a": _stamps(n=2, made_by=f"map {i}")[0]}


def test_rows_whose_set_is_gone_are_refused_by_the_stamp_reads_and_unstamped_to_vector_reads(engine, new_url):
    """The reads an upgrade decides by (which records are still mapped) say the stamps are lost instead of taking
    the records for unstamped; reading the vectors (a migration of the table) still works."""
    url = new_url()
    coll, ids = _fill(url, _stamps("pending", made_by="map gone"))
    with _pg(engine) as conn:
        conn.execute(f"DELETE FROM {stamp_cols.SETS_TABLE} WHERE shared::text LIKE '%map gone%'")
    fresh = connect(url, read_only=True)
    assert fresh.get(ids[:2]).stamps == [None, None]
    with pytest.raises(StoreError, match=f"{N} records name shared stamp fields"):
        list(fresh.scan_stamps())
    with pytest.raises(StoreError, match="restore that table"):
        fresh.stamps_of(ids[:1])


def test_stamps_that_do_not_fit_the_columns_are_kept_whole():
    mixed = StampColumns({"made_by": "m"}, {"origin": ["mapped", "native"]})
    other = StampColumns({"origin": "mapped"}, {"hits": [1, 2]})
    for stamps in (mixed, other, [{"origin": "native"}, None]):
        fields = stamp_cols.copy_fields(stamps)
        assert fields.shared is None and set(fields.rows) == {"origin", "stamp"} and not fields.fixed
    typed = stamp_cols.copy_fields(_stamps())
    assert set(typed.fixed) == {"origin", "set", "digest", "residual"} and set(typed.rows) == {"hubness"}
    assert all(f.shape[0] == N for f in typed.fixed.values())
