"""Alignment quality and speed on real embeddings (../shared/data/wordnet). A benchmark, not a test.

Quality: for each model pair (old -> new), fit on the first n item pairs (docs embedded by both models; rows are
already a seeded random order) and evaluate on the last 5,000 items, never seen by the fit:

* top-1 / mean cosine: each mapped old doc vs all 5,000 held-out new docs (does it find its own partner?);
* retention@10: Recall@10 of new-model queries over the mapped old docs / over the native new docs (query i is
  relevant to doc i); overlap@10: |top-10 mapped ∩ top-10 native| / 10.

Methods: orthogonal Procrustes, centred orthogonal, ridge (alpha 0.01 relative), no map.

Speed: fit on 10,000 pairs at 768-d (vs scipy.linalg.orthogonal_procrustes on the same arrays, same process), and
transform of 1,000,000 vectors 384 -> 768 through the saved artifact (vs a bare float32 numpy matmul). Medians.

Run: ``python bench/align_real.py [--data ../shared/data/wordnet] [--quick]``; writes bench/results/align_real.json
and prints Markdown tables (copied into README.md).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
from _corpora import DATA, embeddings

from vecbridge import metrics
from vecbridge.align import Alignment, FewPairsWarning, LinearMap, NoMap, OrthogonalProcrustes

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [("minilm6", "mpnet"), ("mpnet", "minilm6"), ("minilm6", "minilm3"), ("minilm3", "minilm6"),
         ("minilm6", "glove50")]
METHODS = {
    "orthogonal": lambda: OrthogonalProcrustes(),
    "orthogonal+centre": lambda: OrthogonalProcrustes(center=True),
    "ridge": lambda: LinearMap(alpha=0.01),
    "no map": lambda: NoMap(),
}
N_FIT = [100, 300, 1000, 3000]
N_EVAL = 5000


def quality(data: Path, n_fit_list, out: list):
    for src, tgt in PAIRS:
        Xd, Yd, Yq = embeddings(data, src, "docs"), embeddings(data, tgt, "docs"), embeddings(data, tgt, "queries")
        held = slice(len(Xd) - N_EVAL, len(Xd))
        Xh, Yh, Qh = Xd[held], Yd[held], Yq[held]
        native_recall = metrics.recall_at_k(Qh, Yh, k=10)
        native_top = metrics.top_k(Qh, Yh, 10)
        for n in n_fit_list:
            for name, make in METHODS.items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FewPairsWarning)
                    est = make().fit(Xd[:n], Yd[:n])
                mapped = est.transform(Xh)
                pq = metrics.pair_quality(mapped, Yh)
                recall = metrics.recall_at_k(Qh, mapped, k=10)
                top = metrics.top_k(Qh, mapped, 10)
                overlap = float(np.mean([len(set(a) & set(b)) for a, b in zip(top, native_top)]) / 10)
                row = {"pair": f"{src}->{tgt}", "n_fit": n, "method": name, "top1": pq.top1,
                       "mean_cosine": pq.mean_cosine, "recall10": recall, "native_recall10": native_recall,
                       "retention10": recall / native_recall, "overlap10": overlap}
                out.append(row)
                print(f"{row['pair']:18s} n={n:5d} {name:18s} top1={pq.top1:.3f} cos={pq.mean_cosine:.3f} "
                      f"ret@10={row['retention10']:.3f} ovl@10={overlap:.3f}", flush=True)


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times


def speed(data: Path, repeats: int, n_transform: int) -> dict:
    from scipy.linalg import orthogonal_procrustes

    rng = np.random.default_rng(0)
    X = embeddings(data, "mpnet", "docs")[:10_000]
    Q = np.linalg.qr(rng.normal(size=(768, 768)))[0]
    Y = (X @ Q + 0.05 * rng.normal(size=X.shape)).astype(np.float32)
    ours, ours_all = timed(lambda: OrthogonalProcrustes().fit(X, Y), repeats)
    scipy_t, scipy_all = timed(lambda: orthogonal_procrustes(X.astype(np.float64), Y.astype(np.float64)), repeats)

    src = embeddings(data, "minilm6", "docs")
    tgt = embeddings(data, "mpnet", "docs")
    alignment = Alignment.from_estimator(OrthogonalProcrustes().fit(src[:5000], tgt[:5000]))
    big = np.tile(src, (n_transform // len(src) + 1, 1))[:n_transform]
    R32 = alignment.tensors["matrix"].astype(np.float32)
    batch = 100_000

    def via_artifact():
        for lo in range(0, n_transform, batch):
            alignment.transform(big[lo:lo + batch])

    def bare_matmul():
        for lo in range(0, n_transform, batch):
            big[lo:lo + batch] @ R32

    tr, tr_all = timed(via_artifact, repeats)
    mm, mm_all = timed(bare_matmul, repeats)
    return {
        "fit_10k_768_s": ours, "fit_10k_768_runs": ours_all,
        "scipy_orthogonal_procrustes_s": scipy_t, "scipy_runs": scipy_all,
        "transform_n": n_transform, "transform_384_to_768_s": tr, "transform_runs": tr_all,
        "bare_matmul_s": mm, "bare_matmul_runs": mm_all,
        "transform_vectors_per_s": n_transform / tr,
    }


def markdown(rows: list, sp: dict | None) -> str:
    """Compact table (top-1 / retention@10 per n), the detailed table at the largest n, and the timings."""
    pairs = list(dict.fromkeys(r["pair"] for r in rows))
    ns = sorted({r["n_fit"] for r in rows})
    cell = {(r["pair"], r["method"], r["n_fit"]): r for r in rows}
    lines = ["top-1 of the true partner / recall retention@10, held-out items", "",
             "| pair (old -> new) | method | " + " | ".join(f"n={n}" for n in ns) + " |",
             "|---|---|" + "---|" * len(ns)]
    for p in pairs:
        for m in METHODS:
            lines.append(f"| {p} | {m} | " + " | ".join(
                f"{cell[p, m, n]['top1']:.3f} / {cell[p, m, n]['retention10']:.3f}" for n in ns) + " |")
    n = ns[-1]
    lines += ["", f"n = {n} anchor pairs in detail ({N_EVAL} held-out items)", "",
              "| pair | method | top-1 | mean cos | Recall@10 mapped (native) | retention@10 | overlap@10 |",
              "|---|---|---|---|---|---|---|"]
    for p in pairs:
        for m in METHODS:
            r = cell[p, m, n]
            lines.append(f"| {p} | {m} | {r['top1']:.3f} | {r['mean_cosine']:.3f} | {r['recall10']:.3f} "
                         f"({r['native_recall10']:.3f}) | {r['retention10']:.3f} | {r['overlap10']:.3f} |")
    if sp:
        lines += ["", "| timing (median of runs) | vecbridge | baseline in the same run | ratio |", "|---|---|---|---|",
                  f"| fit, 10,000 pairs, 768-d | {sp['fit_10k_768_s']:.3f} s | scipy orthogonal_procrustes "
                  f"{sp['scipy_orthogonal_procrustes_s']:.3f} s | "
                  f"{sp['fit_10k_768_s'] / sp['scipy_orthogonal_procrustes_s']:.2f}x |",
                  f"| transform {sp['transform_n']:,} vectors 384->768 | {sp['transform_384_to_768_s']:.2f} s "
                  f"({sp['transform_vectors_per_s'] / 1e6:.2f} M vectors/s) | bare float32 matmul "
                  f"{sp['bare_matmul_s']:.2f} s | {sp['transform_384_to_768_s'] / sp['bare_matmul_s']:.2f}x |"]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DATA / "wordnet"))
    p.add_argument("--quick", action="store_true", help="n=1000 only, 200k transform, 3 repeats")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--skip-quality", action="store_true", help="reuse the quality rows of the last results file")
    args = p.parse_args()
    data = Path(args.data)
    rows: list = []
    results = ROOT / "bench" / "results" / "align_real.json"
    if args.skip_quality and results.is_file():
        rows = json.loads(results.read_text())["quality"]
    else:
        quality(data, [1000] if args.quick else N_FIT, rows)
    sp = None if args.skip_speed else speed(data, 3 if args.quick else args.repeats,
                                             200_000 if args.quick else 1_000_000)
    result = {"machine": f"{platform.machine()} {platform.processor() or ''} cores={__import__('os').cpu_count()}",
              "quality": rows, "speed": sp}
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(result, indent=1))
    print(markdown(rows, sp))


if __name__ == "__main__":
    main()
