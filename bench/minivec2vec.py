"""Unsupervised alignment ("mini-vec2vec: Scaling Universal Geometry Alignment with Linear Transformations", Dar, 2025) on real embeddings (../shared/data/wordnet). A benchmark, not a test.

Protocol (the paper's section 4, scaled to the 10,000 wordnet items): rows are already a seeded random order. The last
2,000 items are held out (embedded by both models, never used in fitting). Of the other 8,000, the source model
embeds items 0..3,999 and the target model items 4,000..7,999: two disjoint halves, no item on both sides, no pair.
``MiniVec2Vec(random_state=seed).fit(src_half, tgt_half)`` with the library defaults, 3 seeds per pair.

Quality, on the 2,000 held-out items (each mapped source doc against all 2,000 target docs):

* paper protocol: ``normalize(x - mu_A) @ W`` against ``y - mu_B`` (the paper centres the evaluation vectors with
  the training means), top-1 accuracy of the true partner and mean rank (1 = best), after each stage;
* user protocol: ``est.transform(x)`` (the affine map a migration applies) against the *raw* target docs, top-1 and
  mean rank; and ``est.procrustes_`` (the nearest orthogonal map, what ``Alignment.from_estimator`` freezes);
* retention@10: Recall@10 of target-model queries (query i relevant to doc i) over the mapped held-out source docs,
  divided by Recall@10 over the native target docs (``vecbridge.metrics.recall_retention``);
* baseline: supervised orthogonal Procrustes (``OrthogonalProcrustes()``) fitted on 1,000 TRUE pairs (items
  0..999), evaluated the same way; and the centred variant for the paper protocol.

Speed: one fit on 10,000 + 10,000 vectors (all source docs vs all target docs; for timing only, so the two sides may
share items), wall and CPU seconds, median of ``--repeats``. Growth 10k -> 100k per side is SYNTHETIC: the 10,000 real
docs of each model plus copies with small Gaussian noise (sigma = 0.05 x the per-dimension std), so the work grows
like a real collection while the geometry stays real.

The machine is shared (2 cores, other engineers' jobs running): load averages are recorded with every timing, and
the OpenBLAS thread count in effect (``OPENBLAS_NUM_THREADS``; with oversubscribed cores LAPACK's SVD is up to 10x
slower with 2 threads than with 1, see the JSON's ``machine``).

Run: ``OPENBLAS_NUM_THREADS=1 python bench/minivec2vec.py [--data ../shared/data/wordnet] [--quick]``
(``--only quality|speed|growth`` for one part; ``--with-queries`` adds each half's queries as more unpaired data);
writes bench/results/minivec2vec.json and prints Markdown tables. The committed JSON also holds
``speed_default_threads`` (the speed part rerun without OPENBLAS_NUM_THREADS, ``--repeats 1``) and
``quality_with_queries`` (``--only quality --with-queries --pairs minilm6:mpnet``), merged in from separate runs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _corpora import DATA, embeddings

from vecbridge import metrics
from vecbridge.align import FewPairsWarning, OrthogonalProcrustes
from vecbridge.align.minivec2vec import MiniVec2Vec
from vecbridge.vectors import l2_normalize

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [("minilm6", "minilm3"), ("minilm3", "minilm6"), ("minilm6", "mpnet"), ("mpnet", "minilm6")]
N_HELD = 2000
HALF = 4000
SUPERVISED_PAIRS = 1000


def machine() -> dict:
    return {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
            "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
            "omp_threads": os.environ.get("OMP_NUM_THREADS", "default"), "platform": platform.platform()}


def centred_quality(W, mu_a, mu_b, Xh, Yh) -> metrics.PairQuality:
    """The paper's protocol: normalize(x - mu_A) @ W against y - mu_B."""
    mapped = l2_normalize(Xh - mu_a.astype(np.float32)) @ np.asarray(W, dtype=np.float32)
    return metrics.pair_quality(mapped, Yh - mu_b.astype(np.float32))


