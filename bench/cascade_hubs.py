"""The cascade with the hub penalty: does a query log's hub score, on the candidates' native vectors, lift the cascade
above re-scoring by the two models' cosines alone?

Re-scoring a candidate by ``(cos(q_new, y) + beta cos(q_old, x)) / (1 + beta)`` is bounded by what the two models'
cosines can rank (``bench/cascade.py``: +0.007 at best on foldoc minilm6 <-> minilm3). The hub penalty ("Word
Translation Without Parallel Data", Conneau et al., ICLR 2018, CSLS, on the document side) subtracts ``w r(y)``, the
mean cosine of the candidate's native vector to its 10 nearest queries of a log: a third signal, and one the upgrade
keeps already (each record's stamp holds its hub score against the query log).

Protocol (numpy with the package's pieces, no store), per corpus (../shared/data/wordnet, ../shared/data/foldoc) and
sentence-encoder pair old -> new. The query log must not hold the collection's own answers, or the penalty demotes
the distractors of the evaluated queries because they are the log's answers (a leak that doubled the penalty's gain
in a trial run). So the items are split in two fixed halves:

* **collection**: the 5,000 docs of half B. Day one: the map is ``OrthogonalProcrustes`` fitted on 2,000 of them (the
  upgrade's re-embedded fit sample, native), the other 3,000 are mapped;
* **query log**: the new model's vectors of half A's 5,000 queries (other questions of the same kind: their answers
  are not in the collection). Every record's hub score is ``hub_penalty`` of its vector (mapped or native) against
  the log, k = 10, as ``upgrade query-log`` stamps it;
* **evaluated queries**: half B's 5,000, cross-fitted: every setting is picked on one half of them (B1) and scores the
  other (B2), and the other way round; Recall@10 is over all 5,000, so no query picks its own setting;
* **served**: the tuned fusion ``upgrade tune`` picks, beta from its grid and the hub weight from ``HUB_WEIGHTS``
  (``fuse``, penalty on the served vector's hub score);
* **cascade**: that ranking's top K re-scored with both models' own vectors, without the penalty (beta tuned, as
  ``upgrade tune --rerank`` did) and with it (beta and the weight tuned together, on the native vectors' hub
  scores);
* **bound**: both models' own vectors of every item, fused over the whole collection, without and with the penalty
  (cross-fitted as above);
* **repeated queries**: half of half B's queries (B1) were asked before: the log is half A's queries and B1's, and
  B1's are evaluated (cross-fitted on its two halves). Each evaluated query's own answer pays the penalty of being
  its log query's answer, while half of its distractors (B2's items) pay none: the penalty's worst case. Real
  traffic mixes both cases.

Run: ``python bench/cascade_hubs.py [--k 100|auto] [--pairs minilm3:mpnet,...]`` (``auto``: the cascade's count
of candidates chosen on each half too, as ``upgrade tune --rerank auto`` chooses it; the no-penalty columns keep
the smallest count; one BLAS thread unless OPENBLAS_NUM_THREADS is set; 1-2 minutes a pair and corpus, 4-5 with
``auto``; every ordered pair of the three sentence encoders by default); each pair's result replaces that pair's in bench/results/cascade_hubs.json (``--out``), the others kept.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _corpora import CORPORA, DATA, SENTENCE_PAIRS, embeddings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vecbridge.align import OrthogonalProcrustes  # noqa: E402
from vecbridge.jobs.upgrade import HUB_K  # noqa: E402
from vecbridge.quality.scoring import fuse, hub_penalty  # noqa: E402
from vecbridge.serving.weights import RERANK_LADDER, RERANK_TIE, best_setting, choose_rerank, weight_grid  # noqa: E402
from vecbridge.vectors import l2_normalize  # noqa: E402

PAIRS = SENTENCE_PAIRS
N_FIT, K = 2000, 10
SETTINGS = weight_grid(True)   # every (beta, hub weight) `upgrade tune` tries


def hits(S: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per query: is its own item (column ``rows[j]``) among the top K of row j (ties against it)?"""
    rel = S[np.arange(len(rows)), rows]
    return (S > rel[:, None]).sum(axis=1) < K


