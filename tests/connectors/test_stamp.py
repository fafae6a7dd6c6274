"""Stamps (which embedding space a collection is in) kept in every real store: read back as written, replaced,
one per vector field, unseen by counts, scans and searches, gone with the collection, refused on a read-only handle
or for bad input, and shown by ``vecbridge info``."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from vecbridge.cli import main
from vecbridge.connectors import VectorBatch, connect
from vecbridge.connectors.base import STAMP_BYTES, stamp_text
from vecbridge.errors import InputError, StoreError

N, DIM = 40, 4


def big_stamp(seed: int = 0) -> dict:
    """A stamp of about 40 KB: nested lists of floats, as a space fingerprint holds them."""
    rng = np.random.default_rng(seed)
    stamp = {"format": "vecbridge.space", "version": 1, "seed": seed, "label": "all-MiniLM-L6-v2 · ünïcode",
             "space": {"mean": rng.normal(size=64).tolist(), "basis": rng.normal(size=(40, 50)).tolist(),
                       "tiny": [5e-324, 1e-7, -0.0, 1.5e300], "ints": [0, -1, 2 ** 53 + 1]},
             "forced": None, "ok": True}
    assert 30_000 < len(stamp_text(stamp).encode()) < 50_000
    return stamp


def _fill(url: str):
    coll = connect(url).create(dim=DIM, metric="cosine")
    vectors = np.random.default_rng(1).normal(size=(N, DIM)).astype(np.float32)
    coll.upsert(VectorBatch([f"r{i:03d}" for i in range(N)], vectors, [{"n": i} for i in range(N)]))
    return coll, vectors


def test_written_read_back_and_replaced(engine, new_url):
    url = new_url()
    assert connect(url).read_stamp() is None, "no collection: no stamp"
    coll, _ = _fill(url)
    assert coll.read_stamp() is None, "a new collection has none"
    stamp = big_stamp()
    coll.write_stamp(stamp)
    assert coll.read_stamp() == stamp
    assert connect(url, read_only=True).read_stamp() == stamp, "another handle reads it from the store"
    coll.write_stamp({"format": "vecbridge.space", "version": 2})
    assert connect(url).read_stamp() == {"format": "vecbridge.space", "version": 2}, "replaced, not merged"


def test_one_stamp_per_vector_field(engine, new_url):
    url = new_url()
    if not connect(url).capabilities.named_vectors:
        pytest.skip("the store has one vector field per collection")
    coll, _ = _fill(url)
    assert coll.with_vector_field("extra").read_stamp() is None, "a field not added yet has none"
    coll.add_vector_field("extra", 3)
    view = coll.with_vector_field("extra")
    assert view.read_stamp() is None
    coll.write_stamp({"field": "default"})
    view.write_stamp({"field": "extra"})
    assert connect(coll.url).read_stamp() == {"field": "default"}
    assert connect(coll.url).with_vector_field("extra").read_stamp() == {"field": "extra"}
    coll.write_stamp({"field": "default", "again": True})
    assert view.read_stamp() == {"field": "extra"}


def test_unseen_by_counts_scans_and_searches(engine, new_url):
    coll, vectors = _fill(new_url())
    coll.write_stamp(big_stamp())
    reader = connect(coll.url, read_only=True)
    info = reader.info()
    assert (info.count, info.dim, info.metric) == (N, DIM, "cosine")
    ids = [i for b in reader.scan(batch_size=7) for i in b.ids]
    assert sorted(ids) == [f"r{i:03d}" for i in range(N)]
    assert len(reader.sample(N + 5)) == N
    found, _ = reader.search(vectors[:3], k=N + 5)
    assert all(len(row) == N and set(row) == set(ids) for row in found)
    assert len(reader.get(ids)) == N


def test_gone_with_the_collection(engine, new_url):
    url = new_url()
    coll, _ = _fill(url)
    coll.write_stamp({"format": "vecbridge.space"})
    coll.drop()
    assert coll.read_stamp() is None and connect(url).read_stamp() is None
    again = connect(url).create(dim=DIM, metric="cosine")
    assert again.read_stamp() is None, "a new collection of the same name starts without one"


def test_refused_on_a_read_only_handle_and_for_bad_input(engine, new_url):
    coll, _ = _fill(new_url())
    coll.write_stamp({"kept": 1})
    with pytest.raises(StoreError, match="read-only"):
        connect(coll.url, read_only=True).write_stamp({"kept": 2})
    too_large = {"x": "a" * STAMP_BYTES}
    for bad in ({"x": object()}, {"x": math.nan}, {"x": np.float32(1)}, [1, 2], "{}", too_large):
        with pytest.raises(InputError, match="stamp"):
            coll.write_stamp(bad)
    assert connect(coll.url).read_stamp() == {"kept": 1}, "nothing was written"


def test_a_missing_collection_cannot_be_stamped(engine, new_url):
    with pytest.raises(StoreError):
        connect(new_url()).write_stamp({"x": 1})


def test_info_shows_it(engine, new_url):
    coll, _ = _fill(new_url())
    runner = CliRunner()
    before = runner.invoke(main, ["info", coll.url, "--json"])
    assert before.exit_code == 0, before.output
    assert json.loads(before.stdout)["stamp"] is None
    coll.write_stamp({"format": "vecbridge.space", "origin": "mapped"})
    after = runner.invoke(main, ["info", coll.url, "--json"])
    assert after.exit_code == 0, after.output
    shown = json.loads(after.stdout)
    assert shown["stamp"] == {"format": "vecbridge.space", "origin": "mapped"} and shown["count"] == N
