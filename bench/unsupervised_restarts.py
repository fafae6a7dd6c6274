"""Robust unsupervised alignment: mini-vec2vec with restarts picked by the label-free criterion and VecMap starts,
against the paper-faithful single run, on both shared corpora side by side. A benchmark, not a test.

Protocol (as ``bench/minivec2vec.py``): rows of every ``<model>_docs.npy`` are one seeded random order of the items.
The last 2,000 items are held out (embedded by both models, never used in fitting). Of the other 8,000, the source
model embeds items 0..3,999 and the target model items 4,000..7,999: no item on both sides, no pair.
``MiniVec2Vec(random_state=seed, **method).fit(src_half, tgt_half)``; quality on the 2,000 held-out items:

* ``top1``: the paper's protocol, ``normalize(x - mu_A) @ W`` against ``y - mu_B`` (top-1 of the true partner among
  the 2,000 held-out target docs; chance 0.0005);
* ``top1_user``: ``est.procrustes_.transform(x)`` (what ``vecbridge fit --pairs unsupervised`` saves) against the raw
  target docs.

``--items shared`` fits on the *same* 8,000 items on both sides instead (source rows 0..7,999, target rows the same
items in a seeded shuffled order; no pair is given): two collections of one corpus, re-embedded, ids not shared.
Quality is scored on the same 2,000 held-out items.

``--ceiling`` adds the supervised ceiling of every pair: orthogonal Procrustes fitted on the source half's 4,000
*true* pairs (items 0..3,999 embedded by both models), each side centred on the mean of its fitted rows and scaled to
unit rows as the unsupervised map is, scored by the same ``top1`` (and ``top1_user``: the same map as the affine
``OrthogonalProcrustes(center=True, scale=True)`` against the raw targets). The split does not depend on the seed, so
the ceiling is one number per pair; ``top1_8k`` fits on all 8,000 fitting items. ``from_true_map``: where the
label-free objective settles near the truth, the transport polish (10 rounds, then 30) started at that true map on
the disjoint halves a fit sees, each side centred on its own half as a fit is (``true_map``: the start, so centred).

Methods: ``robust`` (restarts selected by ``vecbridge.align.validation``, VecMap starts, deterministic CSLS polish),
``paper`` (``n_restarts=1, init="centroids", polish_iter=0``: the paper's single run), ``stochastic`` (``robust``
plus VecMap's stochastic dictionary induction before the final polish, ``polish_stochastic_iter=45``: the previous
default) and ``transport`` (the library defaults: ``robust`` plus the transport polish, ``transport_iter=10``). Each
fit also records the top-1 of its map after Refine-2, the polish and the transport phase. Which restart won, its
init and every restart's validation are recorded. ``--timing`` also fits 10,000 + 10,000 vectors (all docs of both
models; for timing only, so the sides share items) per pair, method and ``n_jobs`` setting (``--timing-jobs 1,2``:
starts one after another against side by side, alternating; ``--timing-repeats``: rounds, the median reported).

Run: ``python bench/unsupervised_restarts.py [--corpora wordnet,foldoc] [--seeds 0,1,2] [--methods robust,paper]``;
writes bench/results/unsupervised_robust.json (parts not rerun are kept) and prints Markdown tables.
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
from _corpora import DATA, embeddings

from vecbridge import metrics
from vecbridge.align.minivec2vec import MiniVec2Vec
from vecbridge.align.procrustes import OrthogonalProcrustes
from vecbridge.numeric.linalg import procrustes_rotation
from vecbridge.numeric.transport import transport_procrustes
from vecbridge.vectors import l2_normalize

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("minilm6", "minilm3", "mpnet", "glove50")
SENTENCE = ("minilm6", "minilm3", "mpnet")
PAIRS = [(a, b) for a in SENTENCE for b in SENTENCE if a != b]
METHODS = {"robust": {"polish_stochastic_iter": 0, "transport_iter": 0},
           "paper": {"n_restarts": 1, "init": "centroids", "polish_iter": 0, "polish_stochastic_iter": 0,
                     "transport_iter": 0},
           "stochastic": {"polish_stochastic_iter": 45, "transport_iter": 0},
           "transport": {"polish_stochastic_iter": 0, "transport_iter": 10}}
N_HELD, HALF = 2000, 4000


def machine() -> dict:
    return {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
            "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
            "omp_threads": os.environ.get("OMP_NUM_THREADS", "default"), "platform": platform.platform(),
            "shared": "2 cores shared with two other workers' jobs (load averages recorded per fit)"}


def held_out_quality(mu_a, mu_b, Xh, Yh):
    """The paper's protocol as a function of a map W: ``normalize(x - mu_A) @ W`` against ``y - mu_B``."""
    xs = l2_normalize(Xh - np.asarray(mu_a, dtype=np.float32))
    ys = Yh - np.asarray(mu_b, dtype=np.float32)
    return lambda W: metrics.pair_quality(xs @ np.asarray(W, dtype=np.float32), ys)