def cross_fitted(score, settings, halves) -> tuple[float, list]:
    """Recall@K over both halves, each scored with the setting best on the other (as ``upgrade tune`` picks it, ties
    included); and the settings picked."""
    got, picked = [], []
    for tune, test in (halves, halves[::-1]):
        best = best_setting({s: hits(score(tune, *s), tune).mean() for s in settings})
        picked.append([("inf" if np.isinf(best[0]) else best[0]), best[1]])
        got.append(hits(score(test, *best), test))
    return float(np.concatenate(got).mean()), picked


def auto_k(cascade, masks: dict, settings, halves) -> tuple[float, list]:
    """:func:`cross_fitted` where the candidate count is chosen too, as ``upgrade tune --rerank auto`` chooses it on
    the tuning half (``tune_rerank``: a larger pool only where it holds more relevant records, then the smallest
    count within ``RERANK_TIE`` of the best); the picks are ``[count, beta, weight]``."""
    got, picked = [], []
    for tune, test in (halves, halves[::-1]):
        held = {kk: float(np.mean(mask[tune, tune] == 0)) for kk, mask in masks.items()}
        first = min(masks)
        tried = [kk for kk in sorted(masks) if kk == first or held[kk] - held[first] > RERANK_TIE]
        best = {kk: best_setting({s: hits(cascade(tune, *s, kk), tune).mean() for s in settings}) for kk in tried}
        chosen = choose_rerank({kk: hits(cascade(tune, *best[kk], kk), tune).mean() for kk in tried})
        b, w = best[chosen]
        picked.append([chosen, "inf" if np.isinf(b) else b, w])
        got.append(hits(cascade(test, b, w, chosen), test))
    return float(np.concatenate(got).mean()), picked


