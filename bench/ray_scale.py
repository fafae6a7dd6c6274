"""Migration on Ray: throughput with 1, 2 and 4 Ray workers against the single-process pipeline. A benchmark, not a
test.

For each store the machine can start (the engine plugins the test suite uses), a source of N vectors (default
1,000,000: the real all-MiniLM-L6-v2 vectors of ../shared/data/wordnet, tiled with small Gaussian noise to reach N,
so most rows are near-copies of 10,000 real ones) is migrated 384 -> 384 into paraphrase-MiniLM-L3-v2's space (an
orthogonal map fitted on 5,000 real pairs):

* ``local``: ``vecbridge.jobs.migrate`` (one process: a reader thread and a writer), the baseline;
* ``ray xW``: ``migrate`` on the Ray engine with W workers on a Ray instance started once for the store (as on a cluster that
  is already running; its start-up is timed apart), the same source, a fresh target each time.

Every run writes a new collection without building its vector index (``build_index=False``: the index build is the
store's own work, the same whichever engine wrote the rows), is checked for its count, then dropped. Throughput is
vectors written per second of the job's own wall time, median over ``--repeats`` runs; the overhead of Ray at one
worker is ``local rate / ray x1 rate - 1``.

Run: ``python bench/ray_scale.py [--n 1000000] [--stores file,pgvector,milvus_server] [--workers 1,2,4] [--repeats 1]``;
writes bench/results/ray_scale.json and prints a Markdown table.
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
from importlib import import_module
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vecbridge.align import Alignment, OrthogonalProcrustes  # noqa: E402
from vecbridge.connectors import VectorBatch, connect  # noqa: E402
from vecbridge.jobs import migrate  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "wordnet"
OUT = ROOT / "bench" / "results" / "ray_scale.json"


def vectors(n: int, seed: int = 0) -> np.ndarray:
    """N rows: the 10,000 real vectors repeated, each copy with noise of standard deviation 0.01 per coordinate."""
    base = np.load(DATA / "minilm6_docs.npy").astype(np.float32)
    rng = np.random.default_rng(seed)
    out = np.empty((n, base.shape[1]), np.float32)
    for lo in range(0, n, len(base)):
        hi = min(lo + len(base), n)
        out[lo:hi] = base[: hi - lo] + 0.01 * rng.standard_normal((hi - lo, base.shape[1]), dtype=np.float32)
    return out


def alignment(tmp: Path) -> Path:
    X = np.load(DATA / "minilm6_docs.npy").astype(np.float32)[:5000]
    Y = np.load(DATA / "minilm3_docs.npy").astype(np.float32)[:5000]
    return Alignment.from_estimator(OrthogonalProcrustes().fit(X, Y)).save(tmp / "bench.vb")


def fill(url: str, n: int, batch: int = 10_000) -> None:
    coll = connect(url)
    coll.create(dim=384, metric="cosine", **({"index": False} if coll.supports_deferred_index else {}))
    V = vectors(n)
    for lo in range(0, n, batch):
        hi = min(lo + batch, n)
        coll.upsert(VectorBatch([f"id-{i:08d}" for i in range(lo, hi)], V[lo:hi], [{"n": i} for i in range(lo, hi)]))


def drop(url: str) -> None:
    coll = connect(url)
    if coll.exists():
        coll.drop()


def timed(run, url: str, n: int) -> float:
    t = time.perf_counter()
    run()
    seconds = time.perf_counter() - t
    held = connect(url).info().count
    if held != n:
        raise SystemExit(f"{url}: {held} records after the run, expected {n}")
    drop(url)
    return seconds


def bench_store(name: str, n: int, workers: list[int], repeats: int, tmp: Path) -> dict:
    import ray

    from vecbridge.runtime.ray_engine import RayEngine

    module = import_module(f"tests.connectors.engines.{name}")
    reason = module.unavailable()
    if reason:
        return {"store": name, "skipped": reason}
    eng = module.start(tmp / name)
    try:
        align = alignment(tmp)
        src = eng.url("src")
        t = time.perf_counter()
        fill(src, n)
        load_s = time.perf_counter() - t
        print(f"{name}: source of {n:,} loaded in {load_s:.0f} s", flush=True)
        t = time.perf_counter()
        ray.init(address="local", num_cpus=max(workers), include_dashboard=False, _node_ip_address="127.0.0.1",
                 logging_level="WARNING", log_to_driver=False)
        ray_start_s = time.perf_counter() - t
        runs: dict[str, list[float]] = {"local": [], **{f"ray x{w}": [] for w in workers}}
        try:
            for r in range(repeats):
                url = eng.url(f"local{r}")
                runs["local"].append(timed(lambda: migrate(src, align, url, build_index=False,
                                                           checkpoint_path=tmp / f"l{name}{r}.json"), url, n))
                print(f"{name} local: {n / runs['local'][-1]:,.0f} vectors/s", flush=True)
                for w in workers:
                    url = eng.url(f"ray{w}x{r}")
                    runs[f"ray x{w}"].append(timed(lambda: migrate(
                        src, align, url, engine=RayEngine(workers=w), build_index=False,
                        checkpoint_path=tmp / f"r{name}{w}{r}.json"), url, n))
                    print(f"{name} ray x{w}: {n / runs[f'ray x{w}'][-1]:,.0f} vectors/s", flush=True)
        finally:
            ray.shutdown()
        rates = {k: n / statistics.median(v) for k, v in runs.items()}
        return {"store": name, "n": n, "load_seconds": round(load_s, 1), "ray_start_seconds": round(ray_start_s, 1),
                "seconds": {k: [round(s, 2) for s in v] for k, v in runs.items()},
                "rate": {k: round(v) for k, v in rates.items()},
                "speedup": {k: round(rates[k] / rates["local"], 3) for k in rates},
                "overhead_at_1_worker": round(rates["local"] / rates["ray x1"] - 1, 3) if "ray x1" in rates else None}
    finally:
        drop(eng.url("src"))
        eng.stop()


def table(results: list[dict]) -> str:
    done = [r for r in results if "rate" in r]
    if not done:
        return "(no store ran)"
    keys = list(done[0]["rate"])
    lines = ["| store | " + " | ".join(f"{k} (vectors/s)" for k in keys) + " | Ray overhead at 1 worker |",
             "|---|" + "---:|" * (len(keys) + 1)]
    for r in done:
        cells = [f"{r['rate'][k]:,} ({r['speedup'][k]:.2f}x)" for k in keys]
        over = r["overhead_at_1_worker"]
        lines.append(f"| {r['store']} | " + " | ".join(cells) + (f" | {over:+.1%} |" if over is not None else " | - |"))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--stores", default="file,pgvector,milvus_server")
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args()
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    # Ray starts its workers at niceness 15; the baseline runs at 0. On an idle machine that changes nothing, on a
    # shared one it would handicap Ray: both run at the same priority here
    os.environ.setdefault("RAY_worker_niceness", "0")
    workers = [int(w) for w in args.workers.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="vb-ray-bench-"))
    t0 = time.perf_counter()
    results: list[dict] = []
    try:
        for store in args.stores.split(","):
            results.append(bench_store(store, args.n, workers, args.repeats, tmp))
            out = {"command": "python bench/ray_scale.py " + " ".join(sys.argv[1:]), "cores": os.cpu_count(),
                   "machine": platform.machine(), "n": args.n, "workers": workers, "repeats": args.repeats,
                   "seconds_total": round(time.perf_counter() - t0), "stores": results}
            Path(args.out).write_text(json.dumps(out, indent=2) + "\n")   # after each store: a crash keeps the rest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(table(results))


if __name__ == "__main__":
    main()
