"""Render bench/README.md from bench/README.template.md and the results in bench/results/*.json.

The prose (what each benchmark measures, its command, the machine and conditions, the notes under the tables) lives
in the template; every table of figures is rendered here from the JSON files the benchmarks wrote. A template line
``{{geh.ablations}}`` is replaced by the table ``ablations`` of the renderer for ``bench/results/geh.json``.

    python bench/make_readme.py          # rewrite bench/README.md
    python bench/make_readme.py --check  # exit 1, with a diff, if bench/README.md is not what this script writes
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import statistics
import sys
from itertools import groupby
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
TEMPLATE = BENCH / "README.template.md"
README = BENCH / "README.md"
PLACEHOLDER = re.compile(r"^\{\{([\w.]+)\}\}$", re.MULTILINE)


# ---------------------------------------------------------------------------------------------------- helpers

def load(stem: str):
    path = RESULTS / f"{stem}.json"
    if not path.exists():
        sys.exit(f"{path} is missing: run the benchmark that writes it (see bench/README.template.md)")
    return json.loads(path.read_text())


def table(header: list, rows: list) -> str:
    """A Markdown table: one header row, then the rows (cells are formatted already)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def arrow(pair: str) -> str:
    return pair.replace("->", " -> ")


def prf(m: dict) -> str:
    return f"{m['precision']:.3f} / {m['recall']:.3f} / {m['f1']:.3f}"


def unique(values) -> list:
    return list(dict.fromkeys(values))


def n_items(n: int, synthetic: bool) -> str:
    return f"{n:,}" + (" (synthetic)" if synthetic else "")


# ---------------------------------------------------------------------------------- one renderer per results file

def align_real(d: dict) -> dict:
    q = d["quality"]
    ns = unique(r["n_fit"] for r in q)
    keys = unique((r["pair"], r["method"]) for r in q)
    by = {(r["pair"], r["method"], r["n_fit"]): r for r in q}
    by_n = table(["pair (old -> new)", "method"] + [f"n={n}" for n in ns],
                 [[p, m] + [f"{by[p, m, n]['top1']:.3f} / {by[p, m, n]['retention10']:.3f}" for n in ns]
                  for p, m in keys])
    def in_detail(r):  # at the largest n
        return [r["pair"], r["method"], f"{r['top1']:.3f}", f"{r['mean_cosine']:.3f}",
                f"{r['recall10']:.3f} ({r['native_recall10']:.3f})", f"{r['retention10']:.3f}", f"{r['overlap10']:.3f}"]
    detail = table(["pair", "method", "top-1", "mean cos", "Recall@10 mapped (native)", "retention@10", "overlap@10"],
                   [in_detail(by[p, m, ns[-1]]) for p, m in keys])
    s = d["speed"]
    speed = table([f"timing (median of {len(s['fit_10k_768_runs'])} runs)", "vecbridge", "baseline in the same run",
                   "ratio"], [
        ["fit, 10,000 pairs, 768-d (float64 streamed sums + diagnostics)", f"{s['fit_10k_768_s']:.2f} s",
         f"scipy `orthogonal_procrustes` {s['scipy_orthogonal_procrustes_s']:.2f} s",
         f"{s['fit_10k_768_s'] / s['scipy_orthogonal_procrustes_s']:.2f}x"],
        [f"transform {s['transform_n']:,} vectors 384 -> 768 (through the artifact, batches of 100k)",
         f"{s['transform_384_to_768_s']:.2f} s ({s['transform_vectors_per_s'] / 1e6:.2f} M vectors/s)",
         f"bare float32 matmul {s['bare_matmul_s']:.2f} s",
         f"{s['transform_384_to_768_s'] / s['bare_matmul_s']:.2f}x"]])
    return {"by_n": by_n, "detail": detail, "speed": speed}


def geh(d: dict) -> dict:
    grid = table(["pair", "alpha", "seeds", "GEH (default) P / R / F1", "GEH bootstrap only",
                  "Procrustes on seeds + CSLS-MNN", "ridge on seeds + CSLS-MNN"],
                 [[arrow(r["pair"]), r["alpha"], r["n_seeds"], prf(r["refined"]), prf(r["geh"]),
                   prf(r["procrustes"]), prf(r["ridge"])] for r in d["grid"]])
    alphas = unique(r["alpha"] for r in d["ablations"])
    rows = []
    for variant in unique(r["variant"] for r in d["ablations"]):
        runs = {r["alpha"]: r for r in d["ablations"] if r["variant"] == variant}
        rows.append([variant] + [prf(runs[a]["geh"]) for a in alphas]
                    + [", ".join(f"{runs[a]['seconds']:.0f}" for a in alphas)])
    ablations = table(["variant"] + [f"alpha {a}" for a in alphas] + ["seconds"], rows)
    return {"grid": grid, "ablations": ablations}


def geh_calibration(d: dict) -> dict:
    """Previous cut vs the calibrated cut (both corpora side by side), the reliability bins and the cut sweep."""
    corpora = unique(r["corpus"] for r in d["summary"])
    by = {(r["alpha"], r["method"], r["corpus"]): r for r in d["summary"]}
    names = {"baseline": "two-Gaussian cut, CSLS", "calibrated_csls": f"calibrated cut {d['default_cut']}, CSLS",
             "calibrated": f"calibrated cut {d['default_cut']}, CSLS + runner-up margin (default)"}
    rows = [[a, names.get(m, m)] + [f"{prf(by[a, m, c])} ({by[a, m, c]['seconds']:.0f} s)" for c in corpora]
            for a in unique(r["alpha"] for r in d["summary"]) for m in unique(r["method"] for r in d["summary"])]
    summary = table(["alpha", "links"] + [f"{c}: P / R / F1" for c in corpora], rows)
    bins = unique((r["lo"], r["hi"]) for r in d["reliability"])
    rel = {(r["corpus"], r["alpha"], r["lo"]): r for r in d["reliability"]}
    groups = unique((r["corpus"], r["alpha"]) for r in d["reliability"])
    rows = [[c, a] + [(f"{rel[c, a, lo]['predicted']:.2f} / {rel[c, a, lo]['measured']:.2f} ({rel[c, a, lo]['n']:,})"
                       if (c, a, lo) in rel else "-") for lo, _ in bins] for c, a in groups]
    reliability = table(["corpus", "alpha"] + [f"[{lo}, {hi})" for lo, hi in bins], rows)
    cut = {(r["cut"], r["corpus"], r["alpha"]): r for r in d["cuts"]}
    rows = [[k] + [f"{cut[k, c, a]['predicted']:.3f} / {cut[k, c, a]['precision']:.3f}, R {cut[k, c, a]['recall']:.3f}"
                   for c, a in groups] for k in unique(r["cut"] for r in d["cuts"])]
    cuts = table(["cut"] + [f"{c} alpha {a}" for c, a in groups], rows)
    return {"summary": summary, "reliability": reliability, "cuts": cuts}


