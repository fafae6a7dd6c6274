"""Do two independent mini-vec2vec starts that find the true map reproduce each other, and do wrong starts not?
A benchmark, not a test: the evidence for the "reproduced start" rule of ``MiniVec2Vec`` (docs/design.md,
"Label-free validation").

Protocol (as ``bench/unsupervised_restarts.py``): rows of every ``<model>_docs.npy`` are one seeded random order of
the items; the last 2,000 are held out; the source model embeds items 0..3,999 and the target model items
4,000..7,999 (no item on both sides). Every start of the default schedule (c0, v1, v2, c3: centroid matching at 20
and 30 clusters, two VecMap starts) runs to the end of Refine-1 and the label-free validation (``restart_margin`` out
of reach, ``confirm=False``, Refine-2 and the polish off: they come after the starts and do not change them), for each ``--seeds``
seed. Per start: its map W, its validation (gain, score) and, labels used only to score, the true top-1 on the 2,000
held-out items (``normalize(x - mu_A) @ W`` against ``y - mu_B``). Per pair of starts of one (corpus, pair), seeds
mixed (the preprocessing does not depend on the seed, so every start's W maps the same centred rows): the
*reproduction*, the share of 2,000 fitted source rows whose nearest fitted target row (cosine, centred; and CSLS, k
10) is the same under both maps (``vecbridge.align.validation.reproduction``). A start is right when its top-1 is at
least 0.5 (``bench/map_validation.py``'s line), and pairs are right-right, right-wrong or wrong-wrong; same kind =
both centroid starts or both VecMap starts.

Run: ``OPENBLAS_NUM_THREADS=1 python bench/reproduced_starts.py [--corpora foldoc] [--pairs minilm3:mpnet]
[--seeds 0,1]``; each (corpus, pair, seed) is merged into bench/results/reproduced_starts.json as it finishes (several
processes may run side by side); ``--summary`` prints the distributions; ``--compare-text-gone BEFORE_JSON`` stores
the unsupervised seed-0 rows of ``bench/text_gone.py`` before (a copy of its JSON) and after the rule.
"""
from __future__ import annotations

import argparse
import fcntl
import itertools
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from _corpora import DATA, embeddings

from vecbridge import metrics
from vecbridge.align.minivec2vec import MiniVec2Vec
from vecbridge.align.validation import reproduction
from vecbridge.numeric.neighbors import csls_best
from vecbridge.vectors import l2_normalize

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "reproduced_starts.json"
CACHE = Path(tempfile.gettempdir()) / "reproduced_starts"
SENTENCE = ("minilm3", "minilm6", "mpnet")
PAIRS = [(a, b) for a in SENTENCE for b in SENTENCE if a != b]
N_HELD, HALF, N_ROWS = 2000, 4000, 2000
RIGHT = 0.5


class Probe(MiniVec2Vec):
    """The package's MiniVec2Vec, unchanged, that also keeps each start's W after Refine-1."""

    def _start(self, i, *args, **kwargs):
        result = super()._start(i, *args, **kwargs)
        self.__dict__.setdefault("start_W", {})[i] = result[0]
        return result


def merge(key: str, entry: dict) -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(Path(tempfile.gettempdir()) / "reproduced_starts.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(OUT.read_text()) if OUT.exists() else {}
        data.setdefault("protocol", __doc__.split("Run:")[0].strip())
        data.setdefault("fits", {})[key] = entry
        tmp = OUT.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1, default=float))
        tmp.replace(OUT)


def halves(corpus, a, b):
    X, Y = embeddings(DATA / corpus, a), embeddings(DATA / corpus, b)
    return X[:HALF], Y[HALF:2 * HALF], X[-N_HELD:], Y[-N_HELD:]


def run_starts(corpus: str, a: str, b: str, seed: int) -> dict:
    """Every start of the default schedule on the disjoint halves; the Ws go to the cache."""
    A, B, Xh, Yh = halves(corpus, a, b)
    est = Probe(random_state=seed, restart_margin=1e9, confirm=False, refine2_iter=0, polish_iter=0, transport_iter=0,
                n_jobs=1)
    t0 = time.perf_counter()
    est.fit(A, B)
    seconds = time.perf_counter() - t0
    xs = l2_normalize(Xh - est.source_mean_.astype(np.float32))
    ys = Yh - est.target_mean_.astype(np.float32)
    starts = []
    for r in est.restarts_:
        W = est.start_W[r["restart"]]
        starts.append({"restart": r["restart"], "init": r["init"], "n_clusters": r["n_clusters"],
                       "gain": round(r["gain"], 4), "score": round(r["score"], 4), "agreement": round(r["agreement"], 4),
                       "passed": r["passed"], "seconds": round(r["seconds"], 1),
                       "top1": round(metrics.pair_quality(xs @ W.astype(np.float32), ys).top1, 4)})
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(CACHE / f"{corpus}_{a}-{b}_{seed}.npz", **{str(i): W for i, W in est.start_W.items()})
    return {"corpus": corpus, "pair": f"{a}->{b}", "seed": seed, "starts": starts, "seconds": round(seconds, 1),
            "load": round(os.getloadavg()[0], 2)}


