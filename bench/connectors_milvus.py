"""Throughput of the ``milvus://`` connector beside plain pymilvus code, on a real Milvus 2.3.5 server (and Lite).

Each op runs ``repeats`` times on ``n`` random vectors with string ids and a small JSON payload; the table reports
median vectors/s (the connector and the plain code take turns). "native" is the plain pymilvus way of doing the
same job: ``MilvusClient.upsert`` of row dicts in chunks of 5,000 rows (~8 MB at 384-d), and
``MilvusClient.query_iterator`` pages of 5,000 with ids, vectors and payloads, vectors stacked into float32 numpy
as the connector does. Both write into the same kind of collection (VARCHAR key, HNSW/cosine on the server, FLAT
on Lite) and scan the same flushed collection. The server runs with its default settings (200 ms time tick).
Milvus Lite is measured on ``lite_n`` vectors and twice the repeats (it moves ~5,000 vectors/s, so one run is
short and noisy).

    python bench/connectors_milvus.py [n] [dim] [repeats] [lite_n]
"""
from __future__ import annotations

import sys
import tempfile
import uuid
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the engine plugin lives in the repo's tests/
from _paired import data, paired_vps, result_row  # noqa: E402

from tests.connectors.engines.milvus_server import MilvusServer  # noqa: E402
from vecbridge.connectors import VectorBatch, connect  # noqa: E402
from vecbridge.connectors.milvus import MilvusCollection  # noqa: E402

BATCH = 5000


def _measure(store: str, make_url: Callable[[str], str], n: int, dim: int, repeats: int) -> list[dict]:
    ids, vectors, payloads = data(n, dim)

    def fresh() -> MilvusCollection:
        return connect(make_url(f"b_{uuid.uuid4().hex[:10]}")).create(dim=dim)

    def ours_upsert(coll: MilvusCollection) -> None:
        for lo in range(0, n, BATCH):
            coll.upsert(VectorBatch(ids[lo:lo + BATCH], vectors[lo:lo + BATCH], payloads[lo:lo + BATCH]))

    def native_upsert(coll: MilvusCollection) -> None:
        client = coll._client
        for lo in range(0, n, BATCH):
            client.upsert(coll.name, [{"id": ids[i], "vector": vectors[i], "payload": payloads[i]}
                                      for i in range(lo, min(lo + BATCH, n))])

    def ours_scan(coll: MilvusCollection) -> None:
        assert sum(len(batch) for batch in coll.scan(batch_size=BATCH)) == n

    def native_scan(coll: MilvusCollection) -> None:
        iterator = coll._client.query_iterator(coll.name, batch_size=BATCH, output_fields=["id", "vector", "payload"])
        count = 0
        while rows := iterator.next():
            batch = ([row["id"] for row in rows], np.asarray([row["vector"] for row in rows], dtype=np.float32),
                     [row["payload"] for row in rows])
            count += len(batch[0])
        iterator.close()
        assert count == n

    upsert = paired_vps(n, repeats, fresh, ours_upsert, native_upsert)
    filled = fresh()
    native_upsert(filled)
    filled._client.flush(filled.name)
    filled.info()  # loads the collection outside the timed part
    scan = paired_vps(n, repeats, lambda: filled, ours_scan, native_scan, drop=False)
    filled.drop()
    return [{**result_row(store, "upsert", upsert), "n": n}, {**result_row(store, "scan", scan), "n": n}]


def run(n: int = 100_000, dim: int = 384, repeats: int = 5, lite_n: int = 10_000) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="vecbridge-bench-milvus-") as tmp:
        server = MilvusServer(Path(tmp) / "server").start()
        try:
            rows += _measure("milvus", server.url, n, dim, repeats)
        finally:
            server.stop()
        if lite_n:
            rows += _measure("milvus-lite", lambda name: f"milvus://{tmp}/lite.db/{name}", lite_n, dim, 2 * repeats)
    return rows


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:5]]
    for row in run(*args):
        print(row)