def unsupervised_robust(d: dict) -> dict:
    """mini-vec2vec as the paper runs it vs restarts chosen by the label-free validation, both corpora side by side."""
    import statistics

    shared_rows = [r for r in d["quality"] if r.get("items") == "shared"]
    rows = [r for r in d["quality"] if r.get("items", "disjoint") == "disjoint"]
    corpora = [c for c in ("wordnet", "foldoc") if any(r["corpus"] == c for r in rows)]
    methods = unique(r["method"] for r in rows)
    names = {"paper": "paper (one start)", "robust": "restarts + VecMap starts + CSLS polish",
             "stochastic": "the same + stochastic polish (previous default)",
             "transport": "the same + transport polish (default)"}
    sentence = ("minilm6", "minilm3", "mpnet")
    pairs = [p for p in unique(r["pair"] for r in rows) if all(m in sentence for m in p.split("->"))]
    out_rows = []
    for pair in pairs:
        for m in methods:
            cells = []
            for c in corpora:
                rs = sorted((r for r in rows if (r["pair"], r["method"], r["corpus"]) == (pair, m, c)),
                            key=lambda r: r["seed"])
                won = ", ".join(f"{r['init'][0]}{r['restart']}" for r in rs)
                cells.append(" / ".join(f"{r['top1']:.3f}" for r in rs) + (f" ({won})" if m != "paper" and rs else ""))
            out_rows.append([arrow(pair), names.get(m, m)] + cells)
    quality = table(["pair", "method"] + [f"{c}: top-1, seeds 0 / 1 / 2" for c in corpora], out_rows)
    def spread(rs):   # the summary cells of a set of fits
        return [f"{statistics.median(r['top1'] for r in rs):.3f}", f"{min(r['top1'] for r in rs):.3f}",
                f"{sum(r['top1'] >= 0.95 for r in rs)}/{len(rs)}", f"{statistics.median(r['top1_user'] for r in rs):.3f}"]

    spread_head = ["median top-1", "min", "fits >= 0.95", "saved map: median top-1"]
    summary = table(["method", "corpus"] + spread_head,
                    [[names.get(m, m), c] + spread([r for r in rows if r["method"] == m and r["corpus"] == c
                                                    and r["pair"] in pairs])
                     for m in methods for c in corpora])
    timing = table(["corpus", "pair", "method", "BLAS threads", "starts at a time", "wall s (median)", "runs",
                    "CPU s", "starts run", "kept", "load"],
                   [[r["corpus"], arrow(r["pair"]), names.get(r["method"], r["method"]), r.get("blas_threads", "2"),
                     r.get("n_jobs", 1), f"{r['wall_s']:.1f}", len(r.get("wall_runs", [0])), f"{r['cpu_s']:.1f}",
                     r["n_restarts_run"], f"{r['init']} #{r['restart']}", f"{r['load_before']:.1f}"]
                    for r in sorted(d["timing"], key=lambda r: (r["corpus"] != "wordnet", r["pair"], r["method"],
                                                                 r.get("blas_threads", "2"), r.get("n_jobs", 1)))])
    ceiling = table(["pair", "corpus", "Procrustes on 4,000 true pairs", "on 8,000",
                     "transport polish from the 4,000-pair map: 10 / 30 rounds"],
                    [[arrow(r["pair"]), r["corpus"], f"{r['top1']:.3f}", f"{r['top1_8k']:.3f}",
                      " / ".join(f"{r['from_true_map'][k]:.3f}" for k in ("transport_10", "transport_30"))
                      if "from_true_map" in r else "-"]
                     for r in sorted(d.get("ceiling", []), key=lambda r: (r["pair"], r["corpus"]))])
    ceil = {(r["corpus"], r["pair"]): r["top1_8k"] for r in d.get("ceiling", [])}
    shared = table(["pair"] + [h for c in corpora for h in (f"{c}: top-1, seeds 0 / 1 / 2", f"{c}: 8,000 true pairs")],
                   [[arrow(pair)] + [cell for c in corpora for cell in (
                       " / ".join(f"{r['top1']:.3f}" for r in sorted(
                           (r for r in shared_rows if (r["pair"], r["corpus"]) == (pair, c)), key=lambda r: r["seed"])),
                       f"{ceil[c, pair]:.3f}" if (c, pair) in ceil else "-")]
                    for pair in pairs if any(r["pair"] == pair for r in shared_rows)])
    shared_summary = table(["corpus"] + spread_head,
                           [[c] + spread(rs) for c in corpora
                            for rs in [[r for r in shared_rows if r["corpus"] == c]] if rs])
    sweeps = d.get("transport_sweep", [])
    settings = [(v["transport_beta"], v["transport_iter"]) for v in sweeps[0]["variants"]] if sweeps else []
    sweep = table(["corpus", "pair", "seed", "CSLS polish"] + [f"beta {b:g}, {n} rounds" for b, n in settings],
                  [[r["corpus"], arrow(r["pair"]), r["seed"], f"{r['polish']:.3f}"]
                   + [f"{v['top1']:.3f}" for v in r["variants"]] for r in sweeps])
    return {"quality": quality, "summary": summary, "timing": timing, "ceiling": ceiling, "shared": shared,
            "shared_summary": shared_summary, "transport_sweep": sweep}


def geh_timing(d: dict) -> dict:
    def fit_s(r):  # the 10,000 x 10,000 row is the one the template's target refers to
        return f"**{r['seconds']:.1f}**" if r["n1"] == 10_000 else f"{r['seconds']:.1f}"
    return {"timing": table(["items", "collections", "fit s", "P / R / F1"],
                            [[n_items(r["n_items"], r["synthetic"]), f"{r['n1']:,} x {r['n2']:,}", fit_s(r),
                              prf(r["refined"])] for r in d["timing"]])}


DIMS = {"minilm6": 384, "minilm3": 384, "mpnet": 768, "glove50": 50}


def minivec2vec(d: dict) -> dict:
    """Quality over seeds from minivec2vec.json, with the MNN-refined column from minivec2vec_mnn.json."""
    mnn = load("minivec2vec_mnn")["quality"]  # the same protocol with MiniVec2Vec(mnn_refine=2), two pairs only

    def seeds(rows, pair):
        return [r for r in rows if r["pair"] == pair and r["method"] == "mini-vec2vec"]

    def mean(rows, key):  # a plain sum / n, as numpy.mean in bench/minivec2vec.py: the same rounding at .0005
        return sum(r[key] for r in rows) / len(rows)

    rows = []
    for pair in unique(r["pair"] for r in d["quality"]):
        a, b = pair.split("->")
        label = f"{a} -> {b} " + ("(equal dims)" if DIMS[a] == DIMS[b] else f"({DIMS[a]} -> {DIMS[b]}, our extension)")
        mini, refined = seeds(d["quality"], pair), seeds(mnn, pair)
        sup = next(r for r in d["quality"] if r["pair"] == pair and r["method"] != "mini-vec2vec")
        rows.append([label, f"{mean(mini, 'top1_paper'):.3f} ({statistics.pstdev(r['top1_paper'] for r in mini):.3f})",
                     f"{mean(mini, 'rank_paper'):.2f}", f"{mean(mini, 'top1_user'):.3f}",
                     f"{mean(mini, 'retention10'):.3f}",
                     f"{mean(refined, 'top1_paper'):.3f} / {mean(refined, 'top1_user'):.3f}" if refined else "-",
                     f"{sup['top1_paper']:.3f}"])
    quality = table(["pair", "top-1 paper (sd)", "mean rank", "top-1 user", "retention@10",
                     "with MNN refinement (ours): top-1 paper / user",
                     f"supervised Procrustes, {d['protocol']['supervised_pairs']:,} true pairs"], rows)
    growth = table(["n per side", "wall s", "CPU s", "matching", "initial", "Refine-1", "Refine-2"],
                   [[n_items(r["n_per_side"], r["synthetic"]), f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}"]
                    + [f"{r['stage_s'][k]:.1f}" for k in ("matching", "initial", "refine1", "refine2")]
                    for r in d["growth"]])
    return {"quality": quality, "growth": growth}


def linking_retention(d: dict) -> dict:
    return {"modes": table(["pair", "mode", "links used", "held-out top-1", "retention@10"],
                           [[arrow(r["pair"]), r["mode"], r.get("links", "-"), f"{r['top1']:.3f}",
                             f"{r['retention10']:.3f}"] for r in d["rows"]])}


