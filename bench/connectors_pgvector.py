"""Throughput of the ``postgresql://`` connector beside plain psycopg + pgvector code, on a private PostgreSQL 18.

Each op runs ``repeats`` times on ``n`` random vectors with string ids and a small payload; the table reports median
vectors/s. "native" is the fastest plain way the pgvector docs show: one binary ``COPY ... FROM STDIN`` with
``copy.set_types(["text", "vector", "jsonb"])`` and ``write_row`` straight into the empty table, and one binary
``COPY (SELECT ...) TO STDOUT`` read with ``rows()`` (vectors stacked into numpy as the connector does). The
connector upserts (COPY into a temporary table, then ``INSERT ... ON CONFLICT``) and scans in keyset pages of
``BATCH`` rows. The HNSW index is dropped before writing, on both sides: maintaining it costs the same whichever
way rows arrive (about 250 rows/s at 384 dims on 2 cores) and would hide the client-side cost being measured.

    python bench/connectors_pgvector.py [n] [dim] [repeats]
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import numpy as np
from psycopg import sql
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the engine plugin lives in the repo's tests/
from _paired import data, paired_vps, result_row  # noqa: E402

from tests.connectors.engines.pgvector import PgServer  # noqa: E402
from vecbridge.connectors import VectorBatch, connect  # noqa: E402
from vecbridge.connectors.pgvector import PgVectorCollection  # noqa: E402

BATCH = 10_000


def run(n: int = 100_000, dim: int = 384, repeats: int = 5) -> list[dict]:
    ids, vectors, payloads = data(n, dim)
    workdir = Path(tempfile.mkdtemp(prefix="vecbridge-bench-pg-"))
    server = PgServer(workdir).start()
    try:
        def fresh() -> PgVectorCollection:
            # no HNSW index on either side: maintaining it row by row costs the same for both and dominates
            return connect(server.url(f"bench_{uuid.uuid4().hex[:8]}")).create(dim=dim, metric="cosine", index=False)

        def vb_upsert(coll: PgVectorCollection) -> None:
            for lo in range(0, n, BATCH):
                coll.upsert(VectorBatch(ids[lo:lo + BATCH], vectors[lo:lo + BATCH], payloads[lo:lo + BATCH]))

        def native_upsert(coll: PgVectorCollection) -> None:
            conn = coll._connection()
            with conn.transaction(), conn.cursor() as cur:
                with cur.copy(sql.SQL("COPY {} (id, embedding, payload) FROM STDIN (FORMAT BINARY)").format(
                        coll.table_ident)) as copy:
                    copy.set_types(["text", "vector", "jsonb"])
                    for row in zip(ids, vectors, map(Jsonb, payloads)):
                        copy.write_row(row)

        def vb_scan(coll: PgVectorCollection) -> None:
            for _ in coll.scan(batch_size=BATCH):
                pass

        def native_scan(coll: PgVectorCollection) -> None:
            conn = coll._connection()
            with conn.cursor() as cur:
                with cur.copy(sql.SQL("COPY (SELECT id, embedding, payload FROM {}) TO STDOUT (FORMAT BINARY)")
                              .format(coll.table_ident)) as copy:
                    copy.set_types(["text", "vector", "jsonb"])
                    rows = []
                    for row in copy.rows():
                        rows.append(row)
                        if len(rows) == BATCH:
                            np.stack([r[1].to_numpy() for r in rows]).astype(np.float32)
                            rows = []
                    if rows:
                        np.stack([r[1].to_numpy() for r in rows]).astype(np.float32)

        upsert = result_row("pgvector", "upsert", paired_vps(n, repeats, fresh, vb_upsert, native_upsert))
        filled = fresh()
        vb_upsert(filled)
        scan = result_row("pgvector", "scan", paired_vps(n, repeats, lambda: filled, vb_scan, native_scan, drop=False))
        filled.drop()
        filled.close()
        return [upsert, scan]
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    for result in run(*args):
        print(result)
