"""Calibration of the compatibility report: predicted retention vs retention measured after a real migration.

For each model pair on ../shared/data/wordnet (10,000 items), the report samples 5,000 items of the two
collections (shared ids), fits on 80% of them and predicts recall retention@10 for the whole collection. Then the
full OLD collection is migrated through the fitted map (a file:// rewrite of all 10,000 vectors) and retention@10 is
measured with all 10,000 new-model queries over the migrated collection vs the natively re-embedded one.
Goal: |predicted - measured| <= 0.05 on at least three pairs.

Run: ``python bench/report_calibration.py``; writes bench/results/report_calibration.json, prints a Markdown table.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vecbridge import metrics  # noqa: E402
from vecbridge.align import Alignment, OrthogonalProcrustes  # noqa: E402
from vecbridge.connectors import connect  # noqa: E402
from vecbridge.jobs import migrate  # noqa: E402
from vecbridge.jobs.report import compatibility_report, find_correspondences  # noqa: E402

W = ROOT.parent / "shared" / "data" / "wordnet"
PAIRS = [("minilm6", "mpnet"), ("mpnet", "minilm6"), ("minilm6", "minilm3"), ("minilm3", "minilm6")]


def main():
    rows = []
    for a, b in PAIRS:
        old, new = f"file://{W}/{a}_docs.npy", f"file://{W}/{b}_docs.npy"
        t = time.perf_counter()
        rep = compatibility_report(old, new, queries_new=f"file://{W}/{b}_queries.npy",
                                   queries_old=f"file://{W}/{a}_queries.npy", sample=5000, seed=0)
        t_report = time.perf_counter() - t
        # the same map the report fitted: same sample, same split
        corr = find_correspondences(connect(old), connect(new), sample=5000, seed=0)
        perm = np.random.default_rng(0).permutation(len(corr.X))
        train = perm[rep["correspondences"]["held_out"]:]
        est = OrthogonalProcrustes().fit(corr.X[train], corr.Y[train])
        with tempfile.TemporaryDirectory() as d:
            path = Alignment.from_estimator(est).save(Path(d) / "a.vb")
            migrate(old, path, f"file://{d}/migrated")
            got = {i: v for batch in connect(f"file://{d}/migrated").scan(5000) for i, v in zip(batch.ids, batch.vectors)}
        migrated = np.stack([got[i] for i in range(10_000)])
        Q = np.load(W / f"{b}_queries.npy").astype(np.float32)
        native = np.load(W / f"{b}_docs.npy").astype(np.float32)
        measured = metrics.recall_retention(Q, migrated, native, k=10)
        row = {"pair": f"{a}->{b}", "predicted": rep["retrieval"]["predicted"],
               "measured_on_sample_pool": rep["retrieval"]["measured"], "measured_after_migration": measured["retention"],
               "error": rep["retrieval"]["predicted"] - measured["retention"], "verdict": rep["verdict"]["verdict"],
               "three_way": rep.get("three_way").as_dict() if rep.get("three_way") else None, "report_s": t_report}
        rows.append(row)
        print(json.dumps(row), flush=True)
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "report_calibration.json").write_text(json.dumps(rows, indent=1))
    print("\n| pair (old -> new) | predicted retention@10 | measured after migrating all 10,000 | error | "
          "Recall@10 stay / mapped / re-embed (report sample) | verdict |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        t = r["three_way"]
        print(f"| {r['pair']} | {r['predicted']:.3f} | {r['measured_after_migration']:.3f} | {r['error']:+.3f} | "
              f"{t['stay_on_old_model']:.3f} / {t['mapped_upgrade']:.3f} / {t['full_re_embed']:.3f} | {r['verdict']} |")


if __name__ == "__main__":
    main()
