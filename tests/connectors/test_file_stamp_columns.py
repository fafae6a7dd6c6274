"""The file store keeps record stamps in columns beside each segment (what every record of an upsert shares once, the
rest one array per field): read back exactly as written, checked before anything is written, kept through deletes,
filtered by origin without reading vectors; version 1 directories keep them in each payload, as they did."""
from __future__ import annotations

import json

import numpy as np
import pytest

from vecbridge.connectors import VectorBatch, connect
from vecbridge.connectors import file as file_store
from vecbridge.connectors.base import RECORD_STAMP_BYTES
from vecbridge.errors import InputError, StoreError
from vecbridge.records import StampColumns
from vecbridge.runtime.record_stamps import Stamper

DIM = 4


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)


def _meta_files(path) -> list[dict]:
    out = []
    for meta in sorted((path / "segments").glob("*.meta.npz")):
        with np.load(meta, allow_pickle=False) as f:
            out.append({k: f[k] for k in f.files})
    return out


def test_a_stampers_columns_read_back_as_the_dicts_it_made(tmp_path):
    coll = connect(str(tmp_path / "c")).create(dim=DIM)
    stamps = Stamper("mapped", "map 0123", None, DIM)(5, digests=["d0", None, "dé2", "d3", "d4"],
                                                      residuals=[0.5, None, 0.25, float("nan"), 1.0],
                                                      hubness=np.array([0.1, 0.2, 0.3, 0.4, 0.5]))
    assert isinstance(stamps, StampColumns)
    ids = [f"r{i}" for i in range(5)]
    coll.upsert(VectorBatch(ids, _vectors(5), [{"text": f"t{i}"} for i in range(5)], stamps=stamps))
    got = connect(str(tmp_path / "c"), read_only=True).get(ids)
    assert got.stamps == list(stamps)
    assert got.stamps[1] == {"origin": "mapped", "made_by": "map 0123", "dim": DIM, "hubness": 0.2}, \
        "a record without a digest or a residual has no such keys, not None"
    assert got.stamps[3].get("residual") is None, "a score that is not finite is left out, never written as NaN"
    assert got.payloads == [{"text": f"t{i}"} for i in range(5)]
    (meta,) = _meta_files(tmp_path / "c")
    assert "stamps" in meta and "vecbridge_origin" not in meta["payloads_json"].tobytes().decode(), \
        "stamps live in columns beside the payloads, not inside each payload"
    columns = file_store._unpack(meta["stamps"])
    assert json.loads(columns["stamp_shared"].tobytes()) == {"origin": "mapped", "made_by": "map 0123", "dim": DIM}
    assert columns["stamp_2"].tolist()[:3] == [0.1, 0.2, 0.3], "scores kept as float64, not as text"
    assert json.loads((tmp_path / "c" / "manifest.json").read_text())["version"] == 2


def test_a_list_of_stamp_dicts_reads_back_exactly_whatever_its_fields_hold(tmp_path):
    """The generic path (stamps a job built as dicts): ints stay ints, lists and booleans come back as they were,
    a record without a stamp has none, and stray stamp keys in a payload are not taken for the record's stamp."""
    coll = connect(str(tmp_path / "c")).create(dim=DIM)
    stamps = [{"origin": "native", "dim": 4, "hits": 3, "tags": ["a", 1], "flag": True, "w": 0.5},
              None,
              {"origin": "pending", "dim": 4, "hits": 0, "flag": False, "w": 1.5, "note": "x\n\"y\""},
              {"origin": "native", "dim": 4, "hits": 7, "tags": [], "flag": True}]
    payloads = [{"n": 0}, {"n": 1, "vecbridge_origin": "mapped", "vecbridge_stamp": json.dumps({"origin": "mapped"})},
                {"n": 2}, {"n": 3}]
    coll.upsert(VectorBatch(["a", "b", "c", "d"], _vectors(4), payloads, stamps=stamps))
    got = connect(str(tmp_path / "c"), read_only=True).get(["a", "b", "c", "d"])
    assert got.stamps == stamps
    assert [type(s["hits"]) for s in got.stamps if s] == [int, int, int]
    assert got.payloads == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}], "stamp keys never come back in a payload"


def test_bad_stamps_are_refused_before_anything_is_written(tmp_path):
    coll = connect(str(tmp_path / "c")).create(dim=DIM)
    bad = [[{"origin": "mapped", "w": float("nan")}],
           [{"made_by": "no origin"}],
           [{"origin": "mapped", "big": "x" * RECORD_STAMP_BYTES}],
           StampColumns({"origin": "mapped"}, {"big": ["x" * RECORD_STAMP_BYTES]}),
           StampColumns({"origin": 3}, {}, 1),
           [{"origin": "mapped", "o": object()}]]
    for stamps in bad:
        with pytest.raises(InputError):
            coll.upsert(VectorBatch(["a"], _vectors(1), [{}], stamps=stamps))
    assert _meta_files(tmp_path / "c") == [], "a refused upsert leaves no segment behind"