def reproductions(corpus: str, a: str, b: str, fits: list[dict]) -> list[dict]:
    """Reproduction of every pair of starts of one (corpus, pair), seeds mixed, on 2,000 fitted rows per side."""
    A, B, _, _ = halves(corpus, a, b)
    X = l2_normalize(A - A.mean(axis=0))[:N_ROWS]
    Y = l2_normalize(B - B.mean(axis=0))[:N_ROWS]
    starts = []
    for fit in fits:
        Ws = np.load(CACHE / f"{corpus}_{a}-{b}_{fit['seed']}.npz")
        starts += [(fit["seed"], s, Ws[str(s["restart"])]) for s in fit["starts"]]
    csls = {}
    for seed, s, W in starts:
        csls[seed, s["restart"]] = csls_best(X @ W.astype(np.float32), Y, 10)[0]
    out = []
    for (s1, r1, W1), (s2, r2, W2) in itertools.combinations(starts, 2):
        right = (r1["top1"] >= RIGHT) + (r2["top1"] >= RIGHT)
        out.append({"a": f"s{s1}:{r1['init'][0]}{r1['restart']}", "b": f"s{s2}:{r2['init'][0]}{r2['restart']}",
                    "kind": ("right-right", "right-wrong", "wrong-wrong")[2 - right],
                    "same_kind": r1["init"] == r2["init"], "same_seed": s1 == s2,
                    "top1": [r1["top1"], r2["top1"]], "gain": [r1["gain"], r2["gain"]],
                    "reproduction": round(reproduction(X, Y, W1, W2), 4),
                    "reproduction_csls": round(float(np.mean(csls[s1, r1["restart"]] == csls[s2, r2["restart"]])), 4)})
    return out


def summary() -> None:
    data = json.loads(OUT.read_text())
    rows = [p for f in data["fits"].values() for p in f.get("pairs", [])]
    for kind in ("right-right", "right-wrong", "wrong-wrong"):
        for measure in ("reproduction", "reproduction_csls"):
            v = sorted(p[measure] for p in rows if p["kind"] == kind)
            if v:
                print(f"{kind:12s} {measure:18s} n={len(v):3d} min {v[0]:.4f} median {v[len(v) // 2]:.4f} "
                      f"max {v[-1]:.4f}")
    for corpus in ("wordnet", "foldoc"):
        print(corpus, "wrong-wrong max:", max((p["reproduction"] for p in rows if p["kind"] == "wrong-wrong"
                                               and corpus in p.get("corpus", "")), default=None))


def compare_text_gone(before: Path) -> None:
    """Store the unsupervised rows of seed 0 of ``bench/text_gone.py`` before (``before``: a copy of its JSON from
    the gain rule alone) and after the rule (bench/results/text_gone.json now), for the README."""
    def rows(path):
        keep = ("corpus", "pair", "accepted", "top1", "recall10", "gap_to_supervised", "fit_s", "load", "won",
                "confirmation")
        return [{k: r.get(k) for k in keep} | {"rerun": "confirmation" in r, "starts": [{k: x.get(k) for k in ("restart", "init", "gain", "top1",
                                                                             "confirmed_by", "reproductions")}
                                                          for x in r.get("starts", [])]}
                for r in json.loads(Path(path).read_text())["rows"] if r["mode"] == "unsupervised" and r["seed"] == 0]
    with open(Path(tempfile.gettempdir()) / "reproduced_starts.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(OUT.read_text())
        data["text_gone_seed0"] = {"before": rows(before), "after": rows(ROOT / "bench" / "results" / "text_gone.json")}
        OUT.write_text(json.dumps(data, indent=1, default=float))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", default="wordnet,foldoc")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--pairs", default=",".join(f"{a}:{b}" for a, b in PAIRS))
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--compare-text-gone", type=Path, metavar="BEFORE_JSON",
                    help="store text_gone.json's seed-0 unsupervised rows before (this copy) and after the rule")
    args = ap.parse_args()
    if args.summary:
        summary()
        return
    if args.compare_text_gone:
        compare_text_gone(args.compare_text_gone)
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    for corpus in args.corpora.split(","):
        for a, b in (tuple(p.split(":")) for p in args.pairs.split(",")):
            key = f"{corpus} {a}->{b}"
            old = json.loads(OUT.read_text())["fits"].get(key, {}) if OUT.exists() else {}
            fits = {f["seed"]: f for f in old.get("fits", [])}
            for seed in seeds:
                fits[seed] = run_starts(corpus, a, b, seed)
                print(key, seed, [(s["init"][0], s["top1"], s["gain"]) for s in fits[seed]["starts"]],
                      fits[seed]["seconds"], flush=True)
            fits = [fits[s] for s in sorted(fits)]
            pairs = [{**p, "corpus": corpus} for p in reproductions(corpus, a, b, fits)]
            merge(key, {"fits": fits, "pairs": pairs})
            for p in pairs:
                print(f"  {p['a']} {p['b']} {p['kind']} {p['reproduction']:.3f} csls {p['reproduction_csls']:.3f}",
                      flush=True)


if __name__ == "__main__":
    main()