def text_gone(d: dict) -> dict:
    """Served Recall@10 per map where the old texts are gone; why the unsupervised fit works or is refused."""
    ref = {(r["corpus"], r["pair"]): r for r in d["rows"] if r["mode"] == "reference"}
    fits = {(r["corpus"], r["pair"], r["seed"], r["mode"]): r for r in d["rows"] if r["mode"] != "reference"}
    runs = sorted({(c, p, s) for c, p, s, _ in fits}, key=lambda k: (k[0] != "wordnet", k[0], k[1], k[2]))

    def served(r):
        if r is None:
            return "-"
        if not r["accepted"]:
            return f"refused ({r['validation']['score']:.2f})" if r.get("validation") else "refused (GEH)"
        return f"{r['recall10']:.3f} ({r['gap_to_supervised']:+.3f}; {r['fit_s']:.0f} s)"

    def refined(r):
        if r is None or not r["accepted"] or "refined_recall10" not in r:
            return "-"
        kept = "" if r["refinement"]["kept"] else ", not kept: validation"
        return f"{r['refined_recall10']:.3f} ({r['refined_gap_to_supervised']:+.3f}; {r['refine_s']:.0f} s{kept})"

    recall = table(["corpus", "old -> new", "seed", "stay", "re-embed", "supervised (2,000 pairs)",
                    "unsupervised (gap; fit s)", "GEH, 15 seeds (gap; s)", "GEH refined, as upgrade start fits (gap; s)"],
                   [[c, arrow(p), s, f"{ref[c, p]['stay_recall10']:.3f}", f"{ref[c, p]['reembed_recall10']:.3f}",
                     f"{ref[c, p]['supervised_recall10']:.3f}", served(fits.get((c, p, s, "unsupervised"))),
                     served(fits.get((c, p, s, "geh"))), refined(fits.get((c, p, s, "geh")))] for c, p, s in runs])

    def v3(v):
        return f"{v['score']:.2f} / {v['gain']:.3f} / {v['agreement']:.3f}"

    def starts(r):
        return ", ".join(f"{x['init'][0]}{x['restart']}: {x['top1']:.2f} ({x['score']:.2f})" for x in r["starts"]
                         if x.get("top1") is not None and "score" in x)

    diag = []
    for c, p, s in runs:
        r = fits.get((c, p, s, "unsupervised"))
        if r:
            diag.append([c, arrow(p), s, f"{r['top1']:.3f} / {ref[c, p]['supervised_top1']:.3f}",
                         f"{r['cosine']:.3f} / {ref[c, p]['supervised_cosine']:.3f}", v3(r["validation"]),
                         v3(r["supervised_validation"]), f"{r['won']['init']} #{r['won']['restart']}", starts(r)])
    why = table(["corpus", "old -> new", "seed", "top-1 (unsup / true map)", "mean cos (unsup / true)",
                 "unsup map: score / gain / agr", "true map, same rows: score / gain / agr", "start kept",
                 "starts after Refine-1: top-1 (score)"], diag)
    probe = table(["corpus", "old -> new (query vectors)", "true map top-1", "true map: score / gain / agr"],
                  [[q["corpus"], arrow(q["pair"]), f"{q['supervised_top1']:.3f}", v3(q["supervised_validation"])]
                   for q in d.get("queries_probe", [])])
    every = table(["corpus", "old -> new", "starts: top-1 (score)", "rows two starts send to the same doc"],
                  [[c["corpus"], arrow(c["pair"]),
                    ", ".join(f"{x['init'][0]}{x['restart']}: {x['top1']:.2f} ({x['score']:.2f})" for x in c["starts"]),
                    ", ".join(f"{k}: {v:.2f}" for k, v in c["pairwise_agreement"].items())]
                   for c in d.get("consensus", [])])
    gap = []
    for g in sorted(d.get("gap_probe", []), key=lambda g: (g["corpus"] != "wordnet", g["corpus"], g["pair"])):
        half, full = g["fits"]

        def fit(f):
            return f"{f['served']:.3f} ({f['gap']:+.3f})" if f["passed"] else f"refused ({f['served']:.3f})"

        gap.append([g["corpus"], arrow(g["pair"]), f"{g['supervised']:.3f}", f"{g['true_all_pairs']:.3f}", fit(half),
                    fit(full), f"{full['objective_seen']['fitted']:.3f} / {full['objective_seen']['true']:.3f}",
                    f"{half['objective_seen']['fitted']:.3f} / {half['objective_seen']['true']:.3f}",
                    f"{half['objective_unseen']['fitted']:.3f} / {half['objective_unseen']['true']:.3f}",
                    f"{full['top20_energy']['fitted']:.3f} / {full['top20_energy']['true']:.3f}"])
    gaps = table(["corpus", "old -> new", "supervised (2,000 pairs)", "true map (all 5,000 pairs)",
                  "unsupervised, 2,500 rows a side (gap)", "unsupervised, 5,000 rows (gap)",
                  "matching objective, 5,000-row fit: its rows (fitted / true)",
                  "2,500-row fit: its rows (fitted / true)", "2,500-row fit: the other 2,500 (fitted / true)",
                  "top-20 principal directions lined up (fitted / true)"], gap)
    directions = []
    for g in sorted(d.get("by_direction", []), key=lambda g: (g["corpus"] != "wordnet", g["corpus"], g["pair"])):
        directions.append([g["corpus"], arrow(g["pair"]), f"{g['supervised']:.3f}", f"{g['true']:.3f}",
                           f"{g['fitted']:.3f}"] + [f"{g['true_on_top'][k]:.3f} / {g['fitted_on_top'][k]:.3f}"
                                                    for k in g["true_on_top"]])
    basins = table(["corpus", "old -> new", "the tool's fit", "fitted map: objective (top-1)", "... polished",
                    "true map: objective (top-1)", "... polished"],
                   [[g["corpus"], arrow(g["pair"]), "accepted" if g["passed"] else "refused"]
                    + [f"{g[k]['objective']:.4f} ({g[k]['top1']:.3f})"
                       for k in ("fitted", "fitted_polished", "true", "true_polished")]
                    for g in sorted(d.get("basin", []), key=lambda g: (g["passed"], g["pair"]))])
    ks = list(d["by_direction"][0]["true_on_top"]) if d.get("by_direction") else []
    by_direction = table(["corpus", "old -> new", "supervised (2,000 pairs)", "true map (all 5,000 pairs)",
                          "unsupervised (5,000 rows a side)"]
                         + [f"top {k} directions from the true map, the rest fitted / the reverse" for k in ks],
                         directions)
    small = []
    for r in sorted((r for r in d["rows"] if r["mode"].startswith("unsupervised, ")),
                    key=lambda r: (-r["rows"], r["corpus"] != "wordnet", r["corpus"], r["pair"], r["seed"])):
        if r["accepted"]:
            verdict = "accepted" + (f", confirmed by {r['confirmation']['by']}" if r.get("confirmation") else "")
        else:
            verdict = "refused: in doubt" if r.get("doubt") else "refused: failed validation"
        small.append([r["corpus"], arrow(r["pair"]), f"{r['rows']:,}", verdict,
                      f"{r['top1']:.3f}", f"{r['recall10']:.3f} ({r['gap_to_supervised']:+.3f})",
                      len(r["starts"]), f"{r['fit_s']:.0f}"])
    small = table(["corpus", "old -> new", "rows a side", "the tool's verdict", "top-1 of its map",
                   "served Recall@10 of its map (gap)", "starts run", "fit s"], small)
    shares = sorted({r["overlap"] for r in d["rows"] if r["mode"].startswith("overlap ")}, reverse=True)
    with_own = []
    for c, p, s in runs:
        own = [fits.get((c, p, s, f"overlap {n}")) for n in shares]
        if any(own):
            with_own.append([c, arrow(p), s, f"{ref[c, p]['stay_recall10']:.3f}", f"{ref[c, p]['reembed_recall10']:.3f}",
                             f"{ref[c, p]['supervised_recall10']:.3f}", served(fits.get((c, p, s, "unsupervised"))),
                             *(served(r) for r in own)])
    overlap = table(["corpus", "old -> new", "seed", "stay", "re-embed", "supervised (2,000 pairs)",
                     "unsupervised, other documents (gap; fit s)",
                     *(f"unsupervised, {n:,} of the collection's own (gap; fit s)" for n in shares)], with_own)
    counts = sorted({r["n_seeds"] for r in d["rows"] if r["mode"].startswith("geh, ")})

    def grown(r):
        if r is None or not r["accepted"]:
            return served(r)
        out = f"{r['recall10']:.3f} ({r['gap_to_supervised']:+.3f}; links {r['links']:,}, {r['link_precision']:.0%} right)"
        return out + (f"; refined {r['refined_recall10']:.3f} ({r['refined_gap_to_supervised']:+.3f})"
                      if "refined_recall10" in r else "")

    more = [[c, arrow(p), s, f"{ref[c, p]['supervised_recall10']:.3f}", served(fits.get((c, p, s, "geh"))),
             *(grown(fits.get((c, p, s, f"geh, {n} seeds"))) for n in counts)]
            for c, p, s in runs if any(fits.get((c, p, s, f"geh, {n} seeds")) for n in counts)]
    seeds = table(["corpus", "old -> new", "seed", "supervised (2,000 pairs)", "GEH, 15 seeds",
                   *(f"GEH, {n} seeds (gap; links grown, share right; refined)" for n in counts)], more)
    return {"recall": recall, "why": why, "probe": probe, "consensus": every, "gap": gaps, "small": small,
            "by_direction": by_direction, "basin": basins,
            "overlap": overlap, "seeds": seeds}


def reproduced_starts(d: dict) -> dict:
    """Reproduction between mini-vec2vec starts (right: top-1 >= 0.5), by corpus and kind of pair; every start."""
    fits = sorted(d["fits"].values(), key=lambda f: (f["fits"][0]["corpus"] != "wordnet", f["fits"][0]["corpus"],
                                                     f["fits"][0]["pair"]))
    pairs = [p for f in fits for p in f["pairs"]]

    def spread(values):
        v = sorted(values)
        return f"{v[0]:.3f} / {v[len(v) // 2]:.3f} / {v[-1]:.3f}" if v else "-"

    rows = []
    for corpus in unique(p["corpus"] for p in pairs):
        for kind in ("right-right", "right-wrong", "wrong-wrong"):
            sel = [p for p in pairs if p["corpus"] == corpus and p["kind"] == kind]
            same = [p for p in sel if p["same_kind"]]
            if sel:
                rows.append([corpus, kind, len(sel), spread(p["reproduction"] for p in sel),
                             spread(p["reproduction_csls"] for p in sel),
                             f"{len(same)}: {spread(p['reproduction'] for p in same)}"])
    distribution = table(["corpus", "pair of starts", "pairs", "reproduction (cosine) min / median / max",
                          "CSLS min / median / max", "same kind: pairs, cosine min / median / max"], rows)
    every = []
    for f in fits:
        for fit in f["fits"]:
            sel = [p for p in f["pairs"] if p["a"].startswith(f"s{fit['seed']}:")
                   and p["b"].startswith(f"s{fit['seed']}:")]
            every.append([fit["corpus"], arrow(fit["pair"]), fit["seed"],
                          ", ".join(f"{x['init'][0]}{x['restart']}: {x['top1']:.2f} ({x['gain']:.3f})"
                                    for x in fit["starts"]),
                          ", ".join(f"{p['a'].split(':')[1]}-{p['b'].split(':')[1]}: {p['reproduction']:.2f}"
                                    for p in sel)])
    starts = table(["corpus", "old -> new", "seed", "starts after Refine-1: top-1 (gain)",
                    "reproduction (cosine) of each pair of starts"], every)
    tg = d.get("text_gone_seed0", {})
    before = {(r["corpus"], r["pair"]): r for r in tg.get("before", [])}

    def outcome(r):
        if r is None:
            return "-"
        if not r["accepted"]:
            return "refused"
        return f"top-1 {r['top1']:.3f}, R@10 gap {r['gap_to_supervised']:+.3f}, {r['fit_s']:.0f} s"

    def confirmed(r):
        if not r.get("rerun", True):
            first_only = len(before.get((r["corpus"], r["pair"]), {}).get("starts", [])) == 1
            return ("not rerun: its first start cleared the gain rule by the margin, so the search ends there as "
                    "before (unchanged by construction)" if first_only else "not rerun")
        c = r.get("confirmation")
        reps = [f"{x['init'][0]}{x['restart']}-{k}: {v:.2f}" for x in r["starts"]
                for k, v in (x.get("reproductions") or {}).items()]
        head = f"{c['start']} by {c['by']} ({c['reproduction']:.2f})" if c else "no"
        return head + (f"; compared: {', '.join(reps)}" if reps else "")

    after = sorted(tg.get("after", []), key=lambda r: (r["corpus"] != "wordnet", r["corpus"], r["pair"]))
    text_gone_rows = table(["corpus", "old -> new", "gain rule alone", "with reproduced starts", "confirmed (share)"],
                           [[r["corpus"], arrow(r["pair"]), outcome(before.get((r["corpus"], r["pair"]))),
                             outcome(r) if r.get("rerun", True) else "-", confirmed(r)] for r in after])
    return {"distribution": distribution, "starts": starts, "text_gone": text_gone_rows}


