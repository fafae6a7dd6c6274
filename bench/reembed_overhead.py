"""What `upgrade reembed` costs beside its model: the job's seconds per record with a model that answers at once (a
lookup of the corpus's recorded all-MiniLM-L6-v2 vectors), so that what remains is reading, writing and stamping the
batches in the file store, the continuous refit's sums and its refits. On a GPU this is most of the job (bench
README: 14 of 21.5 s for 9,500 records on an H200).

Baseline in the same run: the job as it was (the refit's sums updated batch by batch, ``FOLD_ROWS = 1``, and its
small algebra and the hub scores of each batch on every BLAS thread) against the job now (pairs added in blocks of
``FOLD_ROWS``, that work on one thread), each with the BLAS library's own threads (as a command runs) and with one
(threadpoolctl). Alternating, medians of ``--repeats``; each run starts a fresh upgrade (old vectors:
paraphrase-MiniLM-L3-v2's of the corpus) and re-embeds every record but the start's sample. A benchmark, not a
test.

    python bench/reembed_overhead.py --corpus foldoc
Writes bench/results/reembed_overhead.json (``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _corpora import DATA, embeddings  # noqa: E402

from vecbridge.connectors import VectorBatch, connect  # noqa: E402
from vecbridge.jobs.upgrade import open_upgrade, start  # noqa: E402
from vecbridge.runtime import refit as refit_module  # noqa: E402

MODEL = "bench_lookup_model:embed"


def lookup_model(corpus: str) -> tuple[list[str], np.ndarray]:
    """Distinct documents of the corpus, their old vectors; registers the instant new model (by text)."""
    items = [json.loads(line) for line in (DATA / corpus / "items.jsonl").open(encoding="utf-8")]
    new, old = embeddings(DATA / corpus, "minilm6"), embeddings(DATA / corpus, "minilm3")
    first = {}
    for i, it in enumerate(items):
        first.setdefault(it["doc"], i)
    rows = sorted(first.values())
    table = {items[i]["doc"]: new[i] for i in rows}
    module = types.ModuleType("bench_lookup_model")
    module.embed = lambda texts: np.stack([table[t] for t in texts])
    sys.modules[module.__name__] = module
    return [items[i]["doc"] for i in rows], old[rows]


def as_before(on: bool) -> None:
    """The job as it was (``on``): no block, no thread pins in the refit and the stamps; else as it is."""
    import contextlib

    from vecbridge import _blas
    from vecbridge.runtime import record_stamps

    refit_module.FOLD_ROWS = 1 if on else DEFAULT_FOLD
    unpinned = lambda *a, **k: contextlib.nullcontext()  # noqa: E731
    refit_module.one_blas_thread = unpinned if on else _blas.one_blas_thread
    record_stamps.thread_limit = unpinned if on else _blas.thread_limit


DEFAULT_FOLD = refit_module.FOLD_ROWS


def one_run(folder: Path, texts: list[str], old: np.ndarray, before: bool, fit_sample: int) -> dict:
    url = f"file://{folder}/old"
    coll = connect(url).create(dim=old.shape[1], metric="cosine")
    coll.upsert(VectorBatch([f"d{i}" for i in range(len(texts))], old, [{"text": t} for t in texts]))
    state = folder / "u.upgrade.sqlite"
    start(url, model=MODEL, text_field="text", state_path=state, to=f"file://{folder}/new", fit_sample=fit_sample)
    as_before(before)
    try:
        with open_upgrade(state) as up:
            t0 = time.perf_counter()
            result = up.reembed()
            seconds = time.perf_counter() - t0
    finally:
        as_before(False)
    return {"job": "before" if before else "now", "records": result["reembedded"], "seconds": seconds,
            "ms_per_record": 1000 * seconds / max(result["reembedded"], 1), "refits": len(result["refits"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="foldoc", choices=("wordnet", "foldoc"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fit-sample", type=int, default=500)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "reembed_overhead.json"))
    args = ap.parse_args(argv)
    texts, old = lookup_model(args.corpus)
    from threadpoolctl import threadpool_info, threadpool_limits

    blas_threads = max((p.get("num_threads") or 1 for p in threadpool_info() if p.get("user_api") == "blas"),
                       default=1)
    runs, load = [], os.getloadavg()[0]
    for rep in range(args.repeats):
        for threads in (None, 1):
            for before in (True, False):
                with tempfile.TemporaryDirectory(prefix="vecbridge-reembed-overhead-") as tmp, \
                        threadpool_limits(limits=threads, user_api="blas"):
                    run = one_run(Path(tmp), texts, old, before, args.fit_sample)
                run["blas_threads"] = threads or blas_threads
                runs.append(run)
                print(json.dumps(run), flush=True)

    def median(job, threads):
        return statistics.median(r["seconds"] for r in runs if r["job"] == job and r["blas_threads"] == threads)

    rows = [{"blas_threads": t, "before_s": median("before", t), "now_s": median("now", t),
             "ratio": median("before", t) / median("now", t)} for t in dict.fromkeys((blas_threads, 1))]
    result = {"corpus": args.corpus, "records": runs[0]["records"], "repeats": args.repeats, "fold_rows": DEFAULT_FOLD,
              "cores": os.cpu_count(), "load_average": load, "load_average_end": os.getloadavg()[0], "rows": rows,
              "runs": runs}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for r in rows:
        print(f"{r['blas_threads']} BLAS threads: median {r['before_s']:.2f} s as before, {r['now_s']:.2f} s now "
              f"({r['ratio']:.2f}x)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