def quality(data: Path, seeds, pairs, out: list, kw: dict, with_queries: bool = False):
    for src, tgt in pairs:
        X, Y, Qy = embeddings(data, src, "docs"), embeddings(data, tgt, "docs"), embeddings(data, tgt, "queries")
        A, B = X[:HALF], Y[HALF:2 * HALF]
        if with_queries:  # more unpaired data per side: each half's items embedded as doc AND as query
            A = np.vstack([A, embeddings(data, src, "queries")[:HALF]])
            B = np.vstack([B, Qy[HALF:2 * HALF]])
        held = slice(len(X) - N_HELD, len(X))
        Xh, Yh, Qh = X[held], Y[held], Qy[held]
        # supervised reference on 1,000 true pairs (items 0..999)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FewPairsWarning)
            sup = OrthogonalProcrustes().fit(X[:SUPERVISED_PAIRS], Y[:SUPERVISED_PAIRS])
            sup_c = OrthogonalProcrustes(center=True).fit(X[:SUPERVISED_PAIRS], Y[:SUPERVISED_PAIRS])
        sup_user = metrics.pair_quality(sup.transform(Xh), Yh)
        sup_paper = centred_quality(sup_c.rotation_, sup_c.source_mean_, sup_c.target_mean_, Xh, Yh)
        sup_ret = metrics.recall_retention(Qh, sup.transform(Xh), Yh, k=10)
        out.append({"pair": f"{src}->{tgt}", "method": f"supervised Procrustes ({SUPERVISED_PAIRS} true pairs)",
                    "top1_paper": sup_paper.top1, "rank_paper": sup_paper.mean_rank, "top1_user": sup_user.top1,
                    "rank_user": sup_user.mean_rank, "retention10": sup_ret["retention"],
                    "recall10_mapped": sup_ret["recall_mapped"], "recall10_native": sup_ret["recall_native"]})
        print(f"{src}->{tgt} supervised: paper top1={sup_paper.top1:.3f} user top1={sup_user.top1:.3f} "
              f"ret@10={sup_ret['retention']:.3f}", flush=True)
        for seed in seeds:
            load0 = os.getloadavg()[0]
            t, c = time.perf_counter(), time.process_time()
            est = MiniVec2Vec(random_state=seed, **kw).fit(A, B)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            stages = {name: centred_quality(W, est.source_mean_, est.target_mean_, Xh, Yh)
                      for name, W in est.stage_matrices_.items()}
            final = centred_quality(est.matrix_, est.source_mean_, est.target_mean_, Xh, Yh)
            mapped = est.transform(Xh)
            user = metrics.pair_quality(mapped, Yh)
            ortho = metrics.pair_quality(est.procrustes_.transform(Xh), Yh)
            ret = metrics.recall_retention(Qh, mapped, Yh, k=10)
            ret_o = metrics.recall_retention(Qh, est.procrustes_.transform(Xh), Yh, k=10)
            row = {"pair": f"{src}->{tgt}", "method": "mini-vec2vec", "seed": seed, "n_src": len(A), "n_tgt": len(B),
                   "top1_paper": final.top1, "rank_paper": final.mean_rank, "cos_paper": final.mean_cosine,
                   "stages": {k: {"top1": v.top1, "rank": v.mean_rank, "cos": v.mean_cosine}
                              for k, v in stages.items()},
                   "top1_user": user.top1, "rank_user": user.mean_rank,
                   "top1_orthogonal": ortho.top1, "rank_orthogonal": ortho.mean_rank,
                   "retention10": ret["retention"], "recall10_mapped": ret["recall_mapped"],
                   "recall10_native": ret["recall_native"], "retention10_orthogonal": ret_o["retention"],
                   "refine1_iters": est.refine1_n_iter_, "orthogonality_gap": est.orthogonality_gap_,
                   "history": est.history_, "kmeans_consistency": est.kmeans_consistency_,
                   "qap_score_mean": float(np.mean(est.qap_scores_)),
                   "wall_s": wall, "cpu_s": cpu, "stage_s": est.timings_, "load_before": load0,
                   "load_after": os.getloadavg()[0]}
            out.append(row)
            print(f"{src}->{tgt} seed={seed} paper top1={final.top1:.3f} rank={final.mean_rank:.2f} | user "
                  f"top1={user.top1:.3f} rank={user.mean_rank:.2f} | ortho top1={ortho.top1:.3f} | ret@10="
                  f"{ret['retention']:.3f} | stages "
                  + " ".join(f"{k}={v.top1:.3f}" for k, v in stages.items())
                  + f" | r1 it={est.refine1_n_iter_} | {wall:.0f}s wall {cpu:.0f}s cpu load {load0:.1f}", flush=True)


