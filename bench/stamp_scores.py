"""What the priority scores of an upgrade's stamps cost: the residual and hub scores ``upgrade start`` computes for
every record it maps (``MappedStamps``), in batches of 1,000, against the way they were computed before (the full
``reliability_scores``, whose third nearest-neighbour search, the anchors' neighbours in the new space, no stamp
keeps). Real wordnet vectors: all-MiniLM-L6-v2 (old) and all-mpnet-base-v2 (new), a Procrustes map fitted on 2,000
anchors, 8,000 records scored; both ways checked to give the same scores bit for bit.

Run: ``python bench/stamp_scores.py [--repeats 5]``; writes bench/results/stamp_scores.json. A benchmark, not a test.
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

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from vecbridge.align.procrustes import OrthogonalProcrustes  # noqa: E402
from vecbridge.quality.options import anchor_residual, anchor_residuals, reliability_scores  # noqa: E402
from vecbridge.quality.scoring import hub_penalty  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "wordnet"
ANCHORS, BATCH = 2000, 1000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "stamp_scores.json")
    args = ap.parse_args(argv)
    X = np.load(DATA / "minilm6_docs.npy").astype(np.float32)
    Y = np.load(DATA / "mpnet_docs.npy").astype(np.float32)
    M = OrthogonalProcrustes().fit(X[:ANCHORS], Y[:ANCHORS]).transform(X)
    res = anchor_residuals(M[:ANCHORS], Y[:ANCHORS])
    rows, mapped = X[ANCHORS:], M[ANCHORS:]

    def before(b, m):
        return reliability_scores(b, m, X[:ANCHORS], Y[:ANCHORS], res)["anchor_residual"], hub_penalty(m, Y[:ANCHORS])

    def now(b, m):
        return anchor_residual(b, X[:ANCHORS], res)[0], hub_penalty(m, Y[:ANCHORS])

    for a, b in zip(before(rows, mapped), now(rows, mapped)):
        assert np.array_equal(a, b), "the scores differ"
    runs: dict[str, list[float]] = {"before": [], "now": []}
    for r in range(args.repeats):   # alternating, so that neither way always runs on a warmer machine
        for name in ("before", "now") if r % 2 == 0 else ("now", "before"):
            fn = before if name == "before" else now
            t = time.perf_counter()
            for lo in range(0, len(rows), BATCH):
                fn(rows[lo:lo + BATCH], mapped[lo:lo + BATCH])
            runs[name].append((time.perf_counter() - t) / len(rows) * 1e6)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"priority scores: {med['before']:.1f} us a record before, {med['now']:.1f} us now "
          f"({med['now'] / med['before']:.2f}x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} cores",
                                    "command": "python bench/stamp_scores.py " + " ".join(argv or sys.argv[1:]),
                                    "records": len(rows), "batch": BATCH, "anchors": ANCHORS,
                                    "us_per_record": runs, "median_us_per_record": med,
                                    "ratio": med["now"] / med["before"], "load_average": os.getloadavg()[0]},
                                   indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