def one_fit(corpus, src, tgt, seed, method, params, items="disjoint"):
    X, Y = embeddings(DATA / corpus, src), embeddings(DATA / corpus, tgt)
    if items == "shared":   # the same 8,000 items on both sides, rows shuffled: no pair is given, none is unknowable
        A, B = X[:2 * HALF], Y[np.random.default_rng(1000 + seed).permutation(2 * HALF)]
    else:
        A, B = X[:HALF], Y[HALF:2 * HALF]
    Xh, Yh = X[-N_HELD:], Y[-N_HELD:]
    load0 = os.getloadavg()[0]
    t, c = time.perf_counter(), time.process_time()
    est = MiniVec2Vec(random_state=seed, **{**METHODS[method], **params}).fit(A, B)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    paper_quality = held_out_quality(est.source_mean_, est.target_mean_, Xh, Yh)
    paper = paper_quality(est.matrix_)
    user = metrics.pair_quality(est.procrustes_.transform(Xh), Yh)
    stage_top1 = {k: paper_quality(M).top1 for k, M in est.stage_matrices_.items()
                  if k in ("refine2", "polish", "transport")}
    return {"items": items, "stage_top1": stage_top1, "corpus": corpus, "pair": f"{src}->{tgt}", "seed": seed,
            "method": method, "top1": paper.top1, "rank": paper.mean_rank, "top1_user": user.top1, "wall_s": wall, "cpu_s": cpu,
            "restart": getattr(est, "restart_", 0), "init": getattr(est, "init_", "centroids"),
            "restarts": getattr(est, "restarts_", []), "validation": getattr(est, "validation_", None),
            "stage_s": est.timings_, "load_before": load0, "load_after": os.getloadavg()[0]}


def ceiling(corpus, src, tgt):
    """Supervised ceiling: Procrustes on the source half's true pairs, preprocessed and scored as the unsupervised
    map is (see the module docstring)."""
    X, Y = embeddings(DATA / corpus, src), embeddings(DATA / corpus, tgt)
    Xh, Yh = X[-N_HELD:], Y[-N_HELD:]
    out = {"corpus": corpus, "pair": f"{src}->{tgt}", "n_pairs": HALF}
    true_map = {}
    for n, name in ((HALF, "top1"), (2 * HALF, "top1_8k")):
        P, Q = X[:n], Y[:n]
        mu_p, mu_q = P.mean(axis=0), Q.mean(axis=0)
        true_map[n] = W = procrustes_rotation(l2_normalize(P - mu_p), l2_normalize(Q - mu_q)).astype(np.float32)
        q = held_out_quality(mu_p, mu_q, Xh, Yh)(W)
        out[name] = q.top1
        if n == HALF:
            out["rank"] = q.mean_rank
            out["top1_user"] = metrics.pair_quality(
                OrthogonalProcrustes(center=True, scale=True).fit(P, Q).transform(Xh), Yh).top1
    # where the label-free objective settles near the truth: the transport polish started at the map of 4,000 true
    # pairs, on the disjoint halves a fit sees (source items 0..3,999, target items 4,000..7,999), scored as a fit is
    A, B = X[:HALF], Y[HALF:2 * HALF]
    mu_a, mu_b = A.mean(axis=0), B.mean(axis=0)
    a, b = l2_normalize(A - mu_a), l2_normalize(B - mu_b)
    W = true_map[HALF]
    score = held_out_quality(mu_a, mu_b, Xh, Yh)
    W10 = transport_procrustes(a, b, W, n_iter=10)
    out["from_true_map"] = {"true_map": score(W).top1, "transport_10": score(W10).top1,
                            "transport_30": score(transport_procrustes(a, b, W10, n_iter=20)).top1}
    return out


