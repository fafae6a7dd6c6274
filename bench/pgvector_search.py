"""The ``postgresql://`` connector's k-NN search beside plain psycopg + pgvector, and beside its former statement
sequence, on a private PostgreSQL 18 with an HNSW index.

One query vector per call, k = 10, as an application's search makes it, by 1 and by 8 threads (a connection each).
Three ways, taking turns in every round so that the machine's load hits them alike:

* ``connector``: ``PgVectorCollection.search`` (``hnsw.ef_search`` set for the session once, then one ``SELECT``);
* ``four statements``: the same query inside ``BEGIN; SET LOCAL hnsw.ef_search; SELECT; COMMIT`` (the connector's
  former way, kept here as the baseline);
* ``plain psycopg``: one ``SELECT id FROM t ORDER BY embedding <=> %s LIMIT k`` with pgvector's type registered,
  at the server's default ``ef_search`` (the floor: nothing but the query).

The records are random unit vectors (the latency of the round trips, not the recall, is measured). Medians over
``rounds`` of queries per second and p50 / p99 latency.

    python bench/pgvector_search.py [--records 20000] [--seconds 8] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.connectors.engines.pgvector import PgServer  # noqa: E402
from vecbridge.connectors import VectorBatch, connect  # noqa: E402

DIM, K = 384, 10


def _unit(rng, n):
    x = rng.normal(size=(n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def phase(threads: int, seconds: float, make_call) -> dict:
    """``threads`` threads, each with its own call (and connection), for ``seconds``: q/s, p50, p99 (ms)."""
    calls = [make_call() for _ in range(threads)]
    lat: list[list[float]] = [[] for _ in range(threads)]
    stop = time.monotonic() + seconds

    def worker(t):
        i = 0
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            calls[t](i)
            lat[t].append(time.perf_counter() - t0)
            i += 1

    ths = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    t0 = time.perf_counter()
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    wall = time.perf_counter() - t0
    all_lat = sorted(x for row in lat for x in row)
    return {"qps": len(all_lat) / wall, "p50_ms": 1000 * statistics.median(all_lat),
            "p99_ms": 1000 * all_lat[int(0.99 * (len(all_lat) - 1))]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "pgvector_search.json")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    folder = Path(tempfile.mkdtemp(prefix="vecbridge-bench-pgsearch-"))
    server = PgServer(folder).start()
    try:
        url = server.url(f"s_{uuid.uuid4().hex[:8]}")
        coll = connect(url).create(dim=DIM, index=False)
        for lo in range(0, args.records, 10_000):
            n = min(10_000, args.records - lo)
            coll.upsert(VectorBatch(list(range(lo, lo + n)), _unit(rng, n), [{}] * n))
        coll.build_index()
        queries = _unit(rng, 500)
        table = coll.table_ident
        former = None

        def connector():
            c = connect(url, read_only=True)
            return lambda i: c.search(queries[i % len(queries)][None], K)

        def four_statements():
            nonlocal former
            c = connect(url, read_only=True)
            c.search(queries[:1], K)   # its query, as the connector builds it, captured below
            conn = psycopg.connect(server.dsn(), autocommit=True)
            register_vector(conn)
            q = sql.SQL("SELECT q.n, r.id, r.d FROM unnest(%s::vector[]) WITH ORDINALITY AS q(v, n) CROSS JOIN "
                        "LATERAL (SELECT id::int8 AS id, embedding <=> q.v AS d FROM {} ORDER BY embedding <=> q.v "
                        "LIMIT %s) r WHERE r.d IS NOT NULL ORDER BY q.n, r.d").format(table)

            def call(i):
                with conn.transaction():
                    conn.execute("SET LOCAL hnsw.ef_search = 100")
                    return conn.execute(q, [[queries[i % len(queries)]], K]).fetchall()
            return call

        def plain():
            conn = psycopg.connect(server.dsn(), autocommit=True)
            register_vector(conn)
            q = sql.SQL("SELECT id FROM {} ORDER BY embedding <=> %s LIMIT %s").format(table)
            return lambda i: conn.execute(q, [queries[i % len(queries)], K]).fetchall()

        ways = {"connector": connector, "four statements": four_statements, "plain psycopg": plain}
        runs: dict = {}
        for threads in (1, 8):
            for _ in range(args.rounds):
                for name, make in ways.items():
                    r = phase(threads, args.seconds, make)
                    runs.setdefault((threads, name), []).append(r)
                    print(f"  {threads} thread(s) {name}: {r['qps']:.0f} q/s, p50 {r['p50_ms']:.2f} ms, "
                          f"p99 {r['p99_ms']:.2f} ms", flush=True)
        rows = [{"threads": t, "way": name, **{m: statistics.median(r[m] for r in rs)
                                                 for m in ("qps", "p50_ms", "p99_ms")}, "rounds": rs}
                for (t, name), rs in runs.items()]
        doc = {"records": args.records, "dim": DIM, "k": K, "seconds": args.seconds, "rounds": args.rounds,
               "rows": rows}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1))
        print("\n| threads | way | queries/s | p50 ms | p99 ms |\n|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['threads']} | {r['way']} | {r['qps']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
