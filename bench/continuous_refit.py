"""Continuous refit during `vecbridge upgrade reembed`: how much better the map gets as records are re-embedded.

Protocol (numpy, the package's own :class:`vecbridge.runtime.refit.RefitPairs`, no store): for each corpus
(../shared/data/wordnet, ../shared/data/foldoc; 10,000 items, query i relevant to doc i) and each ordered pair of
sentence encoders, the start fits ``OrthogonalProcrustes`` on a uniform sample of 2,000 items (their raw doc
vectors: what ``upgrade start`` fits on); the other 8,000 are re-embedded in the ``random`` priority's order
(``shuffle_rank`` of each id), 64 per batch, each batch added to the pairs as ``reembed`` adds it, and the refit
runs exactly when ``reembed`` runs it (``due()``: the pairs grew by a quarter, with enough held out; the new map
replaces the one in use when its held-out cosine gain is at least ``MIN_GAIN``).

At 5%, 25% and 50% of the 8,000 re-embedded, with the map in use then:

* mapped only: Recall@10 of new-model queries over the collection with every doc mapped (the quality of the map
  itself), start's map vs the map in use: over the queries whose relevant doc is still mapped at that stage (the
  records a refit maps again: in neither map's fit, so neither is flattered) and over all 10,000 queries;
* served: Recall@10 over the collection as served then (natives for the fit sample and the re-embedded records,
  mapped vectors for the rest), start's map vs the map in use, and the same over the queries whose relevant doc is
  still mapped (where the map matters).

Run: ``python bench/continuous_refit.py`` (~2 minutes on 2 cores); writes bench/results/continuous_refit.json.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _corpora import DATA, embeddings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vecbridge.align import OrthogonalProcrustes  # noqa: E402
from vecbridge.align.artifact import Alignment  # noqa: E402
from vecbridge.runtime import refit as refit_module  # noqa: E402
from vecbridge.runtime.record_stamps import shuffle_rank  # noqa: E402
from vecbridge.vectors import l2_normalize  # noqa: E402

PAIRS = [("minilm6", "mpnet"), ("mpnet", "minilm6"), ("minilm6", "minilm3"), ("minilm3", "minilm6"),
         ("minilm3", "mpnet"), ("mpnet", "minilm3")]
FIT, BATCH, FRACTIONS = 2000, 64, (0.05, 0.25, 0.50)


def recall10(Q: np.ndarray, D: np.ndarray, rows: np.ndarray | None = None) -> float:
    """Recall@10 of queries ``rows`` (query i relevant to doc i; ties count against the relevant doc)."""
    rows = np.arange(len(Q)) if rows is None else rows
    hits = []
    for lo in range(0, len(rows), 1000):
        r = rows[lo:lo + 1000]
        S = Q[r] @ D.T
        hits.append((S > S[np.arange(len(r)), r][:, None]).sum(1) < 10)
    return float(np.mean(np.concatenate(hits))) if len(rows) else float("nan")


def run_pair(corpus: str, old: str, new: str) -> dict:
    X, Y = embeddings(DATA / corpus, old), embeddings(DATA / corpus, new)
    Qn = l2_normalize(embeddings(DATA / corpus, new, "queries"))
    Yn = l2_normalize(Y)
    n = len(X)
    fit = np.random.default_rng(0).permutation(n)[:FIT]
    rest = np.setdiff1d(np.arange(n), fit)
    order = rest[np.argsort([shuffle_rank(int(i)) for i in rest], kind="stable")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = Alignment.from_estimator(OrthogonalProcrustes().fit(X[fit], Y[fit]))
    start_mapped = l2_normalize(start.transform(X))
    with tempfile.TemporaryDirectory() as tmp:
        pairs = refit_module.RefitPairs(Path(tmp) / "p.npz", X.shape[1], Y.shape[1]).seed(X[fit], Y[fit])
        current, refits, out, done = start, [], [], 0
        t_refit = 0.0
        for f in FRACTIONS:
            upto = int(round(f * len(order)))
            while done < upto:
                b = order[done:min(done + BATCH, upto)]
                pairs.add([int(i) for i in b], X[b], Y[b])
                done += len(b)
                if pairs.due():
                    t = time.perf_counter()
                    new_map, verdict = pairs.refit(current)
                    t_refit += time.perf_counter() - t
                    refits.append({"at_reembedded": done, **verdict})
                    if new_map is not None:
                        current = new_map
            mapped = l2_normalize(current.transform(X))
            native = np.zeros(n, bool)
            native[fit] = True
            native[order[:done]] = True
            still = np.flatnonzero(~native)

            def served(m):
                return np.where(native[:, None], Yn, m)
            row = {"fraction": f, "reembedded": done, "map_pairs": current.metadata["fit"]["n_pairs"],
                   "mapped_only_start": recall10(Qn, start_mapped, still),
                   "mapped_only_refit": recall10(Qn, mapped, still),
                   "mapped_only_all_start": recall10(Qn, start_mapped), "mapped_only_all_refit": recall10(Qn, mapped),
                   "served_start": recall10(Qn, served(start_mapped)), "served_refit": recall10(Qn, served(mapped)),
                   "served_start_on_mapped": recall10(Qn, served(start_mapped), still),
                   "served_refit_on_mapped": recall10(Qn, served(mapped), still)}
            row["mapped_only_gain"] = row["mapped_only_refit"] - row["mapped_only_start"]
            out.append(row)
            print(f"{corpus} {old}->{new} {f:.0%}: map on {row['map_pairs']} pairs, mapped-only "
                  f"{row['mapped_only_start']:.4f} -> {row['mapped_only_refit']:.4f} "
                  f"({row['mapped_only_gain']:+.4f}); served {row['served_start']:.4f} -> {row['served_refit']:.4f}",
                  flush=True)
    return {"corpus": corpus, "old": old, "new": new, "stages": out, "refits": refits, "refit_seconds": t_refit}


def main() -> None:
    t0 = time.perf_counter()
    results = [run_pair(c, a, b) for c in ("wordnet", "foldoc") for a, b in PAIRS]
    gains = [s["mapped_only_gain"] for r in results for s in r["stages"] if s["fraction"] == 0.25]
    doc = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                       "load": os.getloadavg()[0]},
           "command": "python bench/continuous_refit.py",
           "settings": {"fit_sample": FIT, "batch": BATCH, "growth": refit_module.GROWTH,
                        "min_gain": refit_module.MIN_GAIN, "holdout_every": refit_module.HOLDOUT_EVERY,
                        "held_max": refit_module.HELD_MAX},
           "results": results, "gain_at_25_min": min(gains), "gain_at_25_max": max(gains),
           "seconds": time.perf_counter() - t0}
    out = ROOT / "bench" / "results" / "continuous_refit.json"
    out.write_text(json.dumps(doc, indent=1))
    print(f"mapped-only gain at 25%: {min(gains):+.4f} .. {max(gains):+.4f}; {doc['seconds']:.0f} s; wrote {out}")


if __name__ == "__main__":
    main()
