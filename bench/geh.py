"""GEH vector linking on real embeddings (../shared/data/wordnet): the Vector Linking paper's protocol, baselines, ablations, timing.

Protocol ("Vector Linking via Cross-Model Local Isometric Consistency", 2026, section 5.1): the 10,000 wordnet items are the corpus D. An overlap Omega of alpha * |D| items is
drawn at random, the rest is split uniformly into U1 and U2 (so alpha = |Omega| / |D1 u D2|; at alpha 0.3 each
collection holds 6,500 items, 46% of them shared). E1 = model A(Omega u U1) and E2 = model B(Omega u U2), rows shuffled;
the seeds are drawn uniformly from Omega. Docs embeddings (raw float16 outputs; GEH normalises). Precision / recall /
F1 of the predicted links against the true pairs, seeds excluded from both sides (they are given, not found).

Methods, all on the same splits and seeds:
* GEH: ``vecbridge.linking.geh.GEH()`` with its defaults; "GEH (bootstrap only)" is the same fit's links before the
  optional Procrustes refinement stage (``geh_links_``), i.e. the paper's method with our stabilisers.
* Procrustes (seeds) / ridge (seeds): the paper's baselines -- a map fitted on the seed pairs only (orthogonal
  Procrustes with the zero-padding convention for unequal dimensions; ridge with alpha 0.01 relative), then CSLS mutual
  nearest neighbours (k = 10) over the full collections, as the paper adapts alignment methods (section 5.1).
* Ablations (section 5.3), refinement off so they isolate GEH's components: no bootstrapping (one iteration on S),
  single view (m_t = 1, A = L_{t-1}), random views instead of FPS, raw distance hashes instead of the kernel, and the
  paper's defaults read literally (m0 = 5 views, Otsu alone, cumulative posterior, no growth cap, exact search).
* Timing: wall-clock seconds of ``fit`` on minilm6 -> mpnet, alpha 0.3, 15 seeds, from 10k items upwards. Beyond the
  10,000 real items the corpus grows synthetically (LABELLED): a synthetic item is the normalised blend
  ``x_a + w x_b`` (w uniform in [0.2, 0.5]) of two random real items, with the same a, b, w in both models, so its
  cross-model geometry is as consistent as the real items'. Sizes stop once a run exceeds ``--time-cap`` seconds.

Machine: 2 shared CPU cores (other engineers' jobs running; the load average is recorded with every timing).

Run: ``python bench/geh.py [--data ../shared/data/wordnet] [--parts grid,repeat,ablations,timing] [--quick]``;
writes bench/results/geh.json and prints Markdown tables.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _corpora import DATA, embeddings

from vecbridge.align import LinearMap, OrthogonalProcrustes
from vecbridge.linking.geh import GEH
from vecbridge.numeric.neighbors import mutual_nearest_neighbours
from vecbridge.vectors import l2_normalize

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [("minilm6", "mpnet"), ("minilm6", "minilm3"), ("mpnet", "minilm3")]
ALPHAS = [0.15, 0.3]
SEEDS = [15, 30]


def make_split(n_items: int, alpha: float, n_seeds: int, seed: int):
    """The paper's section 5.1: Omega, U1, U2; returns row lists of both collections, the true pairs and the seeds."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n_items)
    n_omega = int(round(alpha * n_items))
    omega, rest = perm[:n_omega], perm[n_omega:]
    u1, u2 = rest[:len(rest) // 2], rest[len(rest) // 2:]
    rows1 = rng.permutation(np.concatenate([omega, u1]))
    rows2 = rng.permutation(np.concatenate([omega, u2]))
    pos1 = np.empty(n_items, np.int64)
    pos2 = np.empty(n_items, np.int64)
    pos1[rows1] = np.arange(len(rows1))
    pos2[rows2] = np.arange(len(rows2))
    truth = np.stack([pos1[omega], pos2[omega]], axis=1)
    seeds = truth[rng.choice(len(truth), n_seeds, replace=False)]
    return rows1, rows2, truth, seeds


def score(links: np.ndarray, truth: np.ndarray, seeds: np.ndarray, n2: int) -> dict:
    """Precision / recall / F1 of ``links`` against ``truth``, the seeds removed from both."""
    seed_keys = set((seeds[:, 0] * n2 + seeds[:, 1]).tolist())
    pred = [k for k in (links[:, 0] * n2 + links[:, 1]).tolist() if k not in seed_keys]
    true = set((truth[:, 0] * n2 + truth[:, 1]).tolist()) - seed_keys
    tp = sum(k in true for k in pred)
    p = tp / len(pred) if pred else 0.0
    r = tp / len(true) if true else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0, "n_links": len(pred)}


