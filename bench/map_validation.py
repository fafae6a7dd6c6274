"""Label-free map validation (``vecbridge.align.validation.validate_map``) against the true top-1, on both corpora.

Question: does the validation score, computed from two unpaired samples alone, tell working maps (top-1 of the true
partner >= 0.5) from failed ones (< 0.5)? Reported: ROC AUC per corpus and pooled, the shipped decision
(``score >= vecbridge.align.validation.THRESHOLD``) and its accuracy on each corpus, the range of thresholds that are
right on every fit, and the AUC of the simpler statistics the criterion departs from (MUSE's mutual-neighbour
similarity alone, and against unrefined random maps; the mutual-neighbour share; cycle consistency).

Data: ../shared/data/{wordnet,foldoc}, docs embeddings of minilm6, minilm3, mpnet (10,000 items each, rows in a seeded
random order). Model pairs minilm6 <-> mpnet and minilm6 <-> minilm3, both directions. Two splits per pair (the
disjoint-halves protocol of ``bench/minivec2vec.py``, scaled to the cap of 3,000 vectors per side):

* split 0: the source model embeds items 0..2,999 and the target model items 3,000..5,999 (the unpaired fit halves);
  validation samples: source items 6,000..7,999, target items 8,000..9,999 (2,000 per side, unpaired, never fitted
  on); top-1 of the true partner on items 8,000..9,999 (source doc mapped against all 2,000 target docs; the labels
  are used here only, never by the validation).
* split 1: the roles of the halves swapped (source 3,000..5,999, target 0..2,999; validation source 8,000..9,999,
  target 6,000..7,999).

Maps per corpus, pair and split (the "family" of each row; ``intended`` says what it was built to be):

* working by construction: orthogonal Procrustes (``OrthogonalProcrustes()``, the CLI default) on 1,000 true pairs
  drawn from the source half's items;
* noisy links, from working to failed: Procrustes on 1,000 pairs of which a fraction p (0.5, 0.3, 0.2, 0.1) are true
  and the rest shuffled (the output of a linker of precision p);
* failed by construction: Procrustes on 1,000 shuffled pairs; a random orthogonal map (with both halves' means);
* real unsupervised fits: ``MiniVec2Vec(random_state=seed)`` (library defaults, seeds 0 and 1) on the fit halves,
  its nearest orthogonal map (``procrustes_``, what ``vecbridge fit --pairs unsupervised`` saves); they work or fail
  as they do (on foldoc minilm6 -> minilm3 they fail);
* a deliberately failed unsupervised fit: the same MiniVec2Vec with a wrong centroid matching (each run's matched
  target centroids randomly permuted before the pseudo-pairs; ``n_runs=10``; one centroid start, so no other start
  rescues it), which refines into a wrong optimum;
* seed-grown fits: ``GEH(random_state=0)`` on two collections sharing half their items (source items 0..2,999,
  target items 1,500..4,499 in split 0; 3,000..5,999 and 1,500..4,499 in split 1) from 15 true seed pairs, then
  Procrustes on its links; and the same from 15 wrong seed pairs (partners shuffled).

Each map is validated on the held-apart validation samples (what the jobs do when the collections have rows to
spare), and, on split 0, also on 2,000 rows of each fit half ("in-sample": the jobs' fallback for a collection too
small to spare any). One null distribution per corpus, pair, split and set of rows serves all the maps of that cell
(it does not depend on the map). The decision rule is ``vecbridge.align.validation.decide`` with the module's
constants; ``--summary-only`` re-applies the current rule to the stored measurements without refitting.

``--kind queries`` runs the same protocol on the corpora's query texts (WordNet lemmas, FOLDOC headwords: a few words
each, another distribution than the docs the rule was set on) into bench/results/map_validation_queries.json: the
shipped rule on data it was never chosen on.

Run: ``OPENBLAS_NUM_THREADS=1 python bench/map_validation.py [--data ../shared/data] [--jobs 2] [--quick]`` (cells run
in ``--jobs`` processes, one BLAS thread each; about 14 minutes on 2 shared cores); writes
bench/results/map_validation.json and prints the summary.
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

from vecbridge import metrics
from vecbridge.align import FewPairsWarning, OrthogonalProcrustes, validation
from vecbridge.align.minivec2vec import MiniVec2Vec
from vecbridge.align.validation import decide, null_distribution, random_orthogonal, validate_map
from vecbridge.errors import CheckFailed
from vecbridge.linking.geh import GEH

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ("wordnet", "foldoc")
PAIRS = [("minilm6", "mpnet"), ("mpnet", "minilm6"), ("minilm6", "minilm3"), ("minilm3", "minilm6")]
HALF = 3000
N_TRUE_PAIRS = 1000
PRECISIONS = (0.5, 0.3, 0.2, 0.1)
MV_SEEDS = (0, 1)
N_GEH_SEEDS = 15
WORKS = 0.5     # top-1 at or above this is a working map


def loadavg() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        return float("nan")


class Affine:
    """A fixed map ``(x - mu_a) W + mu_b`` (random orthogonal maps)."""

    def __init__(self, W, mu_a, mu_b):
        self.W, self.mu_a, self.mu_b = W.astype(np.float32), mu_a, mu_b

    def transform(self, X):
        return (X - self.mu_a) @ self.W + self.mu_b

    def inverse_transform(self, Y):
        return (Y - self.mu_b) @ self.W.T + self.mu_a


class WrongMatching(MiniVec2Vec):
    """MiniVec2Vec whose centroid matching is deliberately wrong: every run's matched target centroids are randomly
    permuted before the pseudo-pairs are built, so the fit refines from a wrong start (a wrong permutation)."""

    def _anchors(self, A, B, rng, n_clusters):
        anc_a, anc_b, scores = super()._anchors(A, B, rng, n_clusters)
        c = len(anc_b) // self.n_runs   # the clusters of one run (the estimator caps n_clusters on small samples)
        perm = np.concatenate([run * c + rng.permutation(c) for run in range(len(anc_b) // c)])
        return anc_a, anc_b[perm], scores


def splits():
    """(name, source fit rows, target fit rows, validation source rows, validation target rows, GEH rows)."""
    a, b = np.arange(0, HALF), np.arange(HALF, 2 * HALF)
    v1, v2 = np.arange(6000, 8000), np.arange(8000, 10_000)
    geh_t = np.arange(HALF // 2, HALF // 2 + HALF)
    return [(0, a, b, v1, v2, (a, geh_t)), (1, b, a, v2, v1, (b, geh_t))]


def procrustes(X, Y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewPairsWarning)
        return OrthogonalProcrustes().fit(X, Y)


def noisy_pairs(rows: np.ndarray, p: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """Source rows and target rows of 1,000 pairs, a fraction ``p`` true and the rest shuffled among themselves."""
    src = rng.choice(rows, N_TRUE_PAIRS, replace=False)
    n_true = int(round(p * N_TRUE_PAIRS))
    wrong = src[n_true:]
    tgt = np.concatenate([src[:n_true], wrong[np.roll(np.arange(len(wrong)), 1)]]) if len(wrong) else src
    return src, tgt


def geh_map(X, Y, src_rows, tgt_rows, wrong: bool, seed: int):
    """GEH from 15 seed pairs (true, or with shuffled partners), then Procrustes on its links; no map (None) where
    GEH itself refuses its links."""
    rng = np.random.default_rng(seed)
    shared = np.intersect1d(src_rows, tgt_rows)
    pos_s = {r: i for i, r in enumerate(src_rows)}
    pos_t = {r: i for i, r in enumerate(tgt_rows)}
    items = rng.choice(shared, N_GEH_SEEDS, replace=False)
    partners = np.roll(items, 1) if wrong else items
    seeds = np.array([[pos_s[i], pos_t[j]] for i, j in zip(items, partners)])
    try:
        g = GEH(random_state=seed).fit(X[src_rows], Y[tgt_rows], seeds)
    except CheckFailed as exc:   # GEH's own refusal (bootstrapping never took off): no map reaches the validation
        return None, {"refused_by_geh": str(exc)}
    links = g.links_
    return procrustes(X[src_rows][links[:, 0]], Y[tgt_rows][links[:, 1]]), {"n_links": int(len(links))}


def candidates(X, Y, split, seed: int, quick: bool):
    """Yield (family, intended, fitted map, extra) for one corpus, pair and split."""
    _, a, b, _, _, (gs, gt) = split
    rng = np.random.default_rng(100 + seed)
    src, tgt = noisy_pairs(a, 1.0, rng)
    yield "procrustes, true pairs", "working", procrustes(X[src], Y[tgt]), {}
    for p in (PRECISIONS[:2] if quick else PRECISIONS):
        src, tgt = noisy_pairs(a, p, rng)
        yield f"procrustes, links of precision {p}", "either", procrustes(X[src], Y[tgt]), {}
    src, tgt = noisy_pairs(a, 0.0, rng)
    yield "procrustes, shuffled pairs", "failed", procrustes(X[src], Y[tgt]), {}
    W = random_orthogonal(X.shape[1], Y.shape[1], rng)
    yield "random orthogonal", "failed", Affine(W, X[a].mean(0), Y[b].mean(0)), {}
    for s in (MV_SEEDS[:1] if quick else MV_SEEDS):
        t = time.perf_counter()
        est = MiniVec2Vec(random_state=s).fit(X[a], Y[b])
        yield "mini-vec2vec", "either", est.procrustes_, {"seed": s, "fit_s": round(time.perf_counter() - t, 2)}
    t = time.perf_counter()
    est = WrongMatching(random_state=seed, n_runs=10, n_restarts=1, init="centroids").fit(X[a], Y[b])   # no rescue
    yield "mini-vec2vec, wrong matching", "failed", est.procrustes_, {"fit_s": round(time.perf_counter() - t, 2)}
    for wrong in (False, True):
        t = time.perf_counter()
        m, extra = geh_map(X, Y, gs, gt, wrong, seed)
        extra["fit_s"] = round(time.perf_counter() - t, 2)
        yield f"GEH + procrustes, {'wrong' if wrong else 'true'} seeds", "failed" if wrong else "working", m, extra


def run_cell(data: Path, corpus: str, src_m: str, tgt_m: str, split_no: int, quick: bool, kind: str = "docs"):
    """Every map of one corpus, model pair and split, validated; returns (rows, nulls)."""
    warnings.simplefilter("ignore", FewPairsWarning)
    X, Y = embeddings(data / corpus, src_m, kind), embeddings(data / corpus, tgt_m, kind)
    split = splits()[split_no]
    name, a, b, vs, vt, _ = split
    held = np.arange(8000, 10_000)
    samples = {False: (X[vs], Y[vt])}
    if name == 0:   # in-sample validation (the jobs' fallback for small collections) on the first split only
        samples[True] = (X[a[:2000]], Y[b[:2000]])
    rows, nulls, null = [], [], {}
    for mode, (Xv, Yv) in samples.items():
        t = time.perf_counter()
        null[mode] = null_distribution(Xv, Yv, random_state=name)
        nulls.append({"corpus": corpus, "pair": f"{src_m}->{tgt_m}", "split": name, "in_sample": mode,
                      "refined": null[mode].refined.tolist(), "random": null[mode].random.tolist(),
                      "seconds": round(time.perf_counter() - t, 2), "load": loadavg()})
    for family, intended, m, extra in candidates(X, Y, split, name, quick):
        row = {"corpus": corpus, "pair": f"{src_m}->{tgt_m}", "split": name, "family": family,
               "intended": intended, **extra}
        rows.append(row)
        if m is None:   # refused before the validation: kept in the JSON, left out of the validation's figures
            print(f"{corpus} {src_m}->{tgt_m} split {name} {family:38s} refused by GEH itself", flush=True)
            continue
        row["top1"] = top1 = metrics.pair_quality(m.transform(X[held]), Y[held]).top1
        for mode, (Xv, Yv) in samples.items():
            t = time.perf_counter()
            v = validate_map(m, Xv, Yv, null=null[mode], random_state=name)
            row["in_sample" if mode else "held_apart"] = {**v.as_dict(), "seconds": round(time.perf_counter() - t, 2)}
        h = row["held_apart"]
        print(f"{corpus} {src_m}->{tgt_m} split {name} {family:38s} top1={top1:.3f} score={h['score']:.2f} "
              f"gain={h['gain']:+.3f} agree={h['agreement']:.3f} muse={h['mnn_similarity']:.3f} "
              f"null={h['null_mean']:.3f} random={h['random_similarity']:.3f} "
              + (f"| in-sample score={row['in_sample']['score']:.2f} " if "in_sample" in row else "")
              + f"{'PASS' if h['passed'] else 'fail'}", flush=True)
    return rows, nulls


def run(data: Path, quick: bool, jobs: int, kind: str = "docs") -> tuple[list, list]:
    from concurrent.futures import ProcessPoolExecutor

    cells = [(data, corpus, s, t, sp, quick, kind) for corpus in CORPORA for s, t in (PAIRS[::2] if quick else PAIRS)
             for sp in ((0,) if quick else (0, 1))]
    if jobs <= 1:
        done = [run_cell(*c) for c in cells]
    else:
        with ProcessPoolExecutor(jobs) as pool:
            done = list(pool.map(run_cell, *zip(*cells)))
    return [r for rows, _ in done for r in rows], [n for _, nulls in done for n in nulls]


def redecide(rows: list):
    """Apply the module's current rule (:func:`vecbridge.align.validation.decide`) to the stored measurements."""
    for r in rows:
        for key in ("held_apart", "in_sample"):
            if key in r:
                v = r[key]
                v["score"], v["passed"], v["reason"] = decide(v["gain"], v["agreement"])
                v["threshold"] = validation.THRESHOLD


