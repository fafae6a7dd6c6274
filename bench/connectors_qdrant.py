"""Throughput of the ``qdrant://`` (local in-memory mode) and ``qdrant-edge://`` connectors beside plain client code.

Each op runs ``repeats`` times on ``n`` random vectors (integer ids and a small payload, so both sides do the same
job), the connector and the plain code taking turns; the table reports median vectors/s. "native" is the fastest plain way with the store's own client:
``upload_collection`` / ``scroll`` for qdrant-client, ``UpdateOperation.upsert_points`` / ``scroll`` for Qdrant
Edge, with vectors collected into a numpy array as the connector does. Local ``path=`` mode is left out: it writes
about 300 points/s, whatever the caller does.

    python bench/connectors_qdrant.py [n] [dim] [repeats]
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import numpy as np
from _paired import data, paired_vps, result_row

from vecbridge.connectors import VectorBatch, connect

BATCH = 1000


def _vb_scan(coll) -> None:
    for _ in coll.scan(batch_size=BATCH):
        pass


def _measure(store: str, n: int, repeats: int, data_: tuple, fresh, native_upsert, native_scan) -> list[dict]:
    """Upsert on fresh collections, then scan one filled collection, ours and the client's taking turns."""
    ids, vectors, payloads = data_

    def upsert(coll) -> None:
        for lo in range(0, len(ids), BATCH):
            coll.upsert(VectorBatch(ids[lo:lo + BATCH], vectors[lo:lo + BATCH], payloads[lo:lo + BATCH]))

    filled = fresh()
    upsert(filled)
    rows = [result_row(store, "upsert", paired_vps(n, repeats, fresh, upsert, native_upsert)),
            result_row(store, "scan", paired_vps(n, repeats, lambda: filled, _vb_scan, native_scan, drop=False))]
    filled.drop()
    return rows


def bench_qdrant_local(n: int, dim: int, repeats: int) -> list[dict]:
    ids, vectors, payloads = data(n, dim, int_ids=True)

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

    return _measure("qdrant-local", n, repeats, (ids, vectors, payloads), fresh, native_upsert, native_scan)


def bench_qdrant_edge(n: int, dim: int, repeats: int) -> list[dict]:
    import qdrant_edge as qe

    ids, vectors, payloads = data(n, dim, int_ids=True)
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

    try:
        return _measure("qdrant-edge", n, repeats, (ids, vectors, payloads), fresh, native_upsert, native_scan)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(n: int = 100_000, dim: int = 384, repeats: int = 5) -> list[dict]:
    return bench_qdrant_local(n, dim, repeats) + bench_qdrant_edge(n, dim, repeats)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    for row in run(*args):
        print(row)
