"""What `upgrade reembed` costs beside its model: the job's seconds per record with a model that answers at once (a
lookup of the corpus's recorded all-MiniLM-L6-v2 vectors), so that what remains is reading, writing and stamping the
batches in the file store, the continuous refit's sums and its refits. On a GPU this is most of the job (bench
README: 14 of 21.5 s for 9,500 records on an H200).

Baseline in the same run: the refit's sums updated batch by batch (``FOLD_ROWS = 1``, as before) against pairs
added to them in blocks of ``FOLD_ROWS`` (the default), each with the BLAS library's own threads (as a command runs)
and with one (threadpoolctl). Alternating, medians of ``--repeats``; each run starts a fresh upgrade (old vectors:
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


def one_run(folder: Path, texts: list[str], old: np.ndarray, fold_rows: int, fit_sample: int) -> dict:
    url = f"file://{folder}/old"
    coll = connect(url).create(dim=old.shape[1], metric="cosine")
    coll.upsert(VectorBatch([f"d{i}" for i in range(len(texts))], old, [{"text": t} for t in texts]))
    state = folder / "u.upgrade.sqlite"
    start(url, model=MODEL, text_field="text", state_path=state, to=f"file://{folder}/new", fit_sample=fit_sample)
    refit_module.FOLD_ROWS = fold_rows
    with open_upgrade(state) as up:
        t0 = time.perf_counter()
        result = up.reembed()
        seconds = time.perf_counter() - t0
    return {"fold_rows": fold_rows, "records": result["reembedded"], "seconds": seconds,
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

    default = refit_module.FOLD_ROWS
    blas_threads = max((p.get("num_threads") or 1 for p in threadpool_info() if p.get("user_api") == "blas"),
                       default=1)
    runs, load = [], os.getloadavg()[0]
    for rep in range(args.repeats):
        for threads in (None, 1):
            for fold in (1, default):
                with tempfile.TemporaryDirectory(prefix="vecbridge-reembed-overhead-") as tmp, \
                        threadpool_limits(limits=threads, user_api="blas"):
                    run = one_run(Path(tmp), texts, old, fold, args.fit_sample)
                run["blas_threads"] = threads or blas_threads
                runs.append(run)
                print(json.dumps(run), flush=True)
    refit_module.FOLD_ROWS = default

    def median(fold, threads):
        return statistics.median(r["seconds"] for r in runs if r["fold_rows"] == fold and r["blas_threads"] == threads)

    rows = [{"blas_threads": t, "per_batch_s": median(1, t), "in_blocks_s": median(default, t),
             "ratio": median(1, t) / median(default, t)} for t in dict.fromkeys((blas_threads, 1))]
    result = {"corpus": args.corpus, "records": runs[0]["records"], "repeats": args.repeats, "fold_rows": default,
              "cores": os.cpu_count(), "load_average": load, "load_average_end": os.getloadavg()[0], "rows": rows,
              "runs": runs}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for r in rows:
        print(f"{r['blas_threads']} BLAS threads: median {r['per_batch_s']:.2f} s per batch, {r['in_blocks_s']:.2f} s "
              f"in blocks ({r['ratio']:.2f}x)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