# ------------------------------------------------------------------------------------------------- summary

def auc(pos, neg) -> float | None:
    """ROC AUC = P(score of a working map > score of a failed one), ties counted half (Mann-Whitney)."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    if not len(pos) or not len(neg):
        return None
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


STATISTICS = {
    "score": lambda v: v["score"],
    "gain": lambda v: v["gain"],
    "agreement": lambda v: v["agreement"],
    "mnn_similarity (MUSE's criterion alone)": lambda v: v["mnn_similarity"],
    "mnn_similarity - random maps (MUSE's criterion vs unrefined random maps)":
        lambda v: v["mnn_similarity"] - v["random_similarity"],
    "mnn_fraction": lambda v: v["mnn_fraction"],
    "cycle_consistency": lambda v: v["cycle_consistency"],
}


def accuracy(rows, key, threshold) -> dict:
    right = [(r[key]["score"] >= threshold) == (r["top1"] >= WORKS) for r in rows]
    fp = sum(r[key]["score"] >= threshold and r["top1"] < WORKS for r in rows)
    fn = sum(r[key]["score"] < threshold and r["top1"] >= WORKS for r in rows)
    return {"accuracy": float(np.mean(right)), "n": len(rows), "false_pass": int(fp), "false_refusal": int(fn)}


def right_range(rows, key) -> list | None:
    """The interval of thresholds that classify every row right (None if none does)."""
    good = [r[key]["score"] for r in rows if r["top1"] >= WORKS]
    bad = [r[key]["score"] for r in rows if r["top1"] < WORKS]
    lo, hi = (max(bad) if bad else -np.inf), (min(good) if good else np.inf)
    return [float(lo), float(hi)] if lo < hi else None


def summarize(rows: list, threshold: float) -> dict:
    rows = [r for r in rows if "held_apart" in r]   # maps refused before the validation have no score
    groups = {c: [r for r in rows if r["corpus"] == c] for c in CORPORA}
    groups["pooled"] = rows
    out = {"threshold": threshold, "works_at_top1": WORKS, "n_fits": len(rows),
           "n_working": sum(r["top1"] >= WORKS for r in rows), "n_failed": sum(r["top1"] < WORKS for r in rows),
           "by": {}}
    for name, rs in groups.items():
        g = {"n": len(rs), "working": sum(r["top1"] >= WORKS for r in rs), "failed": sum(r["top1"] < WORKS for r in rs)}
        for key in ("held_apart", "in_sample"):
            rk = [r for r in rs if key in r]
            pos = [r[key] for r in rk if r["top1"] >= WORKS]
            neg = [r[key] for r in rk if r["top1"] < WORKS]
            g[key] = {"auc": {s: auc([f(v) for v in pos], [f(v) for v in neg]) for s, f in STATISTICS.items()},
                      **accuracy(rk, key, threshold), "right_thresholds": right_range(rk, key)}
        out["by"][name] = g
    fam = {}
    for r in rows:
        f = fam.setdefault(r["family"], {"n": 0, "working": 0, "passed": 0, "n_in_sample": 0, "passed_in_sample": 0,
                                         "top1": [], "score": []})
        f["n"] += 1
        f["n_in_sample"] += "in_sample" in r
        f["working"] += r["top1"] >= WORKS
        f["passed"] += r["held_apart"]["score"] >= threshold
        f["passed_in_sample"] += "in_sample" in r and r["in_sample"]["score"] >= threshold
        f["top1"].append(r["top1"])
        f["score"].append(r["held_apart"]["score"])
    out["families"] = {k: {**{x: int(v[x]) for x in ("n", "working", "passed", "n_in_sample", "passed_in_sample")},
                           "top1": [round(min(v["top1"]), 3), round(max(v["top1"]), 3)],
                           "score": [round(min(v["score"]), 2), round(max(v["score"]), 2)]} for k, v in fam.items()}
    return out


def print_summary(s: dict):
    print(f"\n{s['n_fits']} fits: {s['n_working']} working (top-1 >= {WORKS}), {s['n_failed']} failed; "
          f"threshold {s['threshold']}")
    for name, g in s["by"].items():
        for key in ("held_apart", "in_sample"):
            h = g[key]
            if not h["n"]:
                continue
            aucs = ", ".join(f"{k.split(' ')[0]} {v:.3f}" for k, v in h["auc"].items() if v is not None)
            print(f"  {name:8s} {key:10s} n={g['n']} ({g['working']} working) AUC: {aucs}; accuracy "
                  f"{h['accuracy']:.3f} (false pass {h['false_pass']}, false refusal {h['false_refusal']}); "
                  f"right thresholds {h['right_thresholds']}")
    for k, v in s["families"].items():
        print(f"  {k:40s} n={v['n']} working={v['working']} passed={v['passed']} (in-sample {v['passed_in_sample']} of "
              f"{v['n_in_sample']}) "
              f"top1 {v['top1']} score {v['score']}")


def rule() -> dict:
    v = validation
    return {"gain_min": v.GAIN_MIN, "agreement_min": v.AGREEMENT_MIN, "threshold": v.THRESHOLD, "n_null": v.N_NULL,
            "refine_iter": v.REFINE_ITER, "refine_batch": v.REFINE_BATCH, "refine_neighbors": v.REFINE_NEIGHBORS,
            "k_csls": v.K_CSLS}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--quick", action="store_true", help="one split, two pairs, fewer maps (a smoke run)")
    ap.add_argument("--jobs", type=int, default=2, help="cells run in parallel (one BLAS thread each)")
    ap.add_argument("--summary-only", action="store_true",
                    help="recompute the summary of the existing JSON at the current THRESHOLD (no fitting)")
    ap.add_argument("--kind", choices=("docs", "queries"), default="docs",
                    help="which texts of the corpora: the docs (default) or the query texts, never used to set the rule")
    ap.add_argument("--out", type=Path, default=None,
                    help="default bench/results/map_validation.json (docs) or map_validation_queries.json (queries)")
    args = ap.parse_args(argv)
    if args.out is None:
        stem = "map_validation" if args.kind == "docs" else "map_validation_queries"
        args.out = ROOT / "bench" / "results" / f"{stem}.json"
    if args.summary_only:
        result = json.loads(args.out.read_text())
        redecide(result["fits"])
        result["rule"] = rule()
        result["summary"] = summarize(result["fits"], validation.THRESHOLD)
        args.out.write_text(json.dumps(result, indent=1, default=float))
        print_summary(result["summary"])
        return
    if not args.data.exists():
        sys.exit(f"data not found: {args.data}")
    t0 = time.perf_counter()
    rows, nulls = run(args.data, args.quick, args.jobs, args.kind)
    result = {"machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
                          "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")},
              "protocol": {"kind": args.kind, "half": HALF, "validation_rows_per_side": 2000, "quick": args.quick, "jobs": args.jobs,
                           "true_pairs": N_TRUE_PAIRS, "precisions": PRECISIONS, "mini_vec2vec_seeds": MV_SEEDS},
              "rule": rule(), "runtime_s": round(time.perf_counter() - t0, 1), "fits": rows, "nulls": nulls}
    result["summary"] = summarize(rows, validation.THRESHOLD)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=float))
    print_summary(result["summary"])
    print(f"runtime {result['runtime_s']:.0f} s")


if __name__ == "__main__":
    main()