def timing(corpus, src, tgt, method, params, jobs=(2,), repeats=1):
    """One 10k + 10k fit per ``n_jobs`` setting, ``repeats`` rounds, the settings alternating within a round (so load
    drifting on a shared machine hits each alike). One row per setting: the median round's figures, every wall."""
    X, Y = embeddings(DATA / corpus, src), embeddings(DATA / corpus, tgt)
    runs = {n: [] for n in jobs}
    for _ in range(repeats):
        for n in jobs:
            load0 = os.getloadavg()[0]
            t, c = time.perf_counter(), time.process_time()
            est = MiniVec2Vec(random_state=0, **{**METHODS[method], **params, "n_jobs": n}).fit(X, Y)
            runs[n].append({"corpus": corpus, "pair": f"{src}->{tgt}", "method": method, "n_per_side": len(X),
                            "n_jobs": n, "wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                            "stage_s": est.timings_, "restart": getattr(est, "restart_", 0),
                            "init": getattr(est, "init_", "centroids"),
                            "n_restarts_run": len(getattr(est, "restarts_", [])) or 1, "load_before": load0,
                            "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")})
    rows = []
    for rs in runs.values():
        walls = [r["wall_s"] for r in rs]
        rows.append({**sorted(rs, key=lambda r: r["wall_s"])[len(rs) // 2], "wall_runs": walls,
                     "wall_s": statistics.median(walls)})
    return rows


SWEEP = [(20.0, 10), (15.0, 10), (25.0, 10), (20.0, 20)]   # (transport_beta, transport_iter); the default first


def transport_sweep(corpus, src, tgt, seed):
    """The transport polish's settings from one fit's polished map (disjoint halves, as ``one_fit``): the fit runs
    without it, then each ``(transport_beta, transport_iter)`` of ``SWEEP`` refines the same polished map."""
    X, Y = embeddings(DATA / corpus, src), embeddings(DATA / corpus, tgt)
    est = MiniVec2Vec(random_state=seed, polish_stochastic_iter=0, transport_iter=0).fit(X[:HALF], Y[HALF:2 * HALF])
    a = l2_normalize(X[:HALF] - est.source_mean_.astype(np.float32))     # the polish rows (all: HALF <= polish_sample)
    b = l2_normalize(Y[HALF:2 * HALF] - est.target_mean_.astype(np.float32))
    quality = held_out_quality(est.source_mean_, est.target_mean_, X[-N_HELD:], Y[-N_HELD:])
    W = est.stage_matrices_["polish"]
    out = {"corpus": corpus, "pair": f"{src}->{tgt}", "seed": seed, "polish": quality(W).top1, "variants": []}
    for beta, n in SWEEP:
        refined = transport_procrustes(a, b, W, n_iter=n, beta=beta)
        out["variants"].append({"transport_beta": beta, "transport_iter": n, "top1": quality(refined).top1})
    return out


def won_label(r: dict) -> str:
    return f"{r['init'][0]}{r['restart']}"


def gains(r: dict) -> str:
    return " ".join(f"{x['init'][0]}:{x.get('gain', 0):.3f}" for x in r["restarts"])


def tables(result: dict) -> str:
    rows = result.get("quality", [])
    order = ("wordnet", "foldoc")
    corpora = sorted(dict.fromkeys(r["corpus"] for r in rows + result.get("ceiling", [])), key=lambda c: (order.index(c) if c in order else 9, c))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    lines = ["### Top-1 of the true partner (2,000 held-out items; 4,000 + 4,000 disjoint items fitted; per seed)", "",
             "| pair | method | " + " | ".join(corpora) + " |", "|---|---|" + "---|" * len(corpora)]
    for pair in dict.fromkeys(r["pair"] for r in rows):
        for m in methods:
            cells = []
            for c in corpora:
                rs = sorted((r for r in rows if r["pair"] == pair and r["method"] == m and r["corpus"] == c),
                            key=lambda r: r["seed"])
                won = ", ".join(won_label(r) for r in rs)
                cells.append(" / ".join(f"{r['top1']:.3f}" for r in rs) + (
                    f" (won: {won}; {statistics.median(r['wall_s'] for r in rs):.0f} s)" if rs else ""))
            lines.append(f"| {pair} | {m} | " + " | ".join(cells) + " |")
    lines += ["", "Won: c = centroid matching, v = VecMap start, then the restart's index (0 = the paper's start).", ""]
    for m in methods:
        for c in corpora:
            rs = [r for r in rows if r["method"] == m and r["corpus"] == c and r["pair"].split("->")[0] in SENTENCE
                  and r["pair"].split("->")[1] in SENTENCE]
            if rs:
                lines.append(f"- {m}, {c}: median top-1 {statistics.median(r['top1'] for r in rs):.3f}, min "
                             f"{min(r['top1'] for r in rs):.3f}, fits >= 0.95: {sum(r['top1'] >= 0.95 for r in rs)}"
                             f"/{len(rs)}, median wall {statistics.median(r['wall_s'] for r in rs):.0f} s")
    if result.get("ceiling"):
        ceil = {(r["corpus"], r["pair"]): r for r in result["ceiling"]}
        head = [h for c in corpora for h in [f"{c}: ceiling (8k pairs)"] + [f"{c}: {m} median / min" for m in methods]]
        lines += ["", "### Supervised ceiling vs unsupervised (top-1)", "", "| pair | " + " | ".join(head) + " |",
                  "|---|" + "---|" * len(head)]
        for pair in dict.fromkeys(r["pair"] for r in result["ceiling"]):
            cells = []
            for c in corpora:
                r = ceil.get((c, pair))
                cells.append(f"{r['top1']:.3f} ({r['top1_8k']:.3f})" if r else "")
                for m in methods:
                    t = [x["top1"] for x in rows if (x["corpus"], x["pair"], x["method"]) == (c, pair, m)]
                    cells.append(f"{statistics.median(t):.3f} / {min(t):.3f}" if t else "")
            lines.append(f"| {pair} | " + " | ".join(cells) + " |")
    if result.get("timing"):
        lines += ["", "### 10,000 + 10,000 vectors, one fit (seed 0)", "", "| corpus | pair | method | wall s | CPU s |"
                  " restarts run | won | load |", "|---|---|---|---|---|---|---|---|"]
        for r in result["timing"]:
            lines.append(f"| {r['corpus']} | {r['pair']} | {r['method']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                         f"{r['n_restarts_run']} | {r['init']} {r['restart']} | {r['load_before']:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", default="wordnet,foldoc")
    ap.add_argument("--pairs", default=",".join(f"{a}:{b}" for a, b in PAIRS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--methods", default="robust,paper")
    ap.add_argument("--params", default="{}", help="JSON of MiniVec2Vec parameters to override (all methods)")
    ap.add_argument("--timing", action="store_true", help="also time one 10k + 10k fit per corpus, pair and method")
    ap.add_argument("--timing-pairs", default="minilm6:mpnet,mpnet:minilm6,minilm6:minilm3")
    ap.add_argument("--timing-jobs", default="2", help="n_jobs settings to time, alternating (e.g. 1,2)")
    ap.add_argument("--timing-repeats", type=int, default=1, help="rounds of the timing fits (median reported)")
    ap.add_argument("--no-quality", action="store_true")
    ap.add_argument("--items", choices=("disjoint", "shared"), default="disjoint",
                    help="fit on 4,000 + 4,000 disjoint items (default) or on the same 8,000 items, rows shuffled")
    ap.add_argument("--ceiling", action="store_true", help="also the supervised ceiling of every corpus and pair")
    ap.add_argument("--transport-sweep", action="store_true",
                    help="also the transport polish's settings from each fit's polished map (every seed, pair, corpus)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "unsupervised_robust.json")
    args = ap.parse_args(argv)
    corpora = args.corpora.split(",")
    for c in corpora:
        if not (DATA / c).exists():
            sys.exit(f"data not found: {DATA / c}")
    params = json.loads(args.params)
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    result = {"machine": machine(), "params": params, "command": " ".join(sys.argv),
              "protocol": {"held_out": N_HELD, "half": HALF, "methods": {m: METHODS[m] for m in methods}}}
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    # a timing row is one per BLAS thread count and n_jobs (1 before the setting existed), a quality row one per seed
    key = lambda r: (r["corpus"], r["pair"], r["method"], r.get("seed", r.get("blas_threads")),  # noqa: E731
                     r.get("items", "disjoint"), r.get("n_jobs", 1))
    quality = {key(r): r for r in old.get("quality", [])}
    timings = {key(r): r for r in old.get("timing", [])}
    ceilings = {(r["corpus"], r["pair"]): r for r in old.get("ceiling", [])}
    sweeps = {(r["corpus"], r["pair"], r["seed"]): r for r in old.get("transport_sweep", [])}

    def save():   # every part, rerun or kept
        result.update(quality=list(quality.values()), timing=list(timings.values()),
                      ceiling=list(ceilings.values()), transport_sweep=list(sweeps.values()))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, default=float))

    if args.transport_sweep:
        for src, tgt in pairs:
            for c in corpora:
                for seed in seeds:
                    r = transport_sweep(c, src, tgt, seed)
                    sweeps[c, r["pair"], seed] = r
                    print(f"sweep {c} {r['pair']} seed={seed}: polish {r['polish']:.3f} " + " ".join(
                        f"b{v['transport_beta']:g}x{v['transport_iter']} {v['top1']:.3f}" for v in r["variants"]),
                          flush=True)
    if args.ceiling:
        for src, tgt in pairs:
            for c in corpora:
                r = ceiling(c, src, tgt)
                ceilings[c, r["pair"]] = r
                print(f"ceiling {c} {r['pair']}: top1={r['top1']:.3f} (8k pairs {r['top1_8k']:.3f}) "
                      f"user={r['top1_user']:.3f}", flush=True)
    if not args.no_quality:
        for src, tgt in pairs:
            for c in corpora:
                for m in methods:
                    for seed in seeds:
                        r = one_fit(c, src, tgt, seed, m, params, args.items)
                        quality[key(r)] = r
                        print(f"{c} {r['pair']} {m} {args.items} seed={seed}: top1={r['top1']:.3f} "
                              f"user={r['top1_user']:.3f} "
                              f"won={r['init']}#{r['restart']} of {len(r['restarts']) or 1} "
                              f"[{gains(r)}] stages {({k: round(v, 3) for k, v in r['stage_top1'].items()})} "
                              f"{r['wall_s']:.0f}s load {r['load_before']:.1f}", flush=True)
                        save()
    if args.timing:
        for pair in args.timing_pairs.split(","):
            src, tgt = pair.split(":")
            for c in corpora:
                for m in methods:
                    for r in timing(c, src, tgt, m, params, [int(n) for n in args.timing_jobs.split(",")],
                                    args.timing_repeats):
                        timings[key(r)] = r
                        print(f"timing {c} {r['pair']} {m} n_jobs={r['n_jobs']}: median {r['wall_s']:.1f}s wall "
                              f"of {[round(w, 1) for w in r['wall_runs']]} "
                              f"{ {k: round(v, 1) for k, v in r['stage_s'].items()} } load {r['load_before']:.1f}",
                              flush=True)
    save()
    print()
    print(tables(result))


if __name__ == "__main__":
    main()
