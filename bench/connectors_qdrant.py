"""Throughput of the ``qdrant://`` (local in-memory mode) and ``qdrant-edge://`` connectors beside plain client code.

Each op runs ``repeats`` times on ``n`` random vectors (integer ids and a small payload, so both sides do the same
job); the table reports median vectors/s. "native" is the fastest plain way with the store's own client:
``upload_collection`` / ``scroll`` for qdrant-client, ``UpdateOperation.upsert_points`` / ``scroll`` for Qdrant
Edge, with vectors collected into a numpy array as the connector does. Local ``path=`` mode is left out: it writes
about 300 points/s, whatever the caller does.

    python bench/connectors_qdrant.py [n] [dim] [repeats]
"""
from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

import numpy as np

from vecbridge.connectors import Collection, VectorBatch, connect

BATCH = 1000


def _data(n: int, dim: int) -> tuple[list[int], np.ndarray, list[dict]]:
    vectors = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
    return list(range(n)), vectors, [{"text": f"document {i}", "n": i} for i in range(n)]


def _median_vps(n: int, repeats: int, setup: Callable[[], Collection], job: Callable[[Collection], None],
                *, drop: bool = True) -> float:
    """Median vectors/s of ``job`` over fresh (or shared) collections, dropping fresh ones after each run."""
    rates = []
    for _ in range(repeats):
        coll = setup()
        start = time.perf_counter()
        job(coll)
        rates.append(n / (time.perf_counter() - start))
        if drop:
            coll.drop()
    return statistics.median(rates)


def _row(store: str, op: str, ours: float, native: float) -> dict:
    return {"store": store, "op": op, "vecbridge_vps": round(ours), "native_vps": round(native),
            "overhead": round(native / ours - 1, 3)}


def _vb_upsert(coll, ids, vectors, payloads) -> None:
    for lo in range(0, len(ids), BATCH):
        coll.upsert(VectorBatch(ids[lo:lo + BATCH], vectors[lo:lo + BATCH], payloads[lo:lo + BATCH]))


def _vb_scan(coll) -> None:
    for _ in coll.scan(batch_size=BATCH):
        pass


def bench_qdrant_local(n: int, dim: int, repeats: int) -> list[dict]:
    ids, vectors, payloads = _data(n, dim)

    def fresh():
        return connect(f"qdrant://:memory:/bench_{uuid.uuid4().hex[:8]}").create(dim=dim, metric="cosine")

    def native_upsert(coll):
        coll._client().upload_collection(coll.name, vectors=vectors, payload=payloads, ids=ids,
                                         batch_size=BATCH, wait=True)

    def native_scan(coll):
        client, offset = coll._client(), None
        while True:
            records, offset = client.scroll(coll.name, limit=BATCH, offset=offset, with_payload=True,
                                            with_vectors=True)
            np.asarray([r.vector for r in records], dtype=np.float32)
            [r.payload for r in records]
            if offset is None:
                return

    filled = fresh()
    _vb_upsert(filled, ids, vectors, payloads)
    rows = [
        _row("qdrant-local", "upsert", _median_vps(n, repeats, fresh, lambda c: _vb_upsert(c, ids, vectors, payloads)),
             _median_vps(n, repeats, fresh, native_upsert)),
        _row("qdrant-local", "scan", _median_vps(n, repeats, lambda: filled, _vb_scan, drop=False),
             _median_vps(n, repeats, lambda: filled, native_scan, drop=False)),
    ]
    filled.drop()
    return rows


def bench_qdrant_edge(n: int, dim: int, repeats: int) -> list[dict]:
    import qdrant_edge as qe

    ids, vectors, payloads = _data(n, dim)
    workdir = Path(tempfile.mkdtemp(prefix="vecbridge-bench-edge-"))

    def fresh():
        return connect(f"qdrant-edge://{workdir / uuid.uuid4().hex[:8]}").create(dim=dim, metric="cosine")

    def native_upsert(coll):
        shard = coll._shard()
        for lo in range(0, n, 2048):
            rows = vectors[lo:lo + 2048].tolist()
            points = [qe.Point(i, v, p) for i, v, p in zip(ids[lo:lo + 2048], rows, payloads[lo:lo + 2048])]
            shard.update(qe.UpdateOperation.upsert_points(points))

    def native_scan(coll):
        shard, offset = coll._shard(), None
        while True:
            records, offset = shard.scroll(qe.ScrollRequest(offset=offset, limit=BATCH, with_payload=True,
                                                            with_vector=True))
            np.asarray([r.vector for r in records], dtype=np.float32)
            [r.payload for r in records]  # Edge converts attributes when read: read what the connector reads
            if offset is None:
                return

    filled = fresh()
    _vb_upsert(filled, ids, vectors, payloads)
    rows = [
        _row("qdrant-edge", "upsert", _median_vps(n, repeats, fresh, lambda c: _vb_upsert(c, ids, vectors, payloads)),
             _median_vps(n, repeats, fresh, native_upsert)),
        _row("qdrant-edge", "scan", _median_vps(n, repeats, lambda: filled, _vb_scan, drop=False),
             _median_vps(n, repeats, lambda: filled, native_scan, drop=False)),
    ]
    filled.drop()
    shutil.rmtree(workdir, ignore_errors=True)
    return rows


def run(n: int = 100_000, dim: int = 384, repeats: int = 3) -> list[dict]:
    return bench_qdrant_local(n, dim, repeats) + bench_qdrant_edge(n, dim, repeats)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    for row in run(*args):
        print(row)
