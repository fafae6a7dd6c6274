"""What keeping each record's stamp in the store costs, and what a filtered scan of the stamps buys: an upgrade's
collection of N records (real all-MiniLM-L6-v2 vectors of the wordnet sample, tiled with noise, each with a short
text payload) in the file store and in a private PostgreSQL+pgvector.

Per store, alternating, medians of ``--repeats`` (by default 9 for the file store, whose writes take a fraction of a
second and vary with the disk's fsync, and 3 for pgvector):

* ``upsert``: N records written in batches of ``--batch`` (2,000) into a fresh collection, without stamps and with the stamps an
  upgrade writes (origin, made by, space digest, model, dimension, record digest, residual and hub scores; one
  :class:`Stamper` call per batch, as ``upgrade start`` and ``reembed`` make them): the overhead of stamping in the
  same write (making the stamps, mostly hashing each record for its digest, is timed once on its own);
* ``mapped``: the ids still mapped (a quarter of the records are native) by :meth:`Collection.scan_stamps` with
  ``origins=["mapped", "pending"]`` (the store filters, no vectors read), against a full ``scan`` of the records
  filtered here (what the stamps would cost without a filter);
* ``lookup``: the stamps of 1,000 random ids by ``stamps_of``, against ``get`` of the same ids.

Run: ``python bench/record_stamps.py [--records 100000] [--batch 2000] [--no-index] [--repeats N]``; writes bench/results/record_stamps.json.
A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vecbridge.connectors import VectorBatch, connect  # noqa: E402
from vecbridge.runtime.record_stamps import Stamper, record_digest  # noqa: E402

BATCH = 2000
#: runs per store unless --repeats says: the file store's writes are short and noisy, pgvector's take a minute
DEFAULT_REPEATS = {"file": 9, "pgvector": 3}
BENCH = Path(__file__).resolve().parent


def records(n: int) -> tuple[list[str], np.ndarray, list[dict]]:
    base = np.load(ROOT.parent / "shared" / "data" / "wordnet" / "minilm6_docs.npy").astype(np.float32)
    rng = np.random.default_rng(0)
    rows = base[np.arange(n) % len(base)] + 0.01 * rng.standard_normal((n, base.shape[1])).astype(np.float32)
    ids = [f"r{i:07d}" for i in range(n)]
    return ids, rows, [{"text": f"record {i} of the benchmark"} for i in range(n)]


def stamps_for(ids, vectors, payloads, batch: int = BATCH) -> list:
    """The stamps of each batch of ``BATCH`` records as an upgrade makes them (one :class:`Stamper` call per batch):
    every fourth batch native (what ``reembed`` writes), the others mapped (what ``start`` writes)."""
    mapped = Stamper("mapped", "0123456789abcdef0123", None, vectors.shape[1])
    native = Stamper("native", "sentence-transformers/all-MiniLM-L6-v2", None, vectors.shape[1])
    out = []
    for lo in range(0, len(ids), batch):
        hi = min(lo + batch, len(ids))
        make = native if (lo // batch) % 4 == 0 else mapped
        j = np.arange(lo, hi)
        out.append(make(hi - lo, digests=[record_digest(v, p["text"]) for v, p in zip(vectors[lo:hi], payloads[lo:hi])],
                        residuals=0.1 + j % 7 / 100, hubness=0.3 + j % 11 / 100))
    return out


def write(url: str, ids, vectors, payloads, stamps, batch: int = BATCH, index: bool = True) -> float:
    coll = connect(url).create(dim=vectors.shape[1], index=index)
    t = time.perf_counter()
    for lo in range(0, len(ids), batch):
        hi = lo + batch
        coll.upsert(VectorBatch(ids[lo:hi], vectors[lo:hi], payloads[lo:hi],
                                stamps=None if stamps is None else stamps[lo // batch]))
    return time.perf_counter() - t


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def bench_store(name: str, url_of, n: int, repeats: int, batch: int = BATCH, index: bool = True) -> dict:
    ids, vectors, payloads = records(n)
    made, stamps = timed(lambda: stamps_for(ids, vectors, payloads, batch))
    runs: dict[str, list[float]] = {k: [] for k in (
        "upsert_plain", "upsert_stamped", "mapped_scan_stamps", "mapped_full_scan", "lookup_stamps_of", "lookup_get")}
    rng = np.random.default_rng(1)
    want = sum(s["origin"] == "mapped" for batch in stamps for s in batch)
    for r in range(repeats):
        for kind in (("plain", "stamped") if r % 2 == 0 else ("stamped", "plain")):
            url = url_of(f"bench_{kind}_{r}")
            runs[f"upsert_{kind}"].append(write(url, ids, vectors, payloads, stamps if kind == "stamped" else None,
                                                     batch, index))
            if kind == "plain":
                connect(url).drop()
        # each read from a handle of its own: a file handle keeps the payloads it decoded, which would favour
        # whichever read came second
        fresh = lambda: connect(url_of(f"bench_stamped_{r}"), read_only=True)   # noqa: E731
        coll = fresh()
        s, got = timed(lambda: sum(len(i) for i, _ in coll.scan_stamps(batch_size=5000, origins=["mapped", "pending"])))
        assert got == want, (got, want)
        runs["mapped_scan_stamps"].append(s)
        coll = fresh()
        s, got = timed(lambda: sum(sum(1 for st in b.stamps if st and st["origin"] in ("mapped", "pending"))
                                   for b in coll.scan(batch_size=5000)))
        assert got == want, (got, want)
        runs["mapped_full_scan"].append(s)
        pick = [ids[i] for i in rng.choice(n, size=1000, replace=False)]
        coll = fresh()
        runs["lookup_stamps_of"].append(timed(lambda: coll.stamps_of(pick))[0])
        coll = fresh()
        runs["lookup_get"].append(timed(lambda: coll.get(pick))[0])
        connect(url_of(f"bench_stamped_{r}")).drop()
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {"store": name, "records": n, "runs": runs, "median_s": med, "making_stamps_s": made,
            "stamp_overhead": med["upsert_stamped"] / med["upsert_plain"] - 1,
            "filtered_vs_full_scan": med["mapped_full_scan"] / med["mapped_scan_stamps"],
            "stamps_of_vs_get": med["lookup_get"] / med["lookup_stamps_of"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--no-index", dest="index", action="store_false",
                    help="create the collections without their vector index (an upgrade's bulk load builds it after)")
    ap.add_argument("--batch", type=int, nargs="+", default=[BATCH],
                    help="records per upsert, one run each (start writes 1,000 at a time into the file store and "
                         "PostgreSQL, reembed --batch-size, 64 by default)")
    ap.add_argument("--repeats", type=int, default=None, help="runs per store (default: 9 file, 3 pgvector)")
    ap.add_argument("--stores", nargs="+", default=["file", "pgvector"])
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "record_stamps.json")
    args = ap.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="vecbridge-bench-stamps-"))
    server = None
    rows = []
    try:
        for store in args.stores:
            if store == "file":
                url_of = lambda name: f"file://{folder / name}"   # noqa: E731
            else:
                from tests.connectors.engines.pgvector import PgServer
                (folder / "pg").mkdir()
                server = PgServer(folder / "pg").start()
                url_of = server.url
            for batch in args.batch:
                print(f"{store}: {args.records:,} records in batches of {batch:,}, load average "
                      f"{os.getloadavg()[0]:.1f}", flush=True)
                row = bench_store(store, url_of, args.records, args.repeats or DEFAULT_REPEATS[store], batch,
                                  args.index)
                row.update(batch=batch, index=args.index, load_average=os.getloadavg()[0])
                rows.append(row)
                m = row["median_s"]
                print(f"  upsert {m['upsert_plain']:.2f} s plain, {m['upsert_stamped']:.2f} s stamped "
                      f"({row['stamp_overhead']:+.0%}); still mapped: {m['mapped_scan_stamps']:.2f} s filtered, "
                      f"{m['mapped_full_scan']:.2f} s full scan; 1,000 stamps {m['lookup_stamps_of'] * 1000:.0f} ms, "
                      f"get {m['lookup_get'] * 1000:.0f} ms", flush=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} cores",
                                    "command": "python bench/record_stamps.py " + " ".join(argv or sys.argv[1:]),
                                    "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
