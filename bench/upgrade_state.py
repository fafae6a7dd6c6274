"""What one transaction per batch buys the upgrade's state file: stamping N records (as ``upgrade start`` does, in
batches of 2,000, each stamp with its digest, residual and hub score) with today's
:class:`vecbridge.jobs.upgrade.state.UpgradeState` against the per-row commits it replaced: the same SQL, the same
rows, run through ``with db: db.executemany(...)`` on a connection in autocommit mode (``isolation_level=None``),
where ``with db:`` begins no transaction, so each row commits, and syncs the disk, on its own. A benchmark, not a
test.

Each run writes a fresh state file in ``--dir`` (on the disk the state would be on: a tmpfs hides the syncs); the
two ways alternate; medians of ``--repeats``. The per-row way is measured up to ``--per-row-max`` records (2-16 ms per
record here, depending on the disk's load: 1,000,000 would take hours per run), a run stopped after
``--per-row-cap`` seconds counting at its own rate; its figure for larger N is extrapolated from the largest
measured N at that N's rate, and marked so.

Run: ``python bench/upgrade_state.py [--sizes 10000 1000000] [--per-row-max 100000] [--per-row-cap 120]
[--repeats 3]``; writes bench/results/upgrade_state.json.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vecbridge.jobs.upgrade.state import UpgradeState, _key, _shuffle  # noqa: E402

BATCH = 2000
META = {"source": "file:///bench/src", "stage": "starting", "serving": "old", "model": "m", "text_field": "text",
        "alignment": "", "target": "file:///bench/new", "field": None}
#: the statement ``stamp`` ran before one transaction per batch (and still runs, inside one)
STAMP_SQL = ("INSERT INTO records (id, origin, made_by, updated, shuffle, residual, hubness, digest) "
             "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET origin = excluded.origin, "
             "made_by = excluded.made_by, updated = excluded.updated, "
             "residual = coalesce(excluded.residual, records.residual), "
             "hubness = coalesce(excluded.hubness, records.hubness), "
             "digest = coalesce(excluded.digest, records.digest)")


def batches(n: int):
    """``(ids, residuals, hubness, digests)`` in batches of :data:`BATCH`, the same in every run."""
    for lo in range(0, n, BATCH):
        ids = list(range(lo, min(lo + BATCH, n)))
        yield (ids, [(i % 997) / 997 for i in ids], [(i % 991) / 991 for i in ids],
               [hashlib.blake2b(str(i).encode(), digest_size=12).hexdigest() for i in ids])


def per_batch(path: Path, n: int, cap=None) -> tuple[float, int]:
    """Today's state: each batch of stamps one transaction. Returns ``(seconds, stamps written)``."""
    state = UpgradeState.create(path, META)
    t = time.perf_counter()
    for ids, res, hub, dig in batches(n):
        state.stamp(ids, "mapped", "fingerprint", res, digests=dig, hubness=hub)
    seconds = time.perf_counter() - t
    assert state.counts()["mapped"] == n
    state.close()
    return seconds, n


def per_row(path: Path, n: int, cap: float | None = None) -> tuple[float, int]:
    """The state before: the same rows, a commit per row (``with db:`` in autocommit mode begins nothing). Stops
    after the batch that passes ``cap`` seconds. Returns ``(seconds, stamps written)``."""
    UpgradeState.create(path, META).close()
    db = sqlite3.connect(path, isolation_level=None)
    t, done = time.perf_counter(), 0
    for ids, res, hub, dig in batches(n):
        now, keys = time.time(), [_key(i) for i in ids]
        with db:
            db.executemany(STAMP_SQL, [(k, "mapped", "fingerprint", now, _shuffle(k), r, h, d)
                                       for k, r, h, d in zip(keys, res, hub, dig)])
        done += len(ids)
        if cap is not None and time.perf_counter() - t > cap:
            break
    seconds = time.perf_counter() - t
    assert db.execute("SELECT count(*) FROM records").fetchone()[0] == done
    db.close()
    return seconds, done


def measure(n: int, ways, repeats: int, where: Path, cap: float | None) -> dict:
    """``[(seconds, stamps written)]`` of each way (``per_batch``, ``per_row``) writing ``n`` stamps, ``repeats``
    times, the ways alternating."""
    runs = {fn.__name__: [] for fn in ways}
    for r in range(repeats):
        for fn in ways:
            path = where / f"{fn.__name__}-{n}-{r}.upgrade.sqlite"
            runs[fn.__name__].append(fn(path, n, cap))
            path.unlink()
            seconds, done = runs[fn.__name__][-1]
            print(f"  {fn.__name__} {n:,}: {seconds:.2f} s" + (f" for {done:,} (capped)" if done < n else ""),
                  flush=True)
    return runs


def figure(runs, n: int) -> float:
    """The median time of ``n`` stamps; a run stopped by the cap counts at its own rate."""
    return statistics.median(seconds * n / done for seconds, done in runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--per-row-max", type=int, default=100_000)
    ap.add_argument("--per-row-cap", type=float, default=None,
                    help="stop a per-row run after this many seconds (its figure then comes from its rate)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the state files are written (default: a folder in bench/)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "upgrade_state.json"))
    args = ap.parse_args()
    where = Path(tempfile.mkdtemp(prefix="upgrade_state.", dir=args.dir or ROOT / "bench"))
    per_row_sizes = sorted({n for n in args.sizes if n <= args.per_row_max} | {args.per_row_max})
    rows = []
    try:
        for n in sorted(set(args.sizes) | set(per_row_sizes)):
            print(f"{n:,} stamps", flush=True)
            ways = [fn for fn, sizes in ((per_batch, args.sizes), (per_row, per_row_sizes)) if n in sizes]
            runs = measure(n, ways, args.repeats, where, args.per_row_cap)
            rows.append({"n": n, "per_batch_runs": runs.get("per_batch"), "per_row_runs": runs.get("per_row")})
    finally:
        shutil.rmtree(where, ignore_errors=True)
    largest = max((r for r in rows if r["per_row_runs"]), key=lambda r: r["n"])
    rate = figure(largest["per_row_runs"], largest["n"]) / largest["n"]
    for r in rows:
        r["per_batch_s"] = figure(r["per_batch_runs"], r["n"]) if r["per_batch_runs"] else None
        measured = r["per_row_runs"] is not None
        r["per_row_s"] = figure(r["per_row_runs"], r["n"]) if measured else rate * r["n"]
        r["per_row_capped"] = measured and any(done < r["n"] for _, done in r["per_row_runs"])
        r["per_row_extrapolated_from"] = None if measured else largest["n"]
    machine = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
               "load_at_start": os.getloadavg()[0], "sqlite": sqlite3.sqlite_version, "batch": BATCH,
               "repeats": args.repeats, "per_row_cap_s": args.per_row_cap}
    Path(args.out).write_text(json.dumps({"machine": machine, "rows": rows}, indent=1) + "\n")
    for r in rows:
        if r["per_batch_s"] is not None:
            print(f"{r['n']:,} stamps: {r['per_batch_s']:.2f} s (one transaction per batch) vs {r['per_row_s']:.1f} s "
                  f"(a commit per row{', extrapolated' if r['per_row_extrapolated_from'] or r['per_row_capped'] else ''})")


if __name__ == "__main__":
    main()
