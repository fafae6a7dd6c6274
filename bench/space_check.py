"""Is a map refused when it is applied to the wrong space, from the vectors alone (no stamps)? A benchmark, not a test.

The product's own path: for every ordered pair (A, B) of the four models of ../shared/data, an orthogonal map fitted
on 2,000 paired documents (rows 6000-7999) with both sides fingerprinted as ``vecbridge fit`` does (5,000 sampled
documents of each collection, rows 0-4999), then ``check_space`` (what migrate, merge, verify, wrapped search, upgrade
start and drift call) on collections of 1,000 held-out vectors (rows 5000-5999, documents and queries):

* right way: A's vectors as the map's source (must be accepted);
* wrong way: B's vectors as its source (refused: by the statistics where B has A's dimension, else by dimension);
* third model: every other model C's vectors as its source (refused likewise);
* mapped: A's documents mapped through the map, checked as its target (what ``verify`` does; must be accepted).

Mixtures: collections of 1,000 documents (and queries) from two models of one dimension at 5-95 %: the share
``info --space`` estimates against the truth, and whether ``migrate`` refuses them as mixed (a pure collection must
never be).

Run: ``OPENBLAS_NUM_THREADS=1 python bench/space_check.py``; writes bench/results/space_check.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _corpora import DATA, embeddings  # noqa: E402

from vecbridge.align import OrthogonalProcrustes  # noqa: E402
from vecbridge.align.artifact import Alignment  # noqa: E402
from vecbridge.connectors import VectorBatch, connect  # noqa: E402
from vecbridge.errors import SpaceMismatch  # noqa: E402
from vecbridge.runtime.provenance import attach_spaces, check_space, fingerprint_vectors, space_report  # noqa: E402

MODELS = ("minilm6", "minilm3", "mpnet", "glove50")
FIT = slice(0, 5000)
TEST = slice(5000, 6000)
PAIRS = slice(6000, 8000)
MIX = (0.05, 0.25, 0.5, 0.75, 0.95)


def _collection(root: Path, name: str, X: np.ndarray):
    coll = connect(f"file://{root / name}").create(dim=X.shape[1])
    coll.upsert(VectorBatch([str(i) for i in range(len(X))], X.astype(np.float32)))
    return coll


def _decide(coll, alignment, side: str, **kw) -> str:
    """accepted / refused (statistics) / refused (dimension) / unchecked, as a command would see it."""
    if coll.info().dim != (alignment.source_dim if side == "source" else alignment.target_dim):
        return "refused (dimension)"
    try:
        check = check_space(coll, alignment, side, **kw)
    except SpaceMismatch:
        return "refused (statistics)"
    return "accepted" if check.verdict == "ok" else check.verdict


def _map(docs: dict, a: str, b: str) -> Alignment:
    est = OrthogonalProcrustes().fit(docs[a][PAIRS], docs[b][PAIRS])
    return attach_spaces(Alignment.from_estimator(est, source_model=a, target_model=b),
                         fingerprint_vectors(docs[a][FIT], model=a), fingerprint_vectors(docs[b][FIT], model=b))


def corpus_check(corpus: str, root: Path) -> dict:
    folder = DATA / corpus
    docs = {m: embeddings(folder, m, "docs") for m in MODELS}
    queries = {m: embeddings(folder, m, "queries") for m in MODELS}
    zero = set(json.loads((folder / "glove50_zero_rows.json").read_text())["queries"])
    rows = np.array([i for i in range(TEST.start, TEST.stop) if i not in zero])   # one row set for every model
    colls = {(m, "docs"): _collection(root, f"{corpus}_{m}_docs", docs[m][TEST]) for m in MODELS}
    colls.update({(m, "queries"): _collection(root, f"{corpus}_{m}_queries", queries[m][rows]) for m in MODELS})
    table: dict[str, dict[str, int]] = {}
    errors = []

    def count(case: str, decision: str, want: str, what: str) -> None:
        table.setdefault(case, {}).setdefault(decision, 0)
        table[case][decision] += 1
        if not decision.startswith(want):
            errors.append(f"{what}: {decision}")

    for a in MODELS:
        for b in MODELS:
            if a == b:
                continue
            alignment = _map(docs, a, b)
            for kind in ("docs", "queries"):
                count("right way", _decide(colls[(a, kind)], alignment, "source"), "accepted", f"{a}->{b} {kind}")
                count("wrong way", _decide(colls[(b, kind)], alignment, "source"), "refused", f"{a}->{b} on {b} {kind}")
                for c in MODELS:
                    if c not in (a, b):
                        count("third model", _decide(colls[(c, kind)], alignment, "source"), "refused",
                              f"{a}->{b} on {c} {kind}")
            mapped = _collection(root, f"{corpus}_{a}_to_{b}", alignment.transform(docs[a][TEST]))
            count("mapped, as target", _decide(mapped, alignment, "target"), "accepted", f"{a}->{b} mapped")
            mapped.drop()
    mixtures = []
    for a, b in (("minilm6", "minilm3"), ("minilm3", "minilm6")):
        alignment = _map(docs, a, b)
        for kind, src in (("docs", docs), ("queries", queries)):
            for p in (1.0,) + MIX:
                idx = np.random.default_rng(int(p * 100)).permutation(np.arange(TEST.start, 10000))[:1000]
                n = int(round(1000 * p))
                coll = _collection(root, f"{corpus}_mix", np.vstack([src[a][idx[:n]], src[b][idx[n:]]]))
                share = space_report(coll, [("map", alignment)])["spaces"]["source of map"]["fraction"]
                refused = _decide(coll, alignment, "source", mixed=True) != "accepted"
                mixtures.append({"pair": f"{a}+{b}", "kind": kind, "true_share": p, "estimated": share,
                                 "error": round(share - p, 4), "migrate_refuses": refused})
                coll.drop()
    return {"table": table, "errors": errors, "mixtures": mixtures}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "space_check.json"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = {corpus: corpus_check(corpus, Path(tmp)) for corpus in ("wordnet", "foldoc")}
    decisions = ("accepted", "refused (statistics)", "refused (dimension)", "unchecked", "mixed")
    for corpus, res in out.items():
        print(f"\n{corpus}: samples of 1,000 vectors, docs and queries")
        print(f"  {'case':<20}" + "".join(f"{d:>22}" for d in decisions))
        for case, row in res["table"].items():
            print(f"  {case:<20}" + "".join(f"{row.get(d, 0):>22}" for d in decisions))
        for line in res["errors"]:
            print(f"  WRONG: {line}")
        for kind in ("docs", "queries"):
            ms = [m for m in res["mixtures"] if m["kind"] == kind and m["true_share"] < 1]
            pure = [m for m in res["mixtures"] if m["kind"] == kind and m["true_share"] == 1]
            print(f"  mixtures ({kind}): max |share error| {max(abs(m['error']) for m in ms):.3f}; migrate refuses "
                  f"{sum(m['migrate_refuses'] for m in ms)}/{len(ms)} mixed, "
                  f"{sum(m['migrate_refuses'] for m in pure)}/{len(pure)} pure")
            print("    " + ", ".join(f"{m['pair'].split('+')[0]} {m['true_share']:.2f}->{m['estimated']:.3f}"
                                     for m in ms))
    seconds = round(time.perf_counter() - t0, 1)
    print(f"\n{seconds} s")
    out["machine"] = {"seconds": seconds, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