def test_delete_keeps_the_stamps_of_the_records_it_moves(tmp_path):
    coll = connect(str(tmp_path / "c")).create(dim=DIM)
    ids = [f"r{i}" for i in range(6)]
    stamps = Stamper("native", "model-x", None, DIM)(6, digests=[f"d{i}" for i in range(6)])
    coll.upsert(VectorBatch(ids, _vectors(6), [{"i": i} for i in range(6)], stamps=stamps))
    assert coll.delete(["r2", "r4"]) == 2
    got = connect(str(tmp_path / "c"), read_only=True).get(ids)
    assert got.ids == ["r0", "r1", "r3", "r5"]
    assert got.stamps == [stamps[i] for i in (0, 1, 3, 5)]


def test_scan_stamps_filters_by_origin_across_segments_of_both_kinds(tmp_path):
    """Newest write wins per id; column segments and segments whose stamps sit in payloads (written without
    stamps) are scanned alike."""
    coll = connect(str(tmp_path / "c")).create(dim=DIM)
    coll.upsert(VectorBatch(["a", "b", "c"], _vectors(3), [{}] * 3,
                            stamps=Stamper("mapped", "m", None, DIM)(3, digests=["1", "2", "3"])))
    coll.upsert(VectorBatch(["b"], _vectors(1), [{}], stamps=Stamper("native", "n", None, DIM)(1)))
    coll.upsert(VectorBatch(["d"], _vectors(1), [{"vecbridge_origin": "pending",
                                                  "vecbridge_stamp": json.dumps({"origin": "pending"})}]))
    coll.upsert(VectorBatch(["e"], _vectors(1), [{}]))
    ro = connect(str(tmp_path / "c"), read_only=True)
    mapped = [(i, s["origin"]) for ids, st in ro.scan_stamps(batch_size=1, origins=["mapped", "pending"])
              for i, s in zip(ids, st)]
    assert mapped == [("a", "mapped"), ("c", "mapped"), ("d", "pending")]
    every = {i: s for ids, st in ro.scan_stamps(batch_size=10) for i, s in zip(ids, st)}
    assert set(every) == {"a", "b", "c", "d"} and every["b"]["origin"] == "native"
    got = ro.get(list("abcde"))
    assert every == {i: s for i, s in zip(got.ids, got.stamps) if s}
    assert ro.stamps_of(["e", "d", "b", "a", "nope"]) == {i: every[i] for i in "dba"}, \
        "stamps_of reads the stamps alone, from columns and payloads alike"


def test_a_version_1_directory_keeps_stamps_in_its_payloads(tmp_path):
    path = tmp_path / "old"
    connect(str(path)).create(dim=DIM)
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, "version": 1}))
    stamps = Stamper("mapped", "m", None, DIM)(2, digests=["x", "y"])
    connect(str(path)).upsert(VectorBatch(["a", "b"], _vectors(2), [{"t": 1}, {"t": 2}], stamps=stamps))
    (meta,) = _meta_files(path)
    assert not any(k.startswith("stamp") for k in meta), "a version 1 reader would not see stamp columns"
    assert [p["vecbridge_origin"] for p in json.loads(meta["payloads_json"].tobytes())] == ["mapped", "mapped"]
    got = connect(str(path), read_only=True).get(["a", "b"])
    assert got.stamps == list(stamps) and got.payloads == [{"t": 1}, {"t": 2}]
    assert json.loads((path / "manifest.json").read_text())["version"] == 1


def test_damaged_stamp_columns_are_one_line_store_errors(tmp_path):
    coll = connect(str(tmp_path / "c")).create(dim=DIM)
    coll.upsert(VectorBatch(["a", "b"], _vectors(2), [{}, {}],
                            stamps=Stamper("mapped", "m", None, DIM)(2, digests=["x", "y"])))
    (meta_path,) = (tmp_path / "c" / "segments").glob("*.meta.npz")
    with np.load(meta_path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    columns = file_store._unpack(arrays["stamps"])
    columns["stamp_0_off"] = columns["stamp_0_off"][:-1]   # one digest fewer than stamped rows
    arrays["stamps"] = file_store._pack(columns)
    with open(meta_path, "wb") as fh:
        np.savez(fh, **arrays)
    with pytest.raises(StoreError, match="record stamps are unreadable") as err:
        connect(str(tmp_path / "c"), read_only=True).get(["a"])
    assert "\n" not in str(err.value)
    for garbage in (np.frombuffer(b"\xff" * 40, np.uint8), file_store._pack({"stamp_shared": np.array([1.5])}),
                    np.frombuffer((20).to_bytes(8, "little") + b'{"x": ["|O8", 0, 1]}', np.uint8)):
        arrays["stamps"] = garbage
        with open(meta_path, "wb") as fh:
            np.savez(fh, **arrays)
        with pytest.raises(StoreError, match="record stamps are unreadable") as err:
            connect(str(tmp_path / "c"), read_only=True).scan_stamps().__next__()
        assert "\n" not in str(err.value)


def test_a_future_version_is_refused_in_one_line(tmp_path):
    path = tmp_path / "c"
    connect(str(path)).create(dim=DIM)
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, "version": 3}))
    with pytest.raises(StoreError, match="version"):
        connect(str(path)).info()


