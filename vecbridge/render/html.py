"""Render a compatibility report as one self-contained HTML file (matplotlib plots inlined as SVG, no external
assets)."""
from __future__ import annotations

from html import escape

import numpy as np

from .svg import histogram_counts, line_chart

_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:24px auto;color:#111}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}th{background:#f3f4f6}td:first-child{text-align:left}
.verdict{font-size:20px;font-weight:bold;padding:10px 14px;border-radius:6px;display:inline-block}
.GO{background:#dcfce7;color:#166534}.CAUTION{background:#fef9c3;color:#854d0e}.NO-GO{background:#fee2e2;color:#991b1b}
.plots{display:flex;flex-wrap:wrap;gap:12px}"""


def _row(cells) -> str:
    return "<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>"


def _f(v, fmt: str = ".3f", none: str = "unreliable") -> str:
    return none if v is None else format(v, fmt)


def render_html(report: dict) -> str:
    v = report["verdict"]
    ho, fit, corr = report["held_out"], report["fit"], report["correspondences"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>vecbridge compatibility report</title>"
             f"<style>{_CSS}</style></head><body>",
             "<h1>vecbridge compatibility report</h1>",
             f"<p>{escape(report['old'])} &rarr; {escape(str(report['new']))}</p>",
             f"<div id='verdict' class='verdict {v['verdict']}'>{v['verdict']}</div>",
             f"<p id='reason'>{escape(v['reason'])}</p>"]
    for a in report.get("advice", []):
        parts.append(f"<p>&#9656; {escape(a)}</p>")
    parts.append(f"<h2>Correspondences</h2><p>{escape(corr['mode'])}: {escape(corr['reason'])}; "
                 f"{corr['train']:,} pairs to fit, {corr['held_out']:,} held out.</p>")
    pool = ho.get("pool", corr["held_out"])
    parts.append(f"<h2>Held-out quality</h2><p>Top-1 and mean rank: each held-out item's mapped old vector "
                 f"searched among the new vectors of the {pool:,} held-out items.</p>"
                 "<table><tr><th>metric</th><th>value</th></tr>")
    rows = [(f"top-1 of the true partner (among {pool:,} held-out items)", f"{ho['top1']:.3f}")]
    if ho.get("top1_predicted") is not None and ho.get("full_size", 0) > pool:
        how = "measured" if ho.get("top1_curve", {}).get("pool_sizes", [0])[-1] >= ho["full_size"] else "predicted"
        rows.append((f"top-1 among the collection's {ho['full_size']:,} items ({how})", f"{ho['top1_predicted']:.3f}"))
    rows += [(f"mean rank (among {pool:,})", f"{ho['mean_rank']:.2f}"), ("mean cosine", f"{ho['mean_cosine']:.3f}"),
             ("held-out mean squared residual", f"{ho['residual']:.4g}"),
             ("in-sample residual", f"{fit['residual']:.4g}"),
             ("Procrustes bound (When Embedding Models Meet, 2025)", f"{fit['bound']:.4g}"),
             ("dot-product discrepancy delta", f"{fit['delta']:.4g}")]
    for name, val in rows:
        parts.append(_row([name, val]))
    parts.append("</table>")
    if "retrieval" in report:
        r = report["retrieval"]
        parts.append(f"<h2>Retrieval (Recall@{r['k']}, {r['n_queries']:,} new-model queries)</h2>")
        if r.get("unreliable") and r.get("measured") is None:
            parts.append(f"<p><b>Recall retention not measured</b>: {escape(r['unreliable'])}. The queries hardly "
                         f"find their relevant documents even among the new collection's own vectors.</p>")
        parts.append("<table><tr><th>documents in the pool</th><th>mapped</th><th>re-embedded</th>"
                     "<th>retention</th></tr>")
        for size, ret, rm, rn in zip(r["pool_sizes"], r["retention"], r["recall_mapped"], r["recall_native"]):
            parts.append(_row([f"{int(size):,}", f"{rm:.3f}", f"{rn:.3f}", f"{ret:.3f}"]))
        parts.append(_row([f"{r['full_size']:,} (whole collection, predicted)", "", "", _f(r["predicted"])]))
        parts.append("</table>")
    if "retrieval_unsupervised" in report:
        r = report["retrieval_unsupervised"]
        parts.append(f"<h2>Retrieval (unsupervised correspondences)</h2><p>Recall@{r['k']} of {r['n_queries']:,} "
                     f"new-model queries over {r['pool']:,} mapped old vectors: {r['recall_mapped']:.3f}. Retention "
                     f"against a re-embed needs true pairs.</p>")
    if "three_way" in report:
        t = report["three_way"]
        parts.append("<h2>Three-way comparison</h2><table><tr><th>setting</th><th>Recall@k</th></tr>")
        for name, key in (("stay on the old model", "stay_on_old_model"), ("mapped upgrade", "mapped_upgrade"),
                          ("full re-embed", "full_re_embed")):
            parts.append(_row([name, "not measurable without true pairs" if t[key] is None else f"{t[key]:.3f}"]))
        parts.append("</table>")
    if "neighbourhood_overlap" in report:
        no = report["neighbourhood_overlap"]
        among = f" (among {no['pool']:,} held-out items)" if no.get("pool") else ""
        parts.append(f"<h2>Neighbourhoods</h2><p>top-{no['k']} overlap of held-out items' neighbourhoods{among}, "
                     f"mapped vs native: {no['overlap']:.3f} (no queries given, so recall retention was not "
                     f"measured)</p>")
    opt = report.get("options")
    if opt:
        rec = opt["recommendation"]
        note = opt.get("size_note")
        parts.append(f"<h2>Options that keep more quality (target retention {opt['target']:.2f})</h2>"
                     f"<p><b>Recommended: {escape(rec['choice'])}</b> &mdash; {escape(rec['reason'])}</p>"
                     + (f"<p>Retention {escape(note)}; the plain orthogonal map's row is the headline figure.</p>"
                        if note else "")
                     + "<table><tr><th>option</th><th>retention@k (collection)</th><th>measured on the pool</th>"
                     "<th>compute for the collection</th><th>extra storage</th><th>note</th></tr>")
        for o in sorted(rec["options"], key=lambda o: -o["retention"]):
            parts.append(_row([o["name"], f"{o['retention']:.3f}", _f(o.get("retention_measured", o["retention"])),
                               f"{o['total_s']:.0f} s", f"{o['extra_storage_bytes'] / 1e6:.1f} MB",
                               ("ruled out: " + o["excluded"]) if o.get("excluded") else ""]))
        parts.append("</table>")
    lc = report["learning_curve"]
    series = {"top-1": (lc["n_anchors"], lc["top1"])}
    if "retention" in lc:
        series["retention@k"] = (lc["n_anchors"], lc["retention"])
    parts.append("<h2>Plots</h2><div class='plots'>")
    parts.append(line_chart("Quality vs number of anchors", "anchors (log scale)",
                            f"held-out value (among {pool:,})", series, xlog=True, ylim=(0.0, 1.02)))
    edges = np.linspace(-1, 1, len(ho["cosine_histogram"]) + 1)
    parts.append(histogram_counts("Held-out cosine (mapped old vs new)", "cosine", edges, ho["cosine_histogram"]))
    sv = np.asarray(fit["singular_values"])
    parts.append(line_chart(r"Singular values of $X^{\top} Y$", "index", "singular value",
                            {"spectrum": (np.arange(1, len(sv) + 1), sv)}))
    if opt:
        rc = opt["reembed_curve"]
        fr = [100 * f for f in rc["fractions"]]
        parts.append(line_chart("Retention vs fraction re-embedded", "% of items re-embedded", "retention@k",
                                {name.replace("_", " "): (fr, ys) for name, ys in rc["retention"].items()}))
    parts.append("</div></body></html>")
    return "\n".join(parts)


def drift_history_html(name: str, rows: list[dict]) -> str:
    """Self-contained HTML: one chart per measure over the runs, breaches listed."""
    charts = []
    for key in ("residual_ratio", "retention", "centroid_shift", "mmd_pvalue", "top1"):
        pts = [(r["id"], r["measures"][key]) for r in rows if r["measures"].get(key) is not None]
        if pts:
            xs, ys = zip(*pts)
            charts.append(line_chart(key.replace("_", " "), "run", key.replace("_", " "), {key: (list(xs), list(ys))}))
    breaches = "".join(f"<li>run {r['id']} at {escape(r['at'])}: {escape(r['reason'])}</li>"
                       for r in rows if r["breached"])
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>drift: {escape(name)}</title></head>"
            f"<body style='font-family:system-ui,sans-serif'><h1>drift history: {escape(name)}</h1>"
            f"<p>{len(rows)} runs, {sum(r['breached'] for r in rows)} breaches</p>"
            f"<div style='display:flex;flex-wrap:wrap;gap:12px'>{''.join(charts)}</div>"
            f"<ul id='breaches'>{breaches}</ul></body></html>")
