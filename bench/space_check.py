"""Does vecbridge.quality.space tell which embedding space an unlabelled sample is in? A benchmark, not a test.

For each corpus: a fingerprint of each of the four models from 5,000 documents (rows 0-4999). Test samples are
1,000 other documents (rows 5000-5999) or the queries of the same rows (GloVe's zero rows left out). For every
ordered pair (A, B) with fingerprints {A, B}: A's vectors must be named A (right side of a map A->B); B's vectors
(the map applied the wrong way) and a third model C of A's dimension must not be named A; A's documents mapped into
B's space by an orthogonal Procrustes map fitted on 2,000 paired documents (rows 6000-7999) should be named B.
Mixtures of minilm6 and minilm3 (5 .. 95 %) of 1,000 vectors from rows 5000-9999: estimated fraction vs the truth.

Run: ``OPENBLAS_NUM_THREADS=1 python bench/space_check.py``; writes bench/results/space_check.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _corpora import DATA, embeddings  # noqa: E402

from vecbridge.align import OrthogonalProcrustes  # noqa: E402
from vecbridge.quality.space import SpaceFingerprint, mixture_fractions, which_space  # noqa: E402

MODELS = ("minilm6", "minilm3", "mpnet", "glove50")
TEST = slice(5000, 6000)
FIT = slice(0, 5000)
PAIRS = slice(6000, 8000)
MIX = (0.05, 0.25, 0.5, 0.75, 0.95)


def _unit(X):
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def corpus_check(corpus: str) -> dict:
    folder = DATA / corpus
    docs = {m: embeddings(folder, m, "docs") for m in MODELS}
    queries = {m: embeddings(folder, m, "queries") for m in MODELS}
    zero = set(json.loads((folder / "glove50_zero_rows.json").read_text())["queries"])
    rows = np.array([i for i in range(TEST.start, TEST.stop) if i not in zero])  # one row set for every model
    samples = {(m, "docs"): docs[m][TEST] for m in MODELS}
    samples.update({(m, "queries"): queries[m][rows] for m in MODELS})
    fps = {m: SpaceFingerprint.from_vectors(docs[m][FIT], model=m) for m in MODELS}
    dim = {m: fps[m].dim for m in MODELS}
    counts = {k: [0, 0] for k in ("right_named", "wrong_way_refused", "third_model_refused", "mapped_named_B")}
    false_refusals, wrong_accepts, mapped_misses = [], [], []
    for a in MODELS:
        for b in MODELS:
            if a == b:
                continue
            pair = {a: fps[a], b: fps[b]}
            for kind in ("docs", "queries"):
                got = which_space(samples[(a, kind)], pair).name
                counts["right_named"][0] += got == a
                counts["right_named"][1] += 1
                if got != a:
                    false_refusals.append(f"{a}->{b} {kind}: {got}")
                got = which_space(samples[(b, kind)], pair).name
                counts["wrong_way_refused"][0] += got != a
                counts["wrong_way_refused"][1] += 1
                if got == a:
                    wrong_accepts.append(f"{a}->{b} {kind}: B's vectors named {a}")
                for c in MODELS:
                    if c in (a, b) or dim[c] != dim[a]:
                        continue
                    got = which_space(samples[(c, kind)], pair).name
                    counts["third_model_refused"][0] += got != a
                    counts["third_model_refused"][1] += 1
                    if got == a:
                        wrong_accepts.append(f"{a}->{b} {kind}: {c}'s vectors named {a}")
            fit_src, fit_tgt = _unit(docs[a][PAIRS]), _unit(docs[b][PAIRS])
            mapped = OrthogonalProcrustes().fit(fit_src, fit_tgt).transform(_unit(docs[a][TEST]))
            match = which_space(mapped, pair)
            counts["mapped_named_B"][0] += match.name == b
            counts["mapped_named_B"][1] += 1
            if match.name != b:
                mapped_misses.append(f"{a}->{b}: {match.reason}")
    mixtures = []
    rng = np.random.default_rng(0)
    two = {m: fps[m] for m in ("minilm6", "minilm3")}
    for kind, src in (("docs", docs), ("queries", queries)):
        for p in MIX:
            idx = rng.permutation(np.arange(TEST.start, 10000))[:1000]
            n6 = int(round(1000 * p))
            sample = np.vstack([src["minilm6"][idx[:n6]], src["minilm3"][idx[n6:]]])
            est = mixture_fractions(sample, two)["minilm6"]
            mixtures.append({"kind": kind, "true_minilm6": p, "estimated": round(est, 4), "error": round(est - p, 4)})
    return {"counts": {k: {"ok": int(v[0]), "of": int(v[1])} for k, v in counts.items()},
            "false_refusals": false_refusals, "wrong_accepts": wrong_accepts, "mapped_misses": mapped_misses,
            "mixtures": mixtures,
            "fingerprint_json_bytes": {m: len(json.dumps(fps[m].as_dict())) for m in MODELS},
            "reference_cosine": {m: round(fps[m].reference_cosine, 4) for m in MODELS}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "space_check.json"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = {corpus: corpus_check(corpus) for corpus in ("wordnet", "foldoc")}
    for corpus, res in out.items():
        print(f"{corpus}: " + "; ".join(f"{k} {v['ok']}/{v['of']}" for k, v in res["counts"].items()))
        for line in res["false_refusals"] + res["wrong_accepts"] + res["mapped_misses"]:
            print(f"  {line}")
        print("  mixture minilm6 share, true -> estimated: " + ", ".join(
            f"{m['kind'][0]}{m['true_minilm6']:.2f}->{m['estimated']:.3f}" for m in res["mixtures"]))
        print(f"  max |mixture error| {max(abs(m['error']) for m in res['mixtures']):.3f}; fingerprint JSON bytes "
              + ", ".join(f"{m} {b}" for m, b in res["fingerprint_json_bytes"].items()))
    seconds = round(time.perf_counter() - t0, 1)
    print(f"{seconds} s")
    out["machine"] = {"seconds": seconds, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