def test_stamp_columns_behave_as_a_list_of_dicts():
    cols = StampColumns({"origin": "mapped"}, {"d": ["a", None, "c"], "r": np.array([0.5, np.nan, 2.0])})
    assert len(cols) == 3 and cols[-1] == {"origin": "mapped", "d": "c", "r": 2.0}
    assert cols[1:] == [{"origin": "mapped"}, {"origin": "mapped", "d": "c", "r": 2.0}]
    assert cols == list(cols) and list(cols) == cols
    assert [cols[i] for i in np.array([2, 0])] == [cols[2], cols[0]]
    with pytest.raises(IndexError):
        cols[3]
    with pytest.raises(InputError):
        StampColumns({"origin": "x"}, {"a": [1], "b": [1, 2]})
    assert StampColumns.of(list(cols)) == cols


def test_a_handle_reads_what_other_handles_wrote_removed_or_wrote_again(tmp_path):
    """A handle reads only the segments added since its last read; a segment removed, or written again under the
    number a delete freed, is seen as such (its content, not the handle's memory of the old one)."""
    url = str(tmp_path / "c")
    reader, writer = connect(url).create(dim=DIM), connect(url)
    writer.upsert(VectorBatch(["a", "b"], _vectors(2), [{"v": 1}, {"v": 1}]))
    writer.upsert(VectorBatch(["c"], _vectors(1), [{"v": 1}]))
    assert reader.get(["a", "b", "c"]).payloads == [{"v": 1}] * 3
    writer.upsert(VectorBatch(["b", "d"], _vectors(2, 1), [{"v": 2}, {"v": 2}]))
    got = reader.get(["a", "b", "c", "d"])
    assert got.payloads == [{"v": 1}, {"v": 2}, {"v": 1}, {"v": 2}]
    assert [b.ids for b in reader.scan(batch_size=10)] == [["a", "c", "b", "d"]], "live rows in write order"
    assert reader.info().count == 4
    writer.upsert(VectorBatch(["f"], _vectors(1, 3), [{"v": 4}]))
    assert reader.get(["f"]).payloads == [{"v": 4}]
    writer.delete(["f"])                           # the newest segment goes whole: its number is free again
    writer.upsert(VectorBatch(["e"], _vectors(1, 2), [{"v": 3}]))
    assert sorted(i for b in reader.scan(batch_size=10) for i in b.ids) == ["a", "b", "c", "d", "e"]
    assert reader.get(["e", "f"]).payloads == [{"v": 3}]
    fresh = connect(url, read_only=True)
    assert [b.ids for b in fresh.scan(batch_size=10)] == [b.ids for b in reader.scan(batch_size=10)]


def test_stamp_texts_of_columns_are_what_each_stamp_encodes_to():
    """Stores that keep each stamp as JSON text (PostgreSQL, payload stores) get the texts assembled from the columns:
    the same text, byte for byte, as each stamp dict encodes to, escapes and numbers included."""
    from vecbridge.connectors.base import record_stamp_text, record_stamp_texts

    cols = StampColumns({"origin": "mapped", "é": "q\"\n\x01"},
                        {"a": ["é\u2028\"", None, "\x00"], "b": np.array([np.nan, 1e-300, 1.5]),
                         "c": [1, True, [1, {"z": None}]], "d": [None, 0.1, float(2 ** 60)]})
    assert record_stamp_texts(cols) == (["mapped"] * 3, [record_stamp_text(s) for s in cols])
    by_column = StampColumns({}, {"origin": ["a", "b"], "x": [1.0, None]})
    assert record_stamp_texts(by_column) == (["a", "b"], [record_stamp_text(s) for s in by_column])
    listed = [{"origin": "native", "w": 0.5}, None]
    assert record_stamp_texts(listed) == (["native", None], [record_stamp_text(listed[0]), None])
    with pytest.raises(InputError):
        record_stamp_texts(StampColumns({"origin": "x"}, {"big": ["é" * RECORD_STAMP_BYTES]}))