TARGETS = (0.90, 0.95)  # retention@10: with nothing re-embedded, with at most 5% re-embedded (as the template says)
COST_ITEMS = 1_000_000  # the recommender's cost model: 1M items, 1M queries


def quality_options(d: dict) -> dict:
    pairs = list(d["pairs"])
    first = d["pairs"][pairs[0]]
    no_reembed = table(["option"] + pairs, [[name] + [f"{d['pairs'][p]['no_reembed'][name]['retention']:.3f}"
                                                     for p in pairs] for name in first["no_reembed"]])
    stage = "clustered + hub"
    reembed = table(["strategy"] + pairs,
                    [[s] + [" / ".join(f"{x:.3f}" for x in d["pairs"][p]["reembed"][stage][s]) for p in pairs]
                     for s in first["reembed"][stage]])
    rerank = table(["K"] + pairs, [[k] + [f"{d['pairs'][p]['rerank'][stage][k]['retention']:.3f} "
                                          f"({d['pairs'][p]['rerank'][stage][k]['candidates_covered']:.2f})"
                                          for p in pairs] for k in first["rerank"][stage]])

    def against(value, target, label):
        verdict = "reached" if value >= target else f"short by {target - value:.3f}"
        return f"{value:.3f} {verdict} ({label})"
    none, five = TARGETS
    targets = table(["pair", "best without the old model, no re-embed", "best with no re-embed (incl. fusion)",
                     "best without the old model + 5%", "best with 5% (incl. fusion)"],
                    [[g["pair"], against(g["best_map_retention"], none, g["best_map"]),
                      against(g["best_none_retention"], none, g["best_none"]),
                      against(g["best_5pct_maps_retention"], five, g["best_5pct_maps"]),
                      against(g["best_5pct_retention"], five, g["best_5pct"])] for g in d["goals"]])

    sp, soft = d["speed"], d["speed"]["clustered soft (top_m=3)"]
    cost_rows = [
        ["orthogonal map", f"{sp['orthogonal']['transform_s_per_1M']:.0f} s", "none (the map's artifact only)"],
        ["clustered map, soft (top 3 clusters)", f"{soft['transform_s_per_1M']:.0f} s (fit {soft['fit_s']:.1f} s)",
         f"artifact {sp['clustered_artifact_bytes'] / 1e6:.0f} MB"],
        ["clustered map, hard", f"{sp['clustered hard']['transform_s_per_1M']:.0f} s", "same"],
        [f"hub penalty (kNN against {d['protocol']['n_fit']:,} log queries)", f"{sp['hub_penalty_s_per_1M']:.0f} s",
         "one more dimension per item (dot metric)"],
        ["dual-query fusion", "none (wrapped: the old index is what is served)",
         "none wrapped; the old vectors if the collection is rewritten"]]
    # the time to re-embed all items with each new model is in the recommender's "full re-embed" choices
    full = {r["pair"].split("->")[1]: r["cost"]["reembed_s"] for r in d["recommendations"]
            if r["choice"] == "full re-embed"}
    for model, s in sorted(full.items(), key=lambda kv: -kv[1]):
        hours = " / ".join(f"{f * s / 3600:.1f} h" for f in (0.01, 0.05, 0.25))
        cost_rows.append([f"re-embed 1% / 5% / 25% with {model}",
                          f"{hours} (data set README: {s / COST_ITEMS * 1000:.1f} ms per gloss)",
                          "none (vectors replaced)"])
    costs = table(["option", "one-off time per 1M vectors", "extra storage"], cost_rows)

    recommendations = table(
        ["pair", "target", "old model kept for queries", "choice", "retention", "compute"],
        [[r["pair"], r["target"], "yes" if r["allow_old_model"] else "no",
          r["choice"] + ("" if r["meets_target"] else " (target not reached)"), f"{r['retention']:.3f}",
          f"{r['cost']['total_s'] / 3600:.1f} h"] for r in d["recommendations"]])
    return {"no_reembed": no_reembed, "reembed": reembed, "rerank": rerank, "targets": targets, "costs": costs,
            "recommendations": recommendations}


MIGRATE_STORES = {"file": "file://", "pgvector": "PostgreSQL 18 + pgvector", "qdrant_edge": "Qdrant Edge"}


def migrate(d: dict) -> dict:
    return {"stores": table(
        ["store", "migrate (vectors/s)", "identity copy, 384-d", "migrate / copy",
         "copy padded to 768-d (same bytes written)", "migrate / padded copy",
         "translate per query in this run (batch of 1,000, 768-d)", "peak RSS at 25k -> 100k items"],
        [[MIGRATE_STORES.get(r["store"], r["store"]), f"{r['migrate_vps']:,.0f}", f"{r['copy_vps']:,.0f}",
          f"{r['ratio_vs_copy']:.2f}x", f"{r['padded_copy_vps']:,.0f}", f"{r['ratio_vs_padded_copy']:.2f}x",
          f"{r['translate_us_per_query']:.1f} us", f"{r['peak_rss_mb_1x']:,.0f} -> {r['peak_rss_mb_4x']:,.0f} MB"]
         for r in d["rows"]])}


def rowwise(d: dict) -> dict:
    return {"timing": table(
        ["corpus", "pair", "dims", "row-stable (10,000 rows)", "float32 BLAS", "ratio", "max relative error",
         "float32 BLAS's"],
        [[r["corpus"], arrow(r["pair"]), r["dims"], f"{r['stable_s'] * 1000:.0f} ms", f"{r['blas_s'] * 1000:.0f} ms",
          f"{r['ratio']:.2f}x", f"{r['stable_max_rel_err']:.1e}", f"{r['blas_max_rel_err']:.1e}"]
         for r in d["rows"]])}


def report_calibration(d: dict) -> dict:
    """Per sample size: each pair's predictions (log-linear before, at size now) against what is measured after
    migrating all 10,000 items; and the largest errors per corpus and sample."""
    def pairs(sample):
        rows = []
        for r in (r for r in d["rows"] if r["sample"] == sample):
            t, q = r["top1"], r["retention"]
            rows.append([r["corpus"], arrow(r["pair"]),
                         f"{t['old']:.3f} / **{t['new']:.3f}**" + (f" ± {t['margin']:.3f}" if t.get("margin") else "")
                         + f" / {t['measured_held']:.3f} ({t['measured_all']:.3f})",
                         f"{t['error_old']:+.3f} / **{t['error_new']:+.3f}**",
                         f"{q['old']:.3f} / **{q['new']:.3f}** / {q['measured']:.3f} ({q['measured_unseen']:.3f}; "
                         f"{q['measured_held']:.3f}" + (f"; {q['measured_train']:.3f})" if "measured_train" in q else ")"),
                         f"{q['error_old']:+.3f} / **{q['error_new']:+.3f}** ({q['error_new_unseen']:+.3f}; "
                         f"{q['error_new_held']:+.3f})"])
        return table(["corpus", "pair (old -> new)",
                      "top-1: log-linear / at size ± the report's 95% margin / measured, held-out items (all items)",
                      "error",
                      "retention@10: log-linear / at size / measured, all queries (unseen documents'; report's; "
                      "training documents')",
                      "error (unseen; report's)"], rows)

    summary = table(
        ["corpus", "sample", "top-1 (held-out): log-linear / at size", "top-1 within the report's margin",
         "retention@10, all queries: log-linear / at size", "at size vs unseen documents' queries",
         "at size vs the report's queries"],
        [[v["corpus"], f"{v['sample']:,}", f"{v['top1_error_old']:.3f} / **{v['top1_error_new']:.3f}**",
          f"{v['top1_within_margin']} of {v['pairs']}" if "pairs" in v else "not run",
          f"{v['retention_error_old']:.3f} / **{v['retention_error_new']:.3f}**",
          f"{v['retention_error_new_unseen']:.3f}", f"{v['retention_error_new_held']:.3f}"]
         for v in d["max_abs_error"]])
    samples = d["protocol"]["samples"]
    return {"pairs": pairs(samples[0]), "pairs_default": pairs(samples[-1]), "summary": summary}


