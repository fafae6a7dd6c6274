"""`vecbridge upgrade reembed` end to end on the device its model runs on: records per batch by default (the model's
batch where larger than 64: 256 on a GPU) against ``--batch-size 64`` (the default before), alternating, each
``upgrade start`` and ``upgrade reembed`` in a process of its own. A benchmark, not a test; no network.

The old collection holds the model's own vectors of the texts, rotated by a random orthogonal matrix: the map is
exact, so the run measures the job (model, reading, writing and stamping batches in the file store, refits), not a
map's quality.

    HF_HUB_OFFLINE=1 python bench/gpu_reembed.py --model MODEL_DIR --texts ../shared/data/foldoc/items.jsonl
Writes bench/results/gpu_reembed.json (``--out``).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vecbridge.connectors import VectorBatch, connect  # noqa: E402
from vecbridge.runtime.models import load_model  # noqa: E402

CLI = [sys.executable, "-m", "vecbridge.cli"]
RUNS = [("--batch-size 64", ["--batch-size", "64"]), ("default", [])]


def old_collection(url: str, texts: list[str], model: str) -> dict:
    """The texts' own vectors, rotated, with the texts in the payload; what embedding them took."""
    m = load_model(model)
    vectors = m(texts)
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((vectors.shape[1], vectors.shape[1])))
    coll = connect(url).create(dim=vectors.shape[1], metric="cosine")
    coll.upsert(VectorBatch([f"t{i}" for i in range(len(texts))], (vectors @ q).astype(np.float32),
                            [{"text": t} for t in texts]))
    return m.run()


def one_run(folder: Path, old: str, model: str, i: int, extra: list[str], fit: int) -> dict:
    state = folder / f"run{i}.upgrade.sqlite"
    r = subprocess.run(CLI + ["upgrade", "start", old, "--to-model", model, "--to", f"file://{folder}/new{i}",
                              "--state", str(state), "--fit-sample", str(fit), "--json"],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode:
        return {"failed": "start", "rc": r.returncode, "error": r.stderr[-500:]}
    t0 = time.perf_counter()
    r = subprocess.run(CLI + ["upgrade", "reembed", "--state", str(state), "--json", *extra],
                       capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if r.returncode:
        return {"failed": "reembed", "rc": r.returncode, "error": r.stderr[-500:]}
    done = json.loads(r.stdout)
    return {"reembedded": done["reembedded"], "job_seconds": done["seconds"], "process_wall_s": wall,
            "model_run": done.get("model_run")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a local model directory (or name) run with --device auto")
    ap.add_argument("--texts", required=True, help="a JSONL file of items with a \"doc\" field")
    ap.add_argument("--n", type=int, default=10_000, help="records in the collection")
    ap.add_argument("--fit-sample", type=int, default=500, help="records the start re-embeds to fit the map")
    ap.add_argument("--rounds", type=int, default=2, help="times each setting runs, alternating")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu_reembed.json"))
    args = ap.parse_args(argv)
    with open(args.texts, encoding="utf-8") as fh:
        texts = [json.loads(line)["doc"] for line in fh][:args.n]
    result = {"model": args.model, "texts": f"the first {len(texts):,} documents of {args.texts}",
              "fit_sample": args.fit_sample, "runs": []}
    with tempfile.TemporaryDirectory(prefix="vecbridge-gpu-reembed-") as tmp:
        folder = Path(tmp)
        old = f"file://{folder}/old"
        result["old_collection_embedded"] = old_collection(old, texts, args.model)
        print("old collection embedded:", result["old_collection_embedded"], flush=True)
        for i, (name, extra) in enumerate(RUNS * args.rounds):
            run = {"setting": name, **one_run(folder, old, args.model, i, extra, args.fit_sample)}
            result["runs"].append(run)
            print(json.dumps(run), flush=True)
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")   # what finished, if time runs out
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
