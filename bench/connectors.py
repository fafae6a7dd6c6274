"""Connector throughput against each store's own client: scan and upsert, vectors/s, medians of several runs.

Runs ``run()`` of every ``bench/connectors_<store>.py`` (each starts its real engine, times our connector and the
fastest plain use of the store's client on the same data, alternating the two) and prints one Markdown table.
The overhead column is native/vecbridge - 1 (goal <= 10%); negative means the connector was faster.

Run: ``python bench/connectors.py [--n 100000] [--repeats 5] [--stores pgvector,qdrant,milvus,chroma]``; writes
bench/results/connectors.json.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--stores", default="pgvector,qdrant,milvus,chroma")
    args = p.parse_args()
    rows = []
    for store in args.stores.split(","):
        module = importlib.import_module(f"connectors_{store}")
        # chroma writes ~350 vectors/s here: it runs at a tenth of the size so the table finishes
        n = args.n // 10 if store == "chroma" else args.n
        for row in module.run(n=n, repeats=args.repeats):
            rows.append({**row, "n": row.get("n", n)})
            print(json.dumps(rows[-1]), flush=True)
    out = ROOT / "bench" / "results" / "connectors.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():  # keep the rows of stores not rerun this time
        rerun = {r["store"] for r in rows}
        rows = [r for r in json.loads(out.read_text()) if r["store"] not in rerun] + rows
    out.write_text(json.dumps(rows, indent=1))
    print("\n| store | op | N | vecbridge (vectors/s) | store's own client (vectors/s) | overhead | per-pair range |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        spread = r.get("pair_range")
        spread = f"{spread[0]:+.0%} .. {spread[1]:+.0%} ({r['runs']} pairs)" if spread else "-"
        print(f"| {r['store']} | {r['op']} | {r['n']:,} | {r['vecbridge_vps']:,.0f} | {r['native_vps']:,.0f} | "
              f"{r['overhead']:+.0%} | {spread} |")

if __name__ == "__main__":
    main()