def speed(data: Path, repeats: int, out: list, kw: dict, pairs=(("minilm6", "mpnet"), ("minilm6", "minilm3"))):
    for src, tgt in pairs:
        X, Y = embeddings(data, src, "docs"), embeddings(data, tgt, "docs")
        runs = []
        for r in range(repeats):
            load0 = os.getloadavg()[0]
            t, c = time.perf_counter(), time.process_time()
            est = MiniVec2Vec(random_state=r, **kw).fit(X, Y)
            runs.append({"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c, "stage_s": est.timings_,
                         "refine1_iters": est.refine1_n_iter_, "load_before": load0,
                         "load_after": os.getloadavg()[0]})
            print(f"speed {src}->{tgt} 10k+10k run {r}: {runs[-1]['wall_s']:.1f}s wall {runs[-1]['cpu_s']:.1f}s cpu "
                  f"{ {k: round(v, 1) for k, v in est.timings_.items()} } load {load0:.1f}", flush=True)
        out.append({"pair": f"{src}->{tgt}", "n_per_side": len(X), "runs": runs,
                    "median_wall_s": statistics.median(r["wall_s"] for r in runs),
                    "median_cpu_s": statistics.median(r["cpu_s"] for r in runs)})


def grow(X: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """SYNTHETIC growth: the real rows, then noisy copies (sigma = 0.05 x per-dimension std) up to n rows."""
    if n <= len(X):
        return X[:n]
    sigma = 0.05 * X.std(axis=0, keepdims=True)
    extra = X[rng.integers(0, len(X), n - len(X))]
    extra = extra + sigma * rng.standard_normal(extra.shape, dtype=np.float32)
    return np.vstack([X, extra.astype(np.float32)])


def growth(data: Path, sizes, out: list, kw: dict, src="minilm6", tgt="mpnet", uncapped_max: int = 0):
    X, Y = embeddings(data, src, "docs"), embeddings(data, tgt, "docs")
    rng = np.random.default_rng(0)
    for n in sizes:
        Xn, Yn = grow(X, n, rng), grow(Y, n, rng)
        caps = [kw.get("max_samples", 25_000)] + ([None] if n <= uncapped_max and n > 25_000 else [])
        for cap in caps:
            load0 = os.getloadavg()[0]
            t, c = time.perf_counter(), time.process_time()
            est = MiniVec2Vec(random_state=0, **{**kw, "max_samples": cap}).fit(Xn, Yn)
            row = {"pair": f"{src}->{tgt}", "n_per_side": n, "synthetic": n > len(X), "max_samples": cap,
                   "wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c, "stage_s": est.timings_,
                   "refine1_iters": est.refine1_n_iter_, "load_before": load0, "load_after": os.getloadavg()[0]}
            out.append(row)
            print(f"growth n={n} cap={cap}: {row['wall_s']:.1f}s wall {row['cpu_s']:.1f}s cpu "
                  f"{ {k: round(v, 1) for k, v in est.timings_.items()} } load {load0:.1f}", flush=True)


def mean_sd(values) -> str:
    values = list(values)
    return f"{np.mean(values):.3f} ({np.std(values):.3f})"


def tables(result: dict) -> str:
    lines = []
    for key, title in (("quality", "4,000 docs per side"),
                       ("quality_with_queries", "4,000 docs + 4,000 queries per side, more unpaired data")):
        rows = result.get(key, [])
        if rows:
            lines += _quality_table(rows, title)
    return _speed_tables(result, lines)


def _quality_table(rows, title) -> list:
    lines = [f"### Quality, {title} (2,000 held-out docs; mean (sd) over seeds; rank 1 = best)", "",
              "| pair | method | top-1 paper | rank paper | top-1 user | rank user | top-1 orthogonal | "
              "retention@10 | initial top-1 | refine-1 top-1 | refine-2 top-1 | Refine-1 iters |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for pair in dict.fromkeys(r["pair"] for r in rows):
        sup = [r for r in rows if r["pair"] == pair and r["method"] != "mini-vec2vec"]
        mini = [r for r in rows if r["pair"] == pair and r["method"] == "mini-vec2vec"]
        if mini:
            cells = [mean_sd(r[key] for r in mini) for key in ("top1_paper", "rank_paper", "top1_user", "rank_user",
                                                                 "top1_orthogonal", "retention10")]
            cells += [mean_sd(r["stages"][s]["top1"] for r in mini) for s in ("initial", "refine1", "refine2")]
            cells.append(f"{np.mean([r['refine1_iters'] for r in mini]):.0f}")
            lines.append(f"| {pair} | mini-vec2vec (unsupervised, {len(mini)} seeds) | " + " | ".join(cells) + " |")
        for r in sup:
            lines.append(f"| {pair} | {r['method']} | {r['top1_paper']:.3f} | {r['rank_paper']:.2f} | "
                         f"{r['top1_user']:.3f} | {r['rank_user']:.2f} | - | {r['retention10']:.3f} | - | - | - | - |")
    lines += ["", "Per seed (top-1 paper / user, wall s, CPU s, load average at start):", ""]
    for r in (r for r in rows if r["method"] == "mini-vec2vec"):
        lines.append(f"- {r['pair']} seed {r['seed']}: {r['top1_paper']:.3f} / {r['top1_user']:.3f}, "
                     f"{r['wall_s']:.0f} s wall, {r['cpu_s']:.0f} s CPU, load {r['load_before']:.1f}")
    lines.append("")
    return lines


def _speed_tables(result: dict, lines: list) -> str:
    for key, title in (("speed", "OpenBLAS threads as run"), ("speed_default_threads", "default OpenBLAS threads")):
        if not result.get(key):
            continue
        lines += ["", f"### Speed, 10,000 + 10,000 vectors ({title}; median of runs)", "",
                  "| pair | runs | median wall s | median CPU s | stages of the median run (s) | load avg |",
                  "|---|---|---|---|---|---|"]
        for r in result[key]:
            med = sorted(r["runs"], key=lambda x: x["wall_s"])[len(r["runs"]) // 2]
            st = ", ".join(f"{k} {v:.1f}" for k, v in med["stage_s"].items())
            loads = "/".join(f"{x['load_before']:.1f}" for x in r["runs"])
            lines.append(f"| {r['pair']} | {len(r['runs'])} | {r['median_wall_s']:.1f} | {r['median_cpu_s']:.1f} | "
                         f"{st} | {loads} |")
    if result.get("growth"):
        lines += ["", "### Growth (minilm6 -> mpnet; rows beyond 10,000 are SYNTHETIC noisy copies of real rows)",
                  "",
                  "| n per side | max_samples | wall s | CPU s | matching | initial | refine-1 | refine-2 | load avg |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in result["growth"]:
            s = r["stage_s"]
            lines.append(f"| {r['n_per_side']:,} | {r['max_samples']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                         f"{s['matching']:.1f} | {s['initial']:.1f} | {s['refine1']:.1f} | {s['refine2']:.1f} | "
                         f"{r['load_before']:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA / "wordnet")
    ap.add_argument("--quick", action="store_true", help="one seed, one speed run, growth to 20k")
    ap.add_argument("--only", choices=["quality", "speed", "growth"], action="append")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--pairs", default=",".join(f"{a}:{b}" for a, b in PAIRS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="10000,20000,50000,100000")
    ap.add_argument("--params", default="{}", help="JSON of MiniVec2Vec parameters to override")
    ap.add_argument("--with-queries", action="store_true",
                    help="quality: each half also contributes its items' queries (8,000 unpaired vectors per side)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "minivec2vec.json")
    args = ap.parse_args(argv)
    if not args.data.exists():
        sys.exit(f"data not found: {args.data}")
    kw = json.loads(args.params)
    seeds = [0] if args.quick else [int(s) for s in args.seeds.split(",")]
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",")]
    sizes = [10_000, 20_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    parts = args.only or ["quality", "speed", "growth"]
    result = {"machine": machine(), "params": kw, "defaults": MiniVec2Vec().__dict__, "protocol": {
        "held_out": N_HELD, "half": HALF, "supervised_pairs": SUPERVISED_PAIRS}}
    if args.out.exists():  # keep the parts not rerun
        old = json.loads(args.out.read_text())
        for part in ("quality", "speed", "growth"):
            if part not in parts and part in old:
                result[part] = old[part]
    if "quality" in parts:
        result["quality"] = []
        quality(args.data, seeds, pairs, result["quality"], kw, with_queries=args.with_queries)
        result["protocol"]["with_queries"] = args.with_queries
    if "speed" in parts:
        result["speed"] = []
        speed(args.data, 1 if args.quick else args.repeats, result["speed"], kw)
    if "growth" in parts:
        result["growth"] = []
        growth(args.data, sizes, result["growth"], kw)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=float))
    print()
    print(tables(result))


if __name__ == "__main__":
    main()