def text_gone_report(d: dict) -> dict:
    """Per corpus and pair: the report's top-1 and retention@10 at the collection's size for GEH's refined map (and
    the links' own map), against what that map then gives over the whole collection; the unsupervised report's
    Recall@10 carried from its sample to the collection against the served figure (pairs the fit refuses: shown,
    not counted in the largest error)."""
    def cell(r, what, fmt=".3f"):
        p, m = r["predicted"].get(what), r["measured"].get(what)
        return "-" if p is None or m is None else f"{p:{fmt}} / {m:{fmt}} ({p - m:+.3f})"

    rows, worst = [], {}
    for (corpus, pair), group in groupby(d["rows"], key=lambda r: (r["corpus"], r["pair"])):
        by = {r["report"]: r for r in group}
        geh, links, unsup = by.get("geh", {}), by.get("links"), by.get("unsupervised")
        if geh.get("refused"):
            row = [corpus, arrow(pair), f"`link` refused; the report: {geh['report_said']}", "-", "-", "-"]
        else:
            row = [corpus, arrow(pair), cell(geh, "top1"), cell(geh, "retention"), cell(links, "top1"),
                   cell(links, "retention")]
            for r, kind in ((geh, "geh"), (links, "links")):
                for what in ("top1_error", "retention_error"):
                    worst[(corpus, kind, what)] = max(worst.get((corpus, kind, what), 0), abs(r[what]))
        if unsup:
            refused = "" if unsup["measured"].get("accepted", True) else ", the fit refuses it"
            row.append(f"{cell(unsup, 'recall10')} [{unsup['predicted']['recall10_sample']:.3f}], "
                       f"{unsup['predicted']['verdict']}{refused}")
            if "recall10_error" in unsup and not refused:
                worst[(corpus, "unsupervised", "recall")] = max(worst.get((corpus, "unsupervised", "recall"), 0),
                                                                abs(unsup["recall10_error"]))
        rows.append(row)
    header = ["corpus", "old -> new", "GEH refined: top-1 predicted / measured (error)", "retention@10",
              "the links' own map: top-1", "retention@10"]
    if any(len(r) > 6 for r in rows):
        header.append("unsupervised: Recall@10 predicted / served (error) [the sample's own], verdict")
        rows = [r + ["-"] * (7 - len(r)) for r in rows]
    corpora = unique(r["corpus"] for r in d["rows"])
    summary = table(["corpus", "GEH refined: largest top-1 error", "largest retention error",
                     "links' map: top-1", "retention", "unsupervised: Recall@10"],
                    [[c, *(f"{worst[(c, k, w)]:.3f}" if (c, k, w) in worst else "-"
                           for k, w in (("geh", "top1_error"), ("geh", "retention_error"), ("links", "top1_error"),
                                        ("links", "retention_error"), ("unsupervised", "recall")))]
                     for c in corpora])
    return {"pairs": table(header, rows), "summary": summary}


def map_validation(d: dict) -> dict:
    """The validation's separation per corpus, the statistics it departs from, and what it says per family of maps."""
    sm = d["summary"]
    groups = ("wordnet", "foldoc", "pooled")

    def acc(h):
        return f"{h['accuracy']:.3f} ({h['false_pass']} false pass, {h['false_refusal']} false refusal)"

    def rng(r):
        return f"{r[0]:.2f} .. {r[1]:.2f}" if r else "none"

    rows = []
    for g in groups:
        b = sm["by"][g]
        ha, ins = b["held_apart"], b["in_sample"]
        rows.append([g, f"{b['n']} ({b['working']} / {b['failed']})", f"{ha['auc']['score']:.3f}", acc(ha),
                     f"{ins['auc']['score']:.3f}" if ins["n"] else "-", acc(ins) if ins["n"] else "-",
                     rng(ha["right_thresholds"])])
    summary = table(["corpus", "fits (working / failed)", "ROC AUC", f"accuracy at score >= {sm['threshold']:g}",
                     "ROC AUC, in-sample", "accuracy, in-sample", "thresholds right on every fit"], rows)
    stats = list(sm["by"]["pooled"]["held_apart"]["auc"])
    statistics = table(["statistic (held-apart rows)"] + list(groups),
                       [[s] + [f"{sm['by'][g]['held_apart']['auc'][s]:.3f}" for g in groups] for s in stats])
    families = table(["maps", "fits", "working (top-1 >= 0.5)", "passed", "passed, in-sample (split 0 only)",
                      "top-1 range", "score range"],
                     [[k, v["n"], v["working"], v["passed"], f"{v['passed_in_sample']} of {v['n_in_sample']}",
                       f"{v['top1'][0]:.3f} .. {v['top1'][1]:.3f}", f"{v['score'][0]:.2f} .. {v['score'][1]:.2f}"]
                      for k, v in sm["families"].items()])
    return {"summary": summary, "statistics": statistics, "families": families}


CONNECTOR_STORES = {"pgvector": "PostgreSQL 18 + pgvector 0.8", "milvus": "Milvus 2.3.5 server",
                    "milvus-lite": "Milvus Lite 3.2", "chroma": "Chroma 1.5 server",
                    "qdrant-local": "Qdrant local (qdrant-client)", "qdrant-edge": "Qdrant Edge 0.9"}
CONNECTOR_OPS = {("pgvector", "upsert"): "upsert (binary COPY)", ("pgvector", "scan"): "scan (binary COPY, keyset)"}


def connectors(d: list) -> dict:
    def spread(r):
        if "pair_range" not in r:
            return "-"
        lo, hi = r["pair_range"]
        return f"{lo:+.0%} .. {hi:+.0%} ({r['runs']} pairs)"
    return {"stores": table(
        ["store", "op", "N", "vecbridge (vectors/s)", "store's own client (vectors/s)", "overhead", "per-pair range"],
        [[CONNECTOR_STORES.get(r["store"], r["store"]), CONNECTOR_OPS.get((r["store"], r["op"]), r["op"]),
          f"{r['n']:,}", f"{r['vecbridge_vps']:,}", f"{r['native_vps']:,}", f"{r['overhead']:+.0%}", spread(r)]
         for r in d])}


UPGRADE_PRIORITIES = ("random", "residual", "hubs", "queries")
UPGRADE_LOGGED = ("hubs", "queries")


def upgrade_curve(d: dict) -> dict:
    """One table per model pair (both corpora side by side), the owner's checks, and the costs per 1M vectors."""
    corpora = list(d["corpora"])
    pairs = list(d["corpora"][corpora[0]])

    def where(prio):  # hubs and queries use half A of the queries as their log: their figures are on half B only
        return "half_b" if prio in UPGRADE_LOGGED else "all"

    def cell(m):
        return f"{m['mapped']:.3f} / {m['beta1']:.3f} / {m['tuned']:.3f}"

    def pct(f):
        return f"{f:.0%}"

    out = {}
    for pair in pairs:
        header = ["fraction re-embedded"] + [f"{c}: {p}" + (" (half B)" if p in UPGRADE_LOGGED else "")
                                             for c in corpora for p in UPGRADE_PRIORITIES]
        res = {c: d["corpora"][c][pair] for c in corpora}
        first = res[corpora[0]]["curves"]["random"]
        rows = [[pct(pt["fraction"]) + (f" ({first[i]['n_native']:,} native)" if i in (0, len(first) - 1) else "")]
                + [cell(res[c]["curves"][p][i][where(p)]) for c in corpora for p in UPGRADE_PRIORITIES]
                for i, pt in enumerate(first)]
        rows.append(["everything mapped, fit sample too"]
                    + [cell(res[c]["all_mapped"][where(p)]) for c in corpora for p in UPGRADE_PRIORITIES])
        for label, key in (("**staying on the old model**", "staying"), ("**full re-embed**", "full_reembed")):
            rows.append([label] + [f"{res[c][key][where(p)]:.3f}" for c in corpora for p in UPGRADE_PRIORITIES])
        out[pair.replace("->", "_")] = table(header, rows)

    def fusion_ok(r, kind):  # over the three priorities' curves, for beta 1 or the tuned beta
        runs = {k.split("/")[0]: v for k, v in r["checks"]["fusion_never_below_staying"].items()
                if k.endswith("/" + kind)}
        prio, v = min(runs.items(), key=lambda kv: kv[1]["worst_margin"])
        bad = [p for p, w in runs.items() if not w["ok"]]
        if not bad:
            return f"yes (closest {v['worst_margin']:+.3f})"
        return f"**no** ({', '.join(bad)}): {v['worst_margin']:+.3f} at {pct(v['at_fraction'])} ({prio})"

    def reaches(r):
        first = r["checks"]["first_fraction_mapped_reaches_staying"]
        return " / ".join("never" if first[p] is None else pct(first[p]) for p in UPGRADE_PRIORITIES)

    def at_100(r):
        a = r["checks"]["at_100"]["random"]
        same = all(v["mapped_equals_full"] for v in r["checks"]["at_100"].values())
        return f"{'yes' if same else '**no**'}; {a['beta1_minus_full']:+.3f} / {a['tuned_minus_full']:+.3f}"

    def union_gap(r):
        gaps = [abs(pt["all"]["beta1"] - pt["all"]["beta1_top100"]) for pt in r["curves"]["random"]]
        return f"{max(gaps):.4f}"

    rows = []
    for c in corpora:
        for pair in pairs:
            r = d["corpora"][c][pair]
            z = r["curves"]["random"][0]["all"]
            rows.append([c, arrow(pair), f"{r['staying']['all']:.3f}", f"{r['full_reembed']['all']:.3f}",
                         f"{z['mapped']:.3f} / {z['beta1']:.3f} / {z['tuned']:.3f}", fusion_ok(r, "beta1"),
                         fusion_ok(r, "tuned"), reaches(r),
                         at_100(r), union_gap(r)])
    out["checks"] = table(["corpus", "pair", "staying", "full re-embed", "0%: mapped / beta 1 / tuned beta",
                           "fusion >= staying at every point, beta 1", "... tuned beta",
                           "first fraction mapped-only >= staying (random / residual / hubs / queries)",
                           "100%: mapped == full re-embed; fused - full (beta 1 / tuned)",
                           "beta 1: top-100 union vs whole collection (max diff)"], rows)

    def opt(o):
        extra = [f"beta {o['beta']}" if o["beta"] not in (0, 0.0) else "", f"w {o['hub_weight']}" if o["hub_weight"]
                 else ""]
        extra = ", ".join(e for e in extra if e)
        return f"{o['recall']:.3f}" + (f" ({extra})" if extra else "")

    if all("serving" in d["corpora"][c][p] for c in corpora for p in pairs):
        rows = []
        for c in corpora:
            for pair in pairs:
                sv = d["corpora"][c][pair]["serving"]
                rows.append([c, arrow(pair), f"{sv['staying']:.3f}"]
                            + [opt(sv[m][o]) for m in ("global", "clustered") for o in ("mapped", "hub", "fused",
                                                                                       "fused_hub")]
                            + [f"{sv['full_reembed']:.3f}"])
        out["serving"] = table(["corpus", "pair", "staying"]
                               + [f"{m}: {o}" for m in ("global", "clustered")
                                  for o in ("mapped", "+ hub penalty", "fused", "fused + hub penalty")]
                               + ["full re-embed"], rows)

    if all("cascade_stages" in d["corpora"][c][p] for c in corpora for p in pairs):
        rows = []
        for c in corpora:
            for pair in pairs:
                r = d["corpora"][c][pair]
                best = max(r["staying"]["half_b"], r["full_reembed"]["half_b"])
                st = r["cascade_stages"]
                auto = [x.get("cascade_auto", x["cascade"]) for x in st]
                rows.append([c, arrow(pair), f"{r['staying']['half_b']:.3f}", f"{r['full_reembed']['half_b']:.3f}"]
                            + [f"{x['tuned'] - best:+.4f} / {x['cascade'] - best:+.4f}"
                               + (f" / {x['cascade_auto'] - best:+.4f} ({x['cascade_auto_k']})"
                                  if "cascade_auto" in x else "") for x in st]
                            + [f"{sum(x['tuned'] >= best for x in st)} / {sum(a >= best for a in auto)} / "
                               f"{sum(a >= best + 0.01 for a in auto)} of {len(st)}"])
        fractions = [f"{x['fraction']:.0%}" for x in d["corpora"][corpora[0]][pairs[0]]["cascade_stages"]]
        out["cascade_stages"] = table(["corpus", "pair", "staying", "full re-embed"] + fractions
                                      + ["stages: tuned fusion >= both / cascade (auto) >= both / >= both + 0.01"],
                                      rows)

    if "goals" in d:
        out.update(upgrade_goals(d["goals"]))

    def hours(h):
        return f"{h * 60:.0f} min" if h < 1 else f"{h:.1f} h"

    cost_rows = []
    for r in d["costs"]:
        h = r["reembed_hours"]
        fq = r["fusion_per_query_ms"]
        cost_rows.append([arrow(r["pair"]), r["corpus"], f"{r['doc_encode_ms']:.1f} ms",
                          f"{r['start']['total_s'] / 60:.1f} min ({r['start']['reembed_fit_sample_s']:.0f} s + "
                          f"{r['start']['fit_s']:.2f} s + {r['start']['map_1M_s']:.1f} s)",
                          " / ".join(hours(h[str(f)]) for f in (0.01, 0.05, 0.1, 0.25, 0.5, 1.0)),
                          f"{r['reembed_core_hours_100pct']:.0f}",
                          f"{fq['total']:.1f} ms ({fq['old_query_encode']:.1f} + {fq['second_search_exact_1M']:.1f} + "
                          f"{fq['rescore']:.1f})"])
    out["costs"] = table(["pair", "corpus", "re-embed per doc (data set README)",
                          "start: re-embed 2,000 + fit + map 1M",
                          "re-embed 1 / 5 / 10 / 25 / 50 / 100% of 1M", "core-hours at 100%",
                          "fusion per query (old-model encode + exact 2nd search over 1M, batched + re-score)"],
                         cost_rows)
    return out