def run_pair(corpus: str, old: str, new: str, k_c, stages: list[int]) -> dict:
    t0 = time.perf_counter()
    X, Y = embeddings(DATA / corpus, old, "docs"), embeddings(DATA / corpus, new, "docs")
    Qo, Qn = l2_normalize(embeddings(DATA / corpus, old, "queries")), l2_normalize(embeddings(DATA / corpus, new,
                                                                                           "queries"))
    n = len(X)
    perm = np.random.default_rng(1).permutation(n)
    half_a, half_b = np.sort(perm[: n // 2]), np.sort(perm[n // 2:])
    Xc, Yc = X[half_b], Y[half_b]
    m = len(half_b)
    fit = np.sort(np.random.default_rng(0).choice(m, N_FIT, replace=False))
    rest = np.random.default_rng(3).permutation(np.setdiff1d(np.arange(m), fit))   # reembed's order (random)
    Mu = l2_normalize(OrthogonalProcrustes().fit(Xc[fit], Yc[fit]).transform(Xc))
    Xu, Yu = l2_normalize(Xc), l2_normalize(Yc)
    S_old, S_nat, S_map = Qo[half_b] @ Xu.T, Qn[half_b] @ Yu.T, Qn[half_b] @ Mu.T
    split = np.random.default_rng(2).permutation(m)
    halves = (np.sort(split[: m // 2]), np.sort(split[m // 2:]))   # query j asks for collection item j
    asked = halves[0]                                              # the repeated case: these were asked before
    again = (asked[: len(asked) // 2], asked[len(asked) // 2:])
    out = {"pair": f"{old}->{new}", "collection": m}
    for case, log, halves in (("new_queries", Qn[half_a], halves),
                              ("repeated_queries", np.vstack([Qn[half_a], Qn[half_b[asked]]]), again)):
        rows_all = np.concatenate(halves)
        hub_nat, hub_map = hub_penalty(Yu, log, HUB_K), hub_penalty(Mu, log, HUB_K)

        def bound(rows, beta, w):
            return fuse(S_nat[rows], S_old[rows], beta, hub_nat, w, mean=True)

        res = {"queries": len(rows_all), "staying": float(hits(S_old[rows_all], rows_all).mean()),
               "full_reembed": float(hits(S_nat[rows_all], rows_all).mean()),
               "bound_no_penalty": cross_fitted(bound, [s for s in SETTINGS if s[1] == 0], halves)[0],
               "bound": cross_fitted(bound, SETTINGS, halves)[0], "stages": []}
        for pct in stages:
            native = np.zeros(m, dtype=bool)
            native[fit] = True
            native[rest[: round(pct / 100 * len(rest))]] = True
            S_srv, hub_srv = np.where(native[None, :], S_nat, S_map), np.where(native, hub_nat, hub_map)

            def served(rows, beta, w):
                return fuse(S_srv[rows], S_old[rows], beta, hub_srv, w, mean=True)

            r_srv, srv_picked = cross_fitted(served, SETTINGS, halves)
            r_srv0, _ = cross_fitted(served, [s for s in SETTINGS if s[1] == 0], halves)
            # the cascade's candidates: the served ranking's top K with the setting picked on the other half
            masks = {}
            for kk in (RERANK_LADDER if k_c == "auto" else (k_c,)):
                masks[kk] = np.full((m, m), -np.inf, dtype=np.float32)
                for test, (b, w) in zip(halves[::-1], srv_picked):
                    top = np.argpartition(-served(test, np.inf if b == "inf" else b, w), kk - 1, axis=1)[:, :kk]
                    masks[kk][test[:, None], top] = 0.0
            first = min(masks)
            held = [masks[first][j, j] == 0 for j in rows_all]

            def cascade(rows, beta, w, kk=first):
                return fuse(S_nat[rows], S_old[rows], beta, hub_nat, w, mean=True) + masks[kk][rows]

            r_c0, _ = cross_fitted(cascade, [s for s in SETTINGS if s[1] == 0], halves)
            r_c, c_picked = cross_fitted(cascade, SETTINGS, halves)
            if k_c == "auto":   # upgrade tune --rerank auto: the count chosen on the other half too
                r_c, c_picked = auto_k(cascade, masks, SETTINGS, halves)
            res["stages"].append({"reembedded_percent": pct, "native_fraction": float(native.mean()),
                                  "served_no_penalty": r_srv0, "served": r_srv, "served_settings": srv_picked,
                                  "candidates_hold_relevant": float(np.mean(held)), "cascade_no_penalty": r_c0,
                                  "cascade": r_c, "cascade_settings": c_picked})
        out[case] = res
    out["seconds"] = time.perf_counter() - t0
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=lambda v: v if v == "auto" else int(v), default=100,
                    help="candidates the cascade re-scores, or auto: chosen as `upgrade tune --rerank auto` does")
    ap.add_argument("--stages", type=int, nargs="+", default=[0, 5, 25, 50, 100],
                    help="percent of the records outside the fit sample re-embedded")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "cascade_hubs.json")
    ap.add_argument("--pairs", default=",".join(f"{a}:{b}" for a, b in PAIRS), help="old:new,... (default: all six)")
    args = ap.parse_args(argv)
    command = "python bench/cascade_hubs.py " + " ".join(sys.argv[1:] if argv is None else argv)
    machine = {"python": platform.python_version(), "cpus": os.cpu_count(),
               "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]}
    result = json.loads(args.out.read_text()) if args.out.exists() else {"corpora": {}}
    if result.get("k", args.k) != args.k:
        ap.error(f"{args.out} holds results with --k {result['k']}: name another --out")
    result.update(k=args.k, command=command, machine=machine)
    order = {f"{a}->{b}": i for i, (a, b) in enumerate(PAIRS)}
    for corpus in CORPORA:
        for old, new in (tuple(p.split(":")) for p in args.pairs.split(",")):
            r = dict(run_pair(corpus, old, new, args.k, args.stages), command=command, machine=machine)
            kept = [x for x in result["corpora"].get(corpus, []) if x["pair"] != r["pair"]]
            result["corpora"][corpus] = sorted(kept + [r], key=lambda x: order.get(x["pair"], len(order)))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1))
            for case in ("new_queries", "repeated_queries"):
                c = r[case]
                best = max(c["staying"], c["full_reembed"])
                print(f"{corpus:8s} {r['pair']:16s} {case:16s} staying {c['staying']:.4f} full {c['full_reembed']:.4f}"
                      f" bound {c['bound_no_penalty'] - best:+.4f}/{c['bound'] - best:+.4f} | " + " | ".join(
                          f"{st['reembedded_percent']}%: served {st['served_no_penalty'] - best:+.4f}/"
                          f"{st['served'] - best:+.4f} cascade {st['cascade_no_penalty'] - best:+.4f}/"
                          f"{st['cascade'] - best:+.4f}" for st in c["stages"]) + f" ({r['seconds']:.0f} s)",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
