"""What mapping each row independently of its batch costs: the row-stable product of an alignment artifact
(vecbridge.numeric.rowwise: rows and matrix rounded so the float64 BLAS product is exact) against the float32 BLAS
product it replaces, on real vectors of both corpora. A benchmark, not a test.

For each corpus and model pair: an orthogonal map (centred) fitted on 5,000 true pairs, then all 10,000 documents
mapped in batches of ``--batch`` rows, alternating the two paths ``--repeats`` times; medians and their ratio.
Accuracy: the largest relative error (L2, per row) of each path against the float64 product, over all rows.

Run: ``python bench/rowwise.py [--repeats 7] [--batch 1000]``; writes bench/results/rowwise.json.
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _corpora import DATA, embeddings  # noqa: E402

from vecbridge.align import Alignment, OrthogonalProcrustes  # noqa: E402

PAIRS = (("minilm6", "mpnet"), ("mpnet", "minilm3"), ("minilm6", "minilm3"))


def timed(fn, X, batch: int) -> float:
    t = time.perf_counter()
    for lo in range(0, len(X), batch):
        fn(X[lo:lo + batch])
    return time.perf_counter() - t


def run_pair(corpus: str, a: str, b: str, repeats: int, batch: int) -> dict:
    X, Y = embeddings(DATA / corpus, a), embeddings(DATA / corpus, b)
    est = OrthogonalProcrustes(center=True).fit(X[:5000], Y[:5000])
    artifact = Alignment.from_estimator(est)
    M32, mu_x, mu_y = (est.matrix_.astype(np.float32), est.source_mean_.astype(np.float32),
                       est.target_mean_.astype(np.float32))
    blas = lambda Z: (Z - mu_x) @ M32 + mu_y
    stable = artifact.transform
    stable(X[:batch])                                     # build the rounded matrix once, as a migration does
    t_stable, t_blas = [], []
    for _ in range(repeats):
        t_stable.append(timed(stable, X, batch))
        t_blas.append(timed(blas, X, batch))
    exact = (X.astype(np.float64) - est.source_mean_) @ est.matrix_ + est.target_mean_
    err = lambda Z: float((np.linalg.norm(Z - exact, axis=1) / np.linalg.norm(exact, axis=1)).max())
    return {"corpus": corpus, "pair": f"{a}->{b}", "dims": f"{X.shape[1]}->{Y.shape[1]}", "rows": len(X),
            "batch": batch, "repeats": repeats, "stable_s": statistics.median(t_stable),
            "blas_s": statistics.median(t_blas), "ratio": statistics.median(t_stable) / statistics.median(t_blas),
            "stable_max_rel_err": err(stable(X)), "blas_max_rel_err": err(blas(X))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "rowwise.json"))
    args = ap.parse_args()
    rows = []
    for corpus in ("wordnet", "foldoc"):
        for a, b in PAIRS:
            r = run_pair(corpus, a, b, args.repeats, args.batch)
            print(f"{corpus} {r['pair']}: row-stable {r['stable_s'] * 1000:.0f} ms, float32 BLAS "
                  f"{r['blas_s'] * 1000:.0f} ms ({r['ratio']:.2f}x); max relative error {r['stable_max_rel_err']:.1e} "
                  f"vs {r['blas_max_rel_err']:.1e}", flush=True)
            rows.append(r)
    machine = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
               "load_at_start": os.getloadavg()[0], "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
               "coretype": os.environ.get("OPENBLAS_CORETYPE", "default")}
    Path(args.out).write_text(json.dumps({"machine": machine, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