def upgrade_goals(g: dict) -> dict:
    """One table per corpus: every goal of quality while upgrading, each cell the worst case of its benchmark."""
    def num(v, goal=None, sign=True):
        if v is None or isinstance(v, str):
            return v or "not run"
        text = f"{v:+.3f}" if sign else f"{v:.3f}"
        return text if goal is None or goal(v) else f"**{text}**"

    def gone(t):
        if not t["fits"]:
            return "not run"
        if not t["accepted"]:
            return f"refused ({t['fits']} of {t['fits']})"
        worst = num(-t["worst_gap"], lambda v: v >= -0.03)
        return worst + ("" if t["accepted"] == t["fits"] else f" ({t['fits'] - t['accepted']} of {t['fits']} refused)")

    out = {}
    for corpus, pairs in g["corpora"].items():
        rows = [[arrow(pair), f"{r['staying']:.3f} / {r['full_reembed']:.3f}",
                 num(r["fusion_worst"], lambda v: v >= 0), num(r["cascade_worst"], lambda v: v >= 0.01),
                 num(r["log_fusion_worst"], lambda v: v >= 0), num(r["log_cascade_worst"], lambda v: v >= 0.01),
                 num(r["refit_gain_25"], lambda v: v >= 0.01), gone(r["unsupervised"]), gone(r["unsupervised_own"]),
                 gone(r["geh"]), num(r["plan_error"], lambda v: v <= 0.03, sign=False),
                 num(r["report_error"], lambda v: v <= 0.03, sign=False),
                 num(r.get("text_gone_report_error"), lambda v: v <= 0.03, sign=False)]
                for pair, r in pairs.items()]
        out[f"goals_{corpus}"] = table(
            ["pair", "staying / full re-embed", "tuned fusion (>= 0)", "cascade (>= +0.01)",
             "with a query log: fusion (>= 0)", "... cascade (>= +0.01)", "refit gain at 25% (>= 0.01)",
             "text gone: unsupervised, other documents (>= -0.03)", "... with 46% own documents",
             "... GEH, 15 seeds, refined", "plan: worst error (<= 0.03)",
             f"report at {g['report_sample']:,}: worst error (<= 0.03)",
             "report, text gone: worst error (<= 0.03)"], rows)
    return out


RAY_STORES = {"file": "file://", "pgvector": "PostgreSQL 18 + pgvector", "milvus_server": "Milvus 2.3.5 server"}
#: workers of the 1B projection (one CPU each)
RAY_PROJECTED = (1, 8, 32, 128)


def ray_scale(d: dict) -> dict:
    """Throughput per engine and worker count (medians, ratio to the single process), and the 1B projection from the
    measured rate of one Ray worker."""
    done = [r for r in d["stores"] if "rate" in r]
    keys = list(done[0]["rate"]) if done else []
    rates = table(["store"] + [f"{k} (vectors/s)" for k in keys] + ["Ray overhead at 1 worker", "runs (s)"],
                  [[RAY_STORES.get(r["store"], r["store"])]
                   + [f"{r['rate'][k]:,} ({r['speedup'][k]:.2f}x)" for k in keys]
                   + [f"{r['overhead_at_1_worker']:+.1%}",
                      "; ".join(f"{k} " + "/".join(f"{s:.0f}" for s in v) for k, v in r["seconds"].items())]
                   for r in done])
    def duration(seconds: float) -> str:
        return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"

    projection = table(["store", "one worker (vectors/s, measured)"]
                       + [f"1B, {n} worker{'s' if n > 1 else ''}" for n in RAY_PROJECTED],
                       [[RAY_STORES.get(r["store"], r["store"]), f"{r['rate']['ray x1']:,}"]
                        + [duration(1e9 / (n * r["rate"]["ray x1"])) for n in RAY_PROJECTED]
                        for r in done if "ray x1" in r["rate"]])
    return {"rates": rates, "projection": projection}


def record_stamps(d: dict) -> dict:
    """Writing with stamps against without, the still-mapped scan filtered by the store against a full scan, and a
    lookup of stamps against reading the records: medians, each run in brackets (the range, past 3 runs)."""
    rows = []
    for r in d["rows"]:
        m, runs = r["median_s"], r["runs"]

        def cell(key, m=m, runs=runs):
            got = runs[key]
            spread = ("/".join(f"{x:.2f}" for x in got) if len(got) <= 3
                      else f"{min(got):.2f} to {max(got):.2f}, {len(got)} runs")
            return f"{m[key]:.2f} s ({spread})"
        rows.append([r["store"], f"{r['records']:,}", f"{r.get('batch', 2000):,}",
                     "yes" if r.get("index", True) else "after the load", cell("upsert_plain"), cell("upsert_stamped"),
                     f"{r['stamp_overhead']:+.0%}", cell("mapped_scan_stamps"), cell("mapped_full_scan"),
                     f"{m['lookup_stamps_of'] * 1000:.0f} ms", f"{m['lookup_get'] * 1000:.0f} ms",
                     f"{r['load_average']:.1f}"])
    return {"timing": table(["store", "records", "records per upsert", "vector index while writing",
                             "upsert, no stamps", "upsert, stamped", "stamping costs",
                             "still mapped: scan_stamps", "still mapped: full scan", "1,000 stamps: stamps_of",
                             "1,000 records: get", "load average"], rows)}


