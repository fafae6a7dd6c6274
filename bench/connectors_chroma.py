"""Throughput of the ``chroma://`` connector beside plain chromadb code, against a real ``chroma run`` server.

Each op runs ``repeats`` times on ``n`` random vectors with string ids and a small payload (scalars, so both sides
write the same metadata); the table reports median vectors/s. "native" is the plain chromadb way:
``collection.upsert`` in chunks of ``client.get_max_batch_size()`` and ``collection.get(limit, offset)`` pages
with embeddings, metadatas and documents (what a migration must carry), embeddings stacked into float32 numpy as
the connector does. Both write into the same kind of collection (cosine HNSW), whose index build dominates the
write time.

    python bench/connectors_chroma.py [n] [dim] [repeats]
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the engine plugin lives in the repo's tests/
from _paired import data, paired_vps, result_row  # noqa: E402

from tests.connectors.engines.chroma_server import ChromaServer  # noqa: E402
from vecbridge.connectors import VectorBatch, connect  # noqa: E402
from vecbridge.connectors.chroma import ChromaCollection  # noqa: E402

BATCH = 5000


def run(n: int = 100_000, dim: int = 384, repeats: int = 5) -> list[dict]:
    ids, vectors, payloads = data(n, dim)
    workdir = Path(tempfile.mkdtemp(prefix="vecbridge-bench-chroma-"))
    server = ChromaServer(workdir).start()
    try:
        def fresh() -> ChromaCollection:
            return connect(server.url(f"bench_{uuid.uuid4().hex[:8]}")).create(dim=dim, metric="cosine")

        def vb_upsert(coll: ChromaCollection) -> None:
            for lo in range(0, n, BATCH):
                coll.upsert(VectorBatch(ids[lo:lo + BATCH], vectors[lo:lo + BATCH], payloads[lo:lo + BATCH]))

        def native_upsert(coll: ChromaCollection) -> None:
            client = coll.client()
            handle = client.get_collection(coll.name, embedding_function=None)
            step = client.get_max_batch_size()
            for lo in range(0, n, step):
                handle.upsert(ids=ids[lo:lo + step], embeddings=vectors[lo:lo + step],
                              metadatas=payloads[lo:lo + step])

        def vb_scan(coll: ChromaCollection) -> None:
            for _ in coll.scan(batch_size=BATCH):
                pass

        def native_scan(coll: ChromaCollection) -> None:
            handle = coll.client().get_collection(coll.name, embedding_function=None)
            offset = 0
            while True:
                page = handle.get(limit=BATCH, offset=offset, include=["embeddings", "metadatas", "documents"])
                if not page["ids"]:
                    return
                np.asarray(page["embeddings"], dtype=np.float32)
                offset += len(page["ids"])

        upsert = result_row("chroma", "upsert", paired_vps(n, repeats, fresh, vb_upsert, native_upsert))
        filled = fresh()
        vb_upsert(filled)
        scan = result_row("chroma", "scan", paired_vps(n, repeats, lambda: filled, vb_scan, native_scan, drop=False))
        filled.drop()
        return [upsert, scan]
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    for result in run(*args):
        print(result)
