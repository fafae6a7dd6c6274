"""What a user gets from each linking mode: retention@10 of new-model queries after aligning with that mode's links.

Wordnet (../shared/data/wordnet, 10,000 real items). 2,000 items are the evaluation set (their old-model docs are
mapped and searched with the new model's queries; retention = mapped Recall@10 / Recall@10 over the natively
re-embedded docs of the same 2,000 items). The other 8,000 items are all the linking modes may use:

* shared ids: all 8,000 true pairs;
* re-embedded sample: 2,000 of them (a realistic re-embedding budget);
* GEH: the Vector Linking paper's split of the 8,000 (overlap alpha 0.3: each collection holds Omega plus its own half of the rest),
  15 seed pairs grown by ``GEH()`` into links; Procrustes on the links;
* unsupervised: mini-vec2vec on two disjoint halves (4,000 old-model vectors, 4,000 other items' new-model vectors),
  its own map, and the map refitted on its CSLS mutual-nearest-neighbour links (what ``vecbridge link --mode
  unsupervised`` + ``vecbridge fit`` does).

Run: ``python bench/linking_retention.py`` (writes bench/results/linking_retention.json, prints a Markdown table).
"""
from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
from _corpora import DATA, embeddings

from vecbridge import metrics
from vecbridge.align import MiniVec2Vec, OrthogonalProcrustes
from vecbridge.linking import GEH
from vecbridge.numeric.neighbors import mutual_nearest_neighbours

ROOT = Path(__file__).resolve().parents[1]


def procrustes(X, Y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return OrthogonalProcrustes().fit(X, Y)


def evaluate(est, A_eval, B_eval, Qb_eval, k=10) -> dict:
    mapped = est.transform(A_eval)
    rel = np.arange(len(A_eval))
    ret = metrics.recall_retention(Qb_eval, mapped, B_eval, rel, k=k)
    return {"top1": metrics.pair_quality(mapped, B_eval).top1, "retention10": ret["retention"],
            "recall10_mapped": ret["recall_mapped"] if "recall_mapped" in ret else None}


def run_pair(data: Path, a: str, b: str, seed: int) -> list[dict]:
    A, B, Qb = embeddings(data, a), embeddings(data, b), embeddings(data, b, "queries")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(A))
    ev, pool = perm[:2000], perm[2000:]
    out = []

    def record(mode, est, seconds, **extra):
        r = {"pair": f"{a}->{b}", "mode": mode, "seconds": round(seconds, 1), **extra,
             **evaluate(est, A[ev], B[ev], Qb[ev])}
        out.append(r)
        print(f"| {a} -> {b} | {mode} | {r.get('links', '')} | {r['top1']:.3f} | {r['retention10']:.3f} | "
              f"{r['seconds']} |", flush=True)

    t0 = time.perf_counter()
    record("shared ids (8,000 pairs)", procrustes(A[pool], B[pool]), time.perf_counter() - t0, links=len(pool))
    sub = pool[:2000]
    t0 = time.perf_counter()
    record("re-embedded sample (2,000)", procrustes(A[sub], B[sub]), time.perf_counter() - t0, links=len(sub))

    # GEH: the Vector Linking paper's section 5.1 split of the pool, alpha 0.3, 15 seeds
    p = rng.permutation(pool)
    n_omega = int(round(0.3 * len(p)))
    omega, rest = p[:n_omega], p[n_omega:]
    rows1 = rng.permutation(np.concatenate([omega, rest[:len(rest) // 2]]))
    rows2 = rng.permutation(np.concatenate([omega, rest[len(rest) // 2:]]))
    pos2 = {int(x): j for j, x in enumerate(rows2)}
    pos1 = {int(x): j for j, x in enumerate(rows1)}
    seeds_items = rng.choice(omega, 15, replace=False)
    seeds = np.array([[pos1[int(x)], pos2[int(x)]] for x in seeds_items])
    t0 = time.perf_counter()
    g = GEH(random_state=seed).fit(A[rows1], B[rows2], seeds)
    L = g.links_
    correct = float(np.mean(rows1[L[:, 0]] == rows2[L[:, 1]]))
    record("GEH (15 seeds, alpha 0.3)", procrustes(A[rows1[L[:, 0]]], B[rows2[L[:, 1]]]),
           time.perf_counter() - t0, links=len(L), link_precision=round(correct, 3))

    # unsupervised: disjoint halves
    half_a, half_b = pool[:len(pool) // 2], pool[len(pool) // 2:]
    t0 = time.perf_counter()
    mv = MiniVec2Vec(random_state=seed).fit(A[half_a], B[half_b])
    t_mv = time.perf_counter() - t0
    record("unsupervised: mini-vec2vec map", mv, t_mv)
    pairs = mutual_nearest_neighbours(mv.transform(A[half_a]), B[half_b])[0]
    record("unsupervised: mini-vec2vec MNN links + Procrustes", procrustes(A[half_a[pairs[:, 0]]], B[half_b[pairs[:, 1]]]),
           time.perf_counter() - t0, links=len(pairs))   # disjoint halves: the links are nearest other items
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=DATA / "wordnet")
    ap.add_argument("--pairs", default="minilm6:mpnet,minilm6:minilm3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "linking_retention.json")
    args = ap.parse_args()
    print("| pair | mode | links | held-out top-1 | retention@10 | s |\n|---|---|---|---|---|---|")
    rows = []
    for spec in args.pairs.split(","):
        a, b = spec.split(":")
        rows += run_pair(args.data, a, b, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"load": os.getloadavg()[0], "rows": rows}, indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