def upgrade_stamps(d: dict) -> dict:
    """Whole upgrades with their stamps written against the same upgrades writing none: seconds in the store's
    upsert and in the whole job, medians of the rounds, and the files the upgrade kept on this machine."""
    rows = []
    for r in d["rows"]:
        m, adds = r["median_s"], r["stamping_adds"]
        files = r["rounds"][0]["local_files"]
        def write(key: str) -> str:
            """The median write and, over several rounds, their range."""
            each = [x[key]["write_s"] for x in r["rounds"]]
            spread = f" ({min(each):.1f} to {max(each):.1f})" if len(each) > 1 else ""
            return f"{m[key]['write_s']:.1f} s{spread}"

        for step, n in (("start", r["records"]), ("reembed", r["reembedded"])):
            st, un = m[f"{step} stamped"], m[f"{step} unwritten"]
            rows.append([r["store"], step, f"{n:,}", write(f"{step} unwritten"), write(f"{step} stamped"),
                         f"{adds[f'{step} write_s']:+.1%}", f"{un['job_s']:.0f} s", f"{st['job_s']:.0f} s",
                         f"{adds[f'{step} job_s']:+.1%}",
                         (f"{m['start none']['job_s']:.0f} s ({adds['start job_s, stamps made and written vs none']:+.0%})"
                          if step == "start" else ""),
                         ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in files.items()) if step == "start" else "",
                         f"{max(x['load_average'] for x in r['rounds']):.1f}"])
    return {"timing": table(["store", "step", "records", "write, stamps unwritten", "write, stamped",
                             "stamping adds to the write", "job, stamps unwritten", "job, stamped",
                             "stamping adds to the job", "start with no stamps made", "files kept on this machine",
                             "load average"], rows)}


def pgvector_search(d: dict) -> dict:
    """The connector's search beside its former four statements and plain psycopg, medians per thread count."""
    base = {r["threads"]: r for r in d["rows"] if r["way"] == "four statements"}
    rows = [[r["threads"], r["way"], f"{r['qps']:.0f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}",
             f"{base[r['threads']]['p50_ms'] / r['p50_ms']:.2f}x"] for r in d["rows"]]
    return {"table": table(["threads", "way", "queries/s", "p50 ms", "p99 ms", "p50 speed-up over four statements"],
                           rows)}


def cascade(d: dict) -> dict:
    """Day one: staying, full re-embed, tuned fusion and the cascades (difference to the better of staying and full
    re-embed); the bound of other score fusions; then the write-back's growth along a Zipf query log."""
    day, growth, fusions = [], [], []
    for corpus, pairs in d["corpora"].items():
        for r in pairs:
            best = max(r["staying"], r["full_reembed"])

            def vs(v, best=best):
                return f"{v:.4f} ({v - best:+.4f})"
            day.append([corpus, r["pair"], f"{r['staying']:.4f}", f"{r['full_reembed']:.4f}",
                        f"{r['served_tuned']:.4f}", vs(r["cascade"]["100"]), vs(r["cascade_fused_beta1"]["100"]),
                        vs(r["cascade_fused_beta1"]["50"]), f"{vs(r['cascade_fused']['100'])}, beta "
                        f"{r['cascade_fused_beta']}", vs(r["cascade_fused"]["200"]) if "200" in r["cascade_fused"]
                        else "", f"{vs(r['both_native'])}; oracle {r['both_native_oracle'] - best:+.4f}"
                        if "both_native_oracle" in r else ""])
            if "both_native_fusions" in r:
                fusions.append([corpus, r["pair"], f"{best:.4f}",
                                f"{r['both_native'] - best:+.4f} (beta {r['both_native_beta']})"] + [
                    f"{f['recall'] - best:+.4f} (beta {f['beta']})" for f in r["both_native_fusions"].values()])
            g = r["write_back"]["growth"]
            growth.append([corpus, r["pair"]] + [
                f"{x['retrieved_native_share']:.2f} / {x['embedded_per_query']:.1f} / {x['seconds_per_query']:.2f} s"
                for x in g] + [f"{g[-1]['native_fraction']:.0%}"])
    marks = [f"after {x['queries']:,} queries" for x in d["corpora"]["wordnet"][0]["write_back"]["growth"]]
    return {"day_one": table(["corpus", "pair", "staying", "full re-embed", "served (tuned fusion)",
                              "cascade K=100, new model alone", "cascade K=100, fused (beta 1)",
                              "cascade K=50, fused (beta 1)", "cascade K=100, fused, beta tuned on half A",
                              "cascade K=200, fused, beta tuned on half A",
                              "both models' own vectors of every item, fused (oracle beta)"], day),
            "growth": table(["corpus", "pair"] + marks + ["collection native at the end"], growth),
            "fusions": table(["corpus", "pair", "better of staying and full re-embed", "cosines' weighted mean"]
                             + [f"{how} fusion" for how in d["corpora"]["wordnet"][0]["both_native_fusions"]],
                             fusions) if fusions else ""}


def cascade_hubs(d: dict) -> dict:
    """Per case (new or repeated queries), corpus and pair: at each stage the served fusion and the cascade without /
    with the hub penalty, and the bound, each as the difference to the better of staying and a full re-embed."""
    out = {}
    for case in ("new_queries", "repeated_queries"):
        rows, stages = [], []
        for corpus, pairs in d["corpora"].items():
            for r in pairs:
                c = r[case]
                best = max(c["staying"], c["full_reembed"])
                stages = [st["reembedded_percent"] for st in c["stages"]]
                rows.append([corpus, arrow(r["pair"]), f"{c['staying']:.4f}", f"{c['full_reembed']:.4f}"] + [
                    f"{st['served_no_penalty'] - best:+.4f} / {st['served'] - best:+.4f}; "
                    f"{st['cascade_no_penalty'] - best:+.4f} / {st['cascade'] - best:+.4f}" for st in c["stages"]]
                    + [f"{c['bound_no_penalty'] - best:+.4f} / {c['bound'] - best:+.4f}"])
        out[case] = table(["corpus", "old -> new", "staying", "full re-embed"]
                          + [f"{p}% re-embedded: served; cascade" for p in stages]
                          + ["both models' own vectors of every item"], rows)
    return out


def cascade_cost(d: dict) -> dict:
    """Per corpus and phase: the search's median and 90th-percentile milliseconds per query, its ratio to the plain
    search, the texts embedded per query and Recall@10 of the queries served."""
    names = {"plain": "plain search (no cascade)", "cold": "cascade, first time served",
             "warm": "cascade, same queries again", "plain_again": "plain search, after the cascades"}
    rows = []
    for corpus, r in d["corpora"].items():
        for name, p in r["phases"].items():
            rows.append([corpus, names[name], f"{p['median_ms']:.1f}", f"{p['p90_ms']:.1f}",
                         f"{p['ratio_to_plain']:.1f}x", f"{p['texts_per_query']:.1f}", f"{p['recall_at_10']:.2f}"])
        rows.append([corpus, "the new model encoding the query (each phase adds it)",
                     f"{r['query_encode_median_ms']:.1f}", "", "", "", ""])
    return {"phases": table(["corpus (store)", "phase", "median ms per query", "p90 ms", "vs plain (medians)",
                             "texts embedded per query", "Recall@10"], rows)}


def file_search(d: dict) -> dict:
    """Per size and segment count: the first search's and the median search's milliseconds, now and as before."""
    rows = [[f"{r['records']:,}", f"{r['segments']:,}", f"{r['first_ms_before']:.1f}", f"{r['first_ms_now']:.1f}",
             f"{r['median_ms_before']:.2f}", f"{r['median_ms_now']:.2f}", f"{r['ratio']:.1f}x"] for r in d["rows"]]
    return {"table": table(["records", "segments", "first search, as before (ms)", "first search, now (ms)",
                            "median search, as before (ms)", "median search, now (ms)", "as before / now"], rows)}


def gpu_embed(d: dict) -> dict:
    """Texts per second per model, device, precision and batch (medians, each run in brackets), against the CPU
    reference measured in the same run."""
    rows = []
    for m in d["models"]:
        for r in [dict(m["cpu"], vs_cpu=None, reference=True)] + m["rows"]:
            runs = "/".join(f"{x:,.0f}" for x in r["runs"])
            cos = r.get("lowest_cosine_to_fp32")
            rows.append([m["model"], r["device"] + (" (CPU reference)" if r.get("reference") else ""),
                         r["precision"], r["batch"], f"{r['texts']:,}", f"{r['texts_per_s']:,.0f} ({runs})",
                         "1.0x" if r["vs_cpu"] is None else f"{r['vs_cpu']:.1f}x",
                         "" if cos is None else f"{cos:.6f}"])
    return {"throughput": table(["model", "device", "precision", "batch", "texts", "texts/s (runs)", "vs CPU",
                                 "lowest cosine to fp32"], rows)}


def reembed_overhead(d: dict) -> dict:
    """`upgrade reembed`'s own seconds with an instant model: the job as it was against the job now."""
    rows = [[f"{r['blas_threads']}", f"{r['before_s']:.2f}", f"{r['now_s']:.2f}", f"{r['ratio']:.2f}x",
             f"{1000 * r['now_s'] / d['records']:.2f}"] for r in d["rows"]]
    return {"table": table(["BLAS threads", "as before, s", "now, s", "ratio", "ms per record now"], rows)}