def seed_baseline(E1, E2, seeds, kind: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = OrthogonalProcrustes() if kind == "procrustes" else LinearMap(alpha=0.01)
        model.fit(E1[seeds[:, 0]], E2[seeds[:, 1]])
    return mutual_nearest_neighbours(l2_normalize(model.transform(E1)), E2, k_csls=10)[0]


def loadavg() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        return float("nan")


def run_geh(E1, E2, seeds, truth, random_state=0, **params) -> dict:
    t0 = time.perf_counter()
    g = GEH(random_state=random_state).set_params(**params).fit(E1, E2, seeds)
    sec = time.perf_counter() - t0
    out = {"seconds": round(sec, 2), "load": loadavg(), "iterations": g.n_iter_, "stop": g.stop_reason_,
           "views": round(float(g.n_views_), 1),
           "geh": score(g.geh_links_, truth, seeds, len(E2))}
    if getattr(g, "refine", None):
        out["refined"] = score(g.links_, truth, seeds, len(E2))
        out["refine_seconds"] = round(g.refine_seconds_, 2)
    return out


def fmt(r: dict) -> str:
    return f"{r['precision']:.3f} / {r['recall']:.3f} / {r['f1']:.3f}"


# ----------------------------------------------------------------------------------------------------------------
def part_grid(data, pairs, alphas, seed_counts, out):
    cache = {}
    print("\n### GEH vs the paper's baselines (P / R / F1, seeds excluded; split seed 0)\n")
    print("| pair | alpha | seeds | GEH (refined, default) | GEH (bootstrap only) | Procrustes (seeds) + CSLS-MNN "
          "| ridge (seeds) + CSLS-MNN | GEH s | iters |")
    print("|---|---|---|---|---|---|---|---|---|")
    for a, b in pairs:
        for m in (a, b):
            if m not in cache:
                cache[m] = embeddings(data, m)
        for alpha in alphas:
            for ns in seed_counts:
                rows1, rows2, truth, seeds = make_split(len(cache[a]), alpha, ns, 0)
                E1, E2 = cache[a][rows1], cache[b][rows2]
                res = run_geh(E1, E2, seeds, truth)
                res.update(pair=f"{a}->{b}", alpha=alpha, n_seeds=ns, n1=len(E1), n2=len(E2))
                for kind in ("procrustes", "ridge"):
                    t0 = time.perf_counter()
                    res[kind] = score(seed_baseline(E1, E2, seeds, kind), truth, seeds, len(E2))
                    res[kind]["seconds"] = round(time.perf_counter() - t0, 2)
                out.append(res)
                print(f"| {a} -> {b} | {alpha} | {ns} | {fmt(res['refined'])} | {fmt(res['geh'])} | "
                      f"{fmt(res['procrustes'])} | {fmt(res['ridge'])} | {res['seconds']:.1f} | {res['iterations']} |",
                      flush=True)


def part_repeat(data, out, split_seeds=(0, 1, 2)):
    A, B = embeddings(data, "minilm6"), embeddings(data, "mpnet")
    print("\n### Headline setting over split seeds (minilm6 -> mpnet, alpha 0.3, 15 seeds)\n")
    print("| split seed | GEH (refined) P / R / F1 | GEH (bootstrap only) | s | load |")
    print("|---|---|---|---|---|")
    for sd in split_seeds:
        rows1, rows2, truth, seeds = make_split(len(A), 0.3, 15, sd)
        res = run_geh(A[rows1], B[rows2], seeds, truth, random_state=sd)
        res.update(split_seed=sd)
        out.append(res)
        print(f"| {sd} | {fmt(res['refined'])} | {fmt(res['geh'])} | {res['seconds']:.1f} | {res['load']} |",
              flush=True)


ABLATIONS = {
    "GEH (bootstrap only, our defaults)": dict(refine=None),
    "- bootstrapping (one iteration on S)": dict(refine=None, bootstrap=False),
    "- multi-view voting (m_t = 1, A = L)": dict(refine=None, multi_view=False, min_votes=1.0),
    "- FPS (uniform random views)": dict(refine=None, view_sampling="random"),
    "- kernel (raw distance hashes)": dict(refine=None, kernel=False),
    "k_csls = 50 (the paper's value)": dict(refine=None, k_csls=50),
    "- vote decay (cumulative votes, as the paper)": dict(refine=None, vote_decay=1.0),
    "paper read literally (m0 = 5, Otsu alone, exact search)": dict(
        refine=None, min_views=0, min_votes=1.0, max_growth=None, vote_decay=1.0, fps_pool_factor=None,
        max_view_size=None, shortlist=None, churn_tol=None, max_iter=15),
}


def part_ablations(data, out, alphas=(0.15, 0.3), names=None):
    A, B = embeddings(data, "minilm6"), embeddings(data, "mpnet")
    print("\n### Ablations (minilm6 -> mpnet, 15 seeds, refinement off; P / R / F1)\n")
    print("| variant | " + " | ".join(f"alpha {a}" for a in alphas) + " | s (per alpha) |")
    print("|---|" + "---|" * len(alphas) + "---|")
    for name, params in ABLATIONS.items():
        if names and name not in names:
            continue
        cells, secs = [], []
        for alpha in alphas:
            rows1, rows2, truth, seeds = make_split(len(A), alpha, 15, 0)
            res = run_geh(A[rows1], B[rows2], seeds, truth, **params)
            res.update(variant=name, alpha=alpha, params={k: v for k, v in params.items()})
            out.append(res)
            cells.append(fmt(res["geh"]))
            secs.append(f"{res['seconds']:.0f}")
        print(f"| {name} | " + " | ".join(cells) + f" | {', '.join(secs)} |", flush=True)


def grow(A: np.ndarray, B: np.ndarray, n_items: int, seed: int = 0):
    """Real items plus synthetic blends x_a + w x_b (same a, b, w in both models) up to ``n_items``."""
    extra = n_items - len(A)
    if extra <= 0:
        return A[:n_items], B[:n_items]
    rng = np.random.default_rng(seed)
    a = rng.integers(0, len(A), extra)
    b = rng.integers(0, len(A), extra)
    w = rng.uniform(0.2, 0.5, extra).astype(np.float32)[:, None]
    An, Bn = l2_normalize(A), l2_normalize(B)
    return (np.concatenate([An, l2_normalize(An[a] + w * An[b])]),
            np.concatenate([Bn, l2_normalize(Bn[a] + w * Bn[b])]))


def part_timing(data, out, sizes, time_cap):
    A, B = embeddings(data, "minilm6"), embeddings(data, "mpnet")
    print("\n### Time to link (minilm6 -> mpnet, alpha 0.3, 15 seeds; beyond 10,000 items the corpus is SYNTHETIC "
          "growth)\n")
    print("| items | |E1| x |E2| | path | fit s | iterations | P / R / F1 (refined) | load |")
    print("|---|---|---|---|---|---|---|")
    for n_items in sizes:
        Ag, Bg = grow(A, B, n_items)
        rows1, rows2, truth, seeds = make_split(n_items, 0.3, 15, 0)
        E1, E2 = Ag[rows1], Bg[rows2]
        res = run_geh(E1, E2, seeds, truth)
        path = "large" if max(len(E1), len(E2)) > GEH().search.large_threshold else "global"
        res.update(n_items=n_items, n1=len(E1), n2=len(E2), path=path, synthetic=n_items > len(A))
        out.append(res)
        fin = res.get("refined", res["geh"])
        print(f"| {n_items:,}{' (synthetic)' if n_items > len(A) else ''} | {len(E1):,} x {len(E2):,} | {path} | "
              f"{res['seconds']:.1f} | {res['iterations']} | {fmt(fin)} | {res['load']} |", flush=True)
        if res["seconds"] > time_cap:
            print(f"\n(stopped: {n_items:,} items took more than {time_cap} s)")
            break



# ----------------------------------------------------------------------------------------------------------------
CUTS = [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9]
BINS = [0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0001]
#: where each variant of the calibration part keeps its fit time in a run
SECONDS_OF = {"baseline": "baseline_seconds", "calibrated_csls": "csls_seconds", "calibrated": "seconds"}


def _labels(pairs: np.ndarray, truth: np.ndarray, n2: int) -> np.ndarray:
    true = set((truth[:, 0] * n2 + truth[:, 1]).tolist())
    return np.array([k in true for k in (pairs[:, 0] * n2 + pairs[:, 1]).tolist()], dtype=bool)


def part_calibration(root: Path, corpora, alphas, split_seeds, out: dict):
    """Both corpora side by side: the calibrated default against the previous default (``calibrate=False``: the
    refinement's two-Gaussian cut), P / R / F1 per alpha over split seeds; the calibrated confidence's reliability
    (predicted vs measured precision per confidence bin, and per cut); a sweep of cuts to choose the default on both
    corpora. Labels are used only to measure: the fit sees the vectors and the 15 seeds."""
    default_cut = GEH().votes.min_confidence
    runs = []
    for corpus in corpora:
        A, B = embeddings(root / corpus, "minilm6"), embeddings(root / corpus, "mpnet")
        for alpha in alphas:
            for sd in split_seeds:
                rows1, rows2, truth, seeds = make_split(len(A), alpha, 15, sd)
                E1, E2 = A[rows1], B[rows2]
                n2 = len(E2)
                t0 = time.perf_counter()
                base = GEH(random_state=sd).set_params(calibrate=False, runner_up_margin=False).fit(E1, E2, seeds)
                t_base = time.perf_counter() - t0
                t0 = time.perf_counter()
                csls = GEH(random_state=sd).set_params(runner_up_margin=False).fit(E1, E2, seeds)
                t_csls = time.perf_counter() - t0
                t0 = time.perf_counter()
                g = GEH(random_state=sd).fit(E1, E2, seeds)
                t_new = time.perf_counter() - t0
                c = g.calibration_
                lab = _labels(c["candidates"], truth, n2)
                seed_keys = set((seeds[:, 0] * n2 + seeds[:, 1]).tolist())
                n_true = len(set((truth[:, 0] * n2 + truth[:, 1]).tolist()) - seed_keys)
                run = dict(corpus=corpus, alpha=alpha, split_seed=sd, n1=len(E1), n2=n2,
                           baseline=score(base.links_, truth, seeds, n2), baseline_seconds=round(t_base, 2),
                           calibrated_csls=score(csls.links_, truth, seeds, n2), csls_seconds=round(t_csls, 2),
                           calibrated=score(g.links_, truth, seeds, n2), seconds=round(t_new, 2),
                           estimated_precision=g.estimated_precision_, load=loadavg(),
                           n_partnerless=round(c["n_partnerless"], 1), decoy_rate=round(c["decoy_rate"], 4),
                           cuts={}, bins=[])
                conf = c["candidate_confidence"]
                for cut in CUTS:
                    k = conf >= cut
                    tp = int(lab[k].sum())
                    p_ = tp / max(int(k.sum()), 1)
                    r_ = tp / max(n_true, 1)
                    run["cuts"][str(cut)] = dict(predicted=float(conf[k].mean()) if k.any() else None, precision=p_,
                                                 recall=r_, f1=2 * p_ * r_ / (p_ + r_) if p_ + r_ else 0.0,
                                                 n_links=int(k.sum()))
                for lo, hi in zip(BINS[:-1], BINS[1:]):
                    k = (conf >= lo) & (conf < hi)
                    run["bins"].append(dict(lo=lo, hi=min(hi, 1.0), n=int(k.sum()), conf_sum=float(conf[k].sum()),
                                            correct=int(lab[k].sum())))
                runs.append(run)
                print(f"  {corpus} alpha {alpha} split {sd}: baseline {fmt(run['baseline'])} ({t_base:.1f} s), "
                      f"CSLS alone {fmt(run['calibrated_csls'])} ({t_csls:.1f} s), "
                      f"calibrated {fmt(run['calibrated'])} ({t_new:.1f} s), predicted P "
                      f"{run['estimated_precision']:.3f}", flush=True)
    out["runs"] = runs
    out["default_cut"] = default_cut
    med = lambda xs: float(np.median(xs))   # noqa: E731
    print(f"\n### GEH at 15 seeds, minilm6 -> mpnet: previous default vs calibrated cut {default_cut} (medians over "
          f"split seeds {list(split_seeds)}; P / R / F1, seeds excluded)\n")
    print("| alpha | method | " + " | ".join(corpora) + " |")
    print("|---|---|" + "---|" * len(corpora))
    summary = []
    for alpha in alphas:
        for key, label in (("baseline", "two-Gaussian cut, CSLS"), ("calibrated_csls", "calibrated cut, CSLS"),
                           ("calibrated", "calibrated cut, CSLS + runner-up margin (default)")):
            cells = []
            for corpus in corpora:
                rs = [r for r in runs if r["corpus"] == corpus and r["alpha"] == alpha]
                m = {k: med([r[key][k] for r in rs]) for k in ("precision", "recall", "f1")}
                sec = med([r[SECONDS_OF[key]] for r in rs])
                summary.append(dict(alpha=alpha, method=key, corpus=corpus, **m, seconds=sec))
                cells.append(f"{fmt(m)} ({sec:.1f} s)")
            print(f"| {alpha} | {label} | " + " | ".join(cells) + " |")
    out["summary"] = summary
    print("\n### Reliability of the calibrated confidence: predicted / measured precision per confidence bin "
          "(links pooled over split seeds; n)\n")
    print("| corpus | alpha | " + " | ".join(f"[{lo}, {min(hi, 1.0)})" for lo, hi in zip(BINS[:-1], BINS[1:])) + " |")
    print("|---|---|" + "---|" * (len(BINS) - 1))
    table = []
    for corpus in corpora:
        for alpha in alphas:
            rs = [r for r in runs if r["corpus"] == corpus and r["alpha"] == alpha]
            cells = []
            for j in range(len(BINS) - 1):
                n = sum(r["bins"][j]["n"] for r in rs)
                pred = sum(r["bins"][j]["conf_sum"] for r in rs) / n if n else None
                meas = sum(r["bins"][j]["correct"] for r in rs) / n if n else None
                table.append(dict(corpus=corpus, alpha=alpha, lo=BINS[j], hi=min(BINS[j + 1], 1.0), n=n,
                                  predicted=pred, measured=meas))
                cells.append(f"{pred:.2f} / {meas:.2f} ({n})" if n else "-")
            print(f"| {corpus} | {alpha} | " + " | ".join(cells) + " |")
    out["reliability"] = table
    print("\n### Cuts: predicted / measured precision, recall (medians over split seeds)\n")
    print("| cut | " + " | ".join(f"{c} a{a}" for c in corpora for a in alphas) + " |")
    print("|---|" + "---|" * (len(corpora) * len(alphas)))
    sweep = []
    for cut in CUTS:
        cells = []
        for corpus in corpora:
            for alpha in alphas:
                rs = [r["cuts"][str(cut)] for r in runs if r["corpus"] == corpus and r["alpha"] == alpha]
                m = {k: med([x[k] for x in rs if x[k] is not None]) for k in ("predicted", "precision", "recall")}
                sweep.append(dict(cut=cut, corpus=corpus, alpha=alpha, **m))
                cells.append(f"{m['predicted']:.3f} / {m['precision']:.3f}, R {m['recall']:.3f}")
        print(f"| {cut} | " + " | ".join(cells) + " |")
    out["cuts"] = sweep
    errs = [abs(t["predicted"] - t["measured"]) for t in table if t["n"] >= 50 and t["lo"] >= 0.5]
    errs_cut = [abs(x["predicted"] - x["precision"]) for x in sweep]
    out["max_abs_error_bins_n50"] = max(errs) if errs else None
    out["max_abs_error_cuts"] = max(errs_cut)
    print(f"\nlargest |predicted - measured|: {out['max_abs_error_bins_n50']:.3f} over bins >= 0.5 with >= 50 links, "
          f"{out['max_abs_error_cuts']:.3f} over cuts")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(DATA / "wordnet"))
    ap.add_argument("--parts", default="grid,repeat,ablations,timing")
    ap.add_argument("--quick", action="store_true", help="one pair, alpha 0.3, 15 seeds; timing up to 20k items")
    ap.add_argument("--time-cap", type=float, default=300.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "geh.json"))
    ap.add_argument("--calibration-out", default=str(ROOT / "bench" / "results" / "geh_calibration.json"))
    ap.add_argument("--corpora", default="wordnet,foldoc", help="calibration part: corpora under ../shared/data")
    ap.add_argument("--split-seeds", default="0,1,2", help="calibration part: split seeds")
    args = ap.parse_args()
    data = Path(args.data)
    parts = args.parts.split(",")
    path = Path(args.out)
    results = json.loads(path.read_text()) if path.exists() else {}
    results["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(), "numpy": np.__version__}
    if "grid" in parts:
        results["grid"] = []
        part_grid(data, PAIRS[:1] if args.quick else PAIRS, [0.3] if args.quick else ALPHAS,
                  [15] if args.quick else SEEDS, results["grid"])
    if "repeat" in parts:
        results["repeat"] = []
        part_repeat(data, results["repeat"], (0,) if args.quick else (0, 1, 2))
    if "ablations" in parts:
        results["ablations"] = []
        part_ablations(data, results["ablations"], (0.3,) if args.quick else (0.15, 0.3))
    if "timing" in parts:
        results["timing"] = []
        sizes = [10_000, 15_385] if args.quick else [10_000, 15_385, 20_000, 30_000, 50_000, 100_000]
        part_timing(data, results["timing"], sizes, args.time_cap)
    if "calibration" in parts:
        cal = {"machine": {**results["machine"], "platform": platform.platform(), "load_at_start": loadavg()},
               "command": "python bench/geh.py " + " ".join(sys.argv[1:])}
        part_calibration(data.parent, args.corpora.split(","), ALPHAS,
                         tuple(int(x) for x in args.split_seeds.split(",")), cal)
        cpath = Path(args.calibration_out)
        cpath.parent.mkdir(parents=True, exist_ok=True)
        cpath.write_text(json.dumps(cal, indent=1))
        print(f"\nwrote {cpath}")
        if parts == ["calibration"]:
            return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
