"""Re-embedding priorities with a query log that repeats popular queries, as real logs do.

``bench/upgrade_curve.py`` measures the ``hubs`` and ``queries`` priorities with a log in which every query appears
once (half A) and scores them on other queries (half B). Real logs are skewed: a few queries are asked again and
again. Here the log and the traffic that follows are both drawn from a Zipf distribution over the 5,000 queries of
half A (popularity rank r has probability proportional to r^-1.1, the ranks a random permutation; every figure is
the mean over ``SEEDS`` permutations, with its standard deviation, since a few queries carry much of the traffic):

* the log: 10,000 draws, given to the priorities as ``upgrade query-log`` would get it (repeats kept:
  ``queries`` counts how often the log's queries retrieve each record in their top 10 over the everything-mapped
  collection; ``hubs`` is the mapped vector's mean cosine to its 10 nearest log queries);
* the traffic: 10,000 further independent draws; served Recall@10 is the mean over those draws (a popular
  query counts as often as it is asked). ``random`` and ``residual`` need no log.

The rest is ``bench/upgrade_curve.py``'s protocol (its ``Pair``: the map on 2,000 re-embedded items, the fit sample
native from the start, the other 8,000 re-embedded in each priority's order): at 1%, 5%, 10% and 25% of them,
served Recall@10 with the new model's queries alone (beta 0: the priority's own effect) against staying on the old
model and a full re-embed over the same traffic.

Run: ``python bench/zipf_priorities.py`` (~15 minutes on 2 cores); writes bench/results/zipf_priorities.json.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import upgrade_curve as uc  # noqa: E402

from vecbridge import metrics  # noqa: E402
from vecbridge.numeric.neighbors import knn  # noqa: E402
from vecbridge.numeric.ranking import best_first  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXPONENT, LOG_DRAWS, TRAFFIC_DRAWS = 1.1, 10_000, 10_000
FRACTIONS = (0.01, 0.05, 0.10, 0.25)
PRIORITIES = ("random", "residual", "hubs", "queries")
SEEDS = (0, 1, 2, 3, 4)


def zipf_draws(support: np.ndarray, n: int, order_seed: int, seed: int) -> np.ndarray:
    """``n`` query indices from ``support``, Zipf(EXPONENT) over the popularity order ``order_seed``."""
    popular = np.random.default_rng(order_seed).permutation(support)
    p = np.arange(1, len(popular) + 1, dtype=np.float64) ** -EXPONENT
    return popular[np.random.default_rng(seed).choice(len(popular), n, p=p / p.sum())]


def served_hits(p, native: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Whether query ``r``'s relevant doc ``r`` is in its top 10 over the served collection (new-model queries,
    natives where ``native``, mapped vectors elsewhere), for each of ``rows``."""
    S = np.where(native[None, :], p.S_nat[rows], p.S_map[rows])
    true = S[np.arange(len(rows)), rows]
    return ((S > true[:, None]).sum(axis=1) < uc.K) & p.valid[rows]


def run_pair(corpus: str, old: str, new: str, halves) -> dict:
    p = uc.Pair(corpus, old, new, halves)
    stay = (metrics.partner_ranks(p.Qo_raw, p.X_raw) <= uc.K) & p.Qo_raw.any(axis=1)
    full = (metrics.partner_ranks(p.Qn_raw, p.Y_raw) <= uc.K) & p.valid
    runs = []
    for s in SEEDS:
        log, traffic = zipf_draws(p.A, LOG_DRAWS, s, 100 + s), zipf_draws(p.A, TRAFFIC_DRAWS, s, 200 + s)
        top = np.argpartition(-p.S_map[log], uc.K - 1, axis=1)[:, :uc.K]   # the log's queries over everything mapped
        scores = {"queries": np.bincount(top.ravel(), minlength=p.n)[p.rest].astype(np.float64),
                  "hubs": knn(p.M_raw[p.rest], p.Qn_raw[log], uc.HUB_K)[1].mean(axis=1)}
        for prio, sc in scores.items():
            p.order[prio] = p.rest[best_first(sc)]
        rows, weight = np.unique(traffic, return_counts=True)
        run = {"staying": float(stay[traffic].mean()), "full_reembed": float(full[traffic].mean()),
               "distinct_in_traffic": int(len(rows)), "traffic_seen_in_log": float(np.isin(traffic, log).mean())}
        for prio in PRIORITIES:
            run[prio] = [float(np.average(served_hits(p, p.mask(prio, f), rows), weights=weight)) for f in FRACTIONS]
        runs.append(run)
    out = {"pair": p.name, "runs": runs}
    for key in ("staying", "full_reembed", *PRIORITIES):
        vals = np.asarray([r[key] for r in runs], dtype=np.float64)
        out[key] = {"mean": vals.mean(axis=0).tolist(), "sd": vals.std(axis=0).tolist()}
    print(corpus, p.name, {k: [round(x, 4) for x in out[k]["mean"]] for k in PRIORITIES},
          f"staying {out['staying']['mean']:.4f} full {out['full_reembed']['mean']:.4f}", flush=True)
    return out


def main() -> None:
    t0 = time.perf_counter()
    perm = np.random.default_rng(1).permutation(10_000)
    halves = (np.sort(perm[:5000]), np.sort(perm[5000:]))   # upgrade_curve's halves
    results = {c: [run_pair(c, a, b, halves) for a, b in uc.PAIRS] for c in uc.CORPORA}
    doc = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load": os.getloadavg()[0]},
           "command": "python bench/zipf_priorities.py", "exponent": EXPONENT, "log_draws": LOG_DRAWS,
           "traffic_draws": TRAFFIC_DRAWS, "fractions": FRACTIONS, "seeds": SEEDS, "results": results,
           "seconds": time.perf_counter() - t0}
    out = ROOT / "bench" / "results" / "zipf_priorities.json"
    out.write_text(json.dumps(doc, indent=1))
    print(f"{doc['seconds']:.0f} s; wrote {out}")


if __name__ == "__main__":
    main()