def serve(d: dict) -> dict:
    """``vecbridge serve`` under load: each phase's rate and latency beside the store's own search, then the stage
    switches and the restart under load."""
    names = {"store_direct": "the store's own search, called directly", "search_vectors": "`/search`, vectors in",
             "search_texts": "`/search`, texts in", "embeddings": "`/v1/embeddings`, one text"}
    store = d["phases"]["store_direct"]["p99_ms"]
    def cpu(r):   # CPU ms per request: the service's processes / PostgreSQL's / the client threads' process
        if "cpu_ms_service" not in r:
            return "-"
        return f"{r['cpu_ms_service']:.2f} / {r['cpu_ms_postgres']:.2f} / {r['cpu_ms_clients']:.2f}"

    load = table(["", "requests", "queries/s", "p50 ms", "p99 ms", "p99 / store's", "failed", "load average",
                  "CPU ms per request: service / PostgreSQL / clients"],
                 [[names[k], f"{r['requests']:,}", f"{r['qps']:.0f}", f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}",
                   "" if k == "store_direct" else f"{r['p99_ms'] / store:.2f}x", r["failed"],
                   f"{r['load_before']:.1f}", cpu(r)]
                  for k, r in d["phases"].items() if k in names])
    sw, kill = d["phases"]["switching"], d["phases"]["kill_restart"]
    verbs = ", ".join(f"{s['verb']} {s['seconds']:.0f} s" + ("" if s["rc"] == 0 else f" (exit {s['rc']})")
                      for s in sw["switches"])
    events = table(["under load", "requests", "failed", "what else"],
                   [["`cutover`, `rollback`, `cutover` by other processes", f"{sw['requests']:,}", sw["failed"],
                     f"stages answering: {', '.join(sw['stages'])}; answers naming no stage or the wrong space: "
                     f"{sw['unnamed']}; {verbs}"],
                    ["the service killed (SIGKILL) and started again", f"{kill['requests']:,}", kill["failed"],
                     f"restarted in {kill['restart_s']:.1f} s; {kill['retried']} requests retried by their client, "
                     f"{kill['lost']} lost"]])
    return {"load": load, "events": events}


def continuous_refit(d: dict) -> dict:
    """The map in use at 25% and 50% re-embedded (continuous refit) against the start's map, per corpus and pair."""
    rows = []
    for r in d["results"]:
        for s in r["stages"]:
            if s["fraction"] < 0.25:
                continue
            rows.append([r["corpus"], f"{r['old']} -> {r['new']}", f"{s['fraction']:.0%}", f"{s['map_pairs']:,}",
                         f"{s['mapped_only_start']:.4f}", f"{s['mapped_only_refit']:.4f}",
                         f"{s['mapped_only_gain']:+.4f}",
                         f"{s['served_refit_on_mapped'] - s['served_start_on_mapped']:+.4f}",
                         f"{s['served_refit'] - s['served_start']:+.4f}"])
    return {"gains": table(["corpus", "pair", "re-embedded", "pairs of the map in use", "mapped only: start's map",
                            "mapped only: refitted", "gain", "served, queries of still-mapped records: gain",
                            "served, all queries: gain"], rows)}


def zipf_priorities(d: dict) -> dict:
    """Traffic-weighted served Recall@10 per priority (mean and sd over the popularity orders), per corpus and pair."""
    rows = []
    for corpus, results in d["results"].items():
        for r in results:
            for prio in ("random", "residual", "hubs", "queries"):
                rows.append([corpus, arrow(r["pair"]), prio]
                            + [f"{m:.3f} ({s:.3f})" for m, s in zip(r[prio]["mean"], r[prio]["sd"])]
                            + [f"{r['staying']['mean']:.3f}", f"{r['full_reembed']['mean']:.3f}"])
    fr = [f"{f:.0%} (sd)" for f in d["fractions"]]
    return {"served": table(["corpus", "pair", "priority", *fr, "staying", "full re-embed"], rows)}


def plan_calibration(d: dict) -> dict:
    """Per corpus and pair: each stage's prediction within the pool and at the collection's size, against what the
    whole collection then serves."""
    every = unique(row["stage"] for r in d["results"] for row in r["rows"])
    stages = [s for s in every if not s.endswith("cascade")]
    cascades = [s for s in every if s.endswith("cascade")]
    rows, casc = [], []
    for r in d["results"]:
        by = {row["stage"]: row for row in r["rows"]}
        rows.append([r["corpus"], arrow(r["pair"])]
                    + [f"{by[s]['at_size']:.3f} / {by[s]['measured']:.3f} ({by[s]['pool']:.3f})" if s in by else "-"
                       for s in stages])
        casc.append([r["corpus"], arrow(r["pair"])]
                    + [f"{by[s]['at_size']:.3f} / {by[s]['measured']:.3f}" if s in by else "-" for s in cascades])
    worst = [[c, f"{e['error']:.3f}", f"{e['mean_abs_error']:.3f}", f"{e['error_all']:.3f}", f"{e['error_pool']:.3f}"]
             + ([f"{e['cascade_error']:.3f}", f"{e['cascade_mean_abs_error']:.3f}"] if "cascade_error" in e else [])
             for c, e in d["max_abs_error"].items()]
    cascade_cols = ["the cascade: largest error", "mean error"] if cascades else []
    return {"stages": table(["corpus", "pair", *stages], rows),
            "cascade": table(["corpus", "pair", *cascades], casc),
            "worst": table(["corpus", "largest error at size", "mean error at size",
                            "largest, every pool record a distractor", "largest, the pool's own recall",
                            *cascade_cols], worst)}


def plan_calibration_auto(d: dict) -> dict:
    """The cascade with the count ``upgrade tune --rerank auto`` would keep: per corpus and pair, each stage's
    prediction at the collection's size / what the whole collection serves at the count the plan chose (in
    brackets); and the largest error per corpus."""
    cascades = unique(row["stage"] for r in d["results"] for row in r["rows"] if row["stage"].endswith("cascade"))
    rows = []
    for r in d["results"]:
        by = {row["stage"]: row for row in r["rows"]}
        rows.append([r["corpus"], arrow(r["pair"])] + [f"{by[s]['at_size']:.3f} / {by[s]['measured']:.3f} "
                                                       f"({by[s]['rerank']})" for s in cascades])
    worst = [[c, f"{e['cascade_error']:.3f}", f"{e['cascade_mean_abs_error']:.3f}"]
             for c, e in d["max_abs_error"].items()]
    return {"cascade": table(["corpus", "pair", *cascades], rows),
            "worst": table(["corpus", "the cascade: largest error", "mean error"], worst)}


RENDERERS = {"serve": serve, "align_real": align_real, "geh": geh, "geh_calibration": geh_calibration, "geh_timing": geh_timing,
             "unsupervised_robust": unsupervised_robust, "pgvector_search": pgvector_search, "minivec2vec": minivec2vec,
             "linking_retention": linking_retention, "text_gone": text_gone, "reproduced_starts": reproduced_starts,
             "quality_options": quality_options,
             "migrate": migrate,
             "rowwise": rowwise,
             "report_calibration": report_calibration, "connectors": connectors,
             "upgrade_curve": upgrade_curve, "map_validation": map_validation, "ray_scale": ray_scale,
             "record_stamps": record_stamps, "upgrade_stamps": upgrade_stamps, "cascade": cascade, "cascade_hubs": cascade_hubs,
             "cascade_hubs_k200": lambda d: {"new_queries": cascade_hubs(d)["new_queries"]}, "cascade_hubs_auto": lambda d: {"new_queries": cascade_hubs(d)["new_queries"]}, "cascade_cost": cascade_cost, "cascade_cost_q30_k100": cascade_cost, "cascade_cost_q30_k400": cascade_cost, "file_search": file_search, "gpu_embed": gpu_embed, "gpu_embed_cuda": gpu_embed,
             "reembed_overhead": reembed_overhead,
             "continuous_refit": continuous_refit, "zipf_priorities": zipf_priorities,
             "plan_calibration": plan_calibration, "text_gone_report": text_gone_report,
             "plan_calibration_auto": plan_calibration_auto}


# ------------------------------------------------------------------------------------------------------ main

def render() -> str:
    tables = {f"{stem}.{name}": text for stem, fn in RENDERERS.items() for name, text in fn(load(stem)).items()}
    template = TEMPLATE.read_text()
    used = PLACEHOLDER.findall(template)
    unknown, unused = sorted(set(used) - set(tables)), sorted(set(tables) - set(used))
    if unknown or unused:
        sys.exit(f"{TEMPLATE.name}: unknown placeholders {unknown}, tables never placed {unused}")
    return PLACEHOLDER.sub(lambda m: tables[m.group(1)], template)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if the README is not up to date")
    ap.add_argument("--readme", type=Path, default=README, help="the file to write or check (default: %(default)s)")
    args = ap.parse_args(argv)
    text = render()
    if not args.check:
        args.readme.write_text(text)
        print(f"wrote {args.readme}")
        return 0
    current = args.readme.read_text() if args.readme.exists() else ""
    if current == text:
        print(f"{args.readme} is up to date")
        return 0
    diff = list(difflib.unified_diff(current.splitlines(), text.splitlines(), "README (on disk)",
                                     "README (generated)", n=0, lineterm=""))
    changed = sum(1 for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---"))
    print(f"{args.readme} differs from what bench/make_readme.py generates ({changed} lines); "
          "put prose edits in bench/README.template.md (tables come from bench/results/*.json), "
          "then run python bench/make_readme.py")
    print("\n".join(diff[:60]) + ("\n..." if len(diff) > 60 else ""))
    return 1


if __name__ == "__main__":
    sys.exit(main())
