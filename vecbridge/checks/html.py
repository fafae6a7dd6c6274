"""Render a compatibility report as one self-contained HTML file (inline SVG plots, no external assets)."""
from __future__ import annotations

from html import escape

import numpy as np

from .svg import histogram, line_chart

_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:24px auto;color:#111}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}th{background:#f3f4f6}td:first-child{text-align:left}
.verdict{font-size:20px;font-weight:bold;padding:10px 14px;border-radius:6px;display:inline-block}
.GO{background:#dcfce7;color:#166534}.CAUTION{background:#fef9c3;color:#854d0e}.NO-GO{background:#fee2e2;color:#991b1b}
.plots{display:flex;flex-wrap:wrap;gap:12px}"""


def _row(cells) -> str:
    return "<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>"


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
    parts.append("<h2>Held-out quality</h2><table><tr><th>metric</th><th>value</th></tr>")
    for name, val in (("top-1 of the true partner", f"{ho['top1']:.3f}"), ("mean rank", f"{ho['mean_rank']:.2f}"),
                      ("mean cosine", f"{ho['mean_cosine']:.3f}"), ("held-out mean squared residual", f"{ho['residual']:.4g}"),
                      ("in-sample residual", f"{fit['residual']:.4g}"), ("seed 000 bound", f"{fit['bound']:.4g}"),
                      ("dot-product discrepancy delta", f"{fit['delta']:.4g}")):
        parts.append(_row([name, val]))
    parts.append("</table>")
    if "retrieval" in report:
        r = report["retrieval"]
        parts.append(f"<h2>Retrieval (Recall@{r['k']}, {r['n_queries']:,} new-model queries)</h2><table>"
                     "<tr><th>documents in the pool</th><th>mapped</th><th>re-embedded</th><th>retention</th></tr>")
        for size, ret, rm, rn in zip(r["pool_sizes"], r["retention"], r["recall_mapped"], r["recall_native"]):
            parts.append(_row([f"{int(size):,}", f"{rm:.3f}", f"{rn:.3f}", f"{ret:.3f}"]))
        parts.append(_row([f"{r['full_size']:,} (whole collection, predicted)", "", "", f"{r['predicted']:.3f}"]))
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
        parts.append(f"<h2>Neighbourhoods</h2><p>top-{no['k']} overlap of held-out items' neighbourhoods, mapped vs "
                     f"native: {no['overlap']:.3f} (no queries given, so recall retention was not measured)</p>")
    opt = report.get("options")
    if opt:
        rec = opt["recommendation"]
        parts.append(f"<h2>Options that keep more quality (target retention {opt['target']:.2f})</h2>"
                     f"<p><b>Recommended: {escape(rec['choice'])}</b> &mdash; {escape(rec['reason'])}</p><table>"
                     "<tr><th>option</th><th>retention@k</th><th>compute for the collection</th>"
                     "<th>extra storage</th></tr>")
        for o in sorted(rec["options"], key=lambda o: -o["retention"]):
            parts.append(_row([o["name"], f"{o['retention']:.3f}", f"{o['total_s']:.0f} s",
                               f"{o['extra_storage_bytes'] / 1e6:.1f} MB"]))
        parts.append("</table>")
    lc = report["learning_curve"]
    series = {"top-1": (lc["n_anchors"], lc["top1"])}
    if "retention" in lc:
        series["retention@k"] = (lc["n_anchors"], lc["retention"])
    parts.append("<h2>Plots</h2><div class='plots'>")
    parts.append(line_chart("Quality vs number of anchors", "anchors", "held-out value", series, xlog=True,
                            ylim=(0.0, 1.0)))
    edges = np.linspace(-1, 1, len(ho["cosine_histogram"]) + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    parts.append(histogram("Held-out cosine (mapped old vs new)", "cosine",
                           np.repeat(centres, ho["cosine_histogram"]), bins=len(centres)))
    sv = np.asarray(fit["singular_values"])
    parts.append(line_chart("Singular values of X^T Y", "index", "singular value",
                            {"spectrum": (np.arange(1, len(sv) + 1), sv)}))
    if opt:
        rc = opt["reembed_curve"]
        fr = [100 * f for f in rc["fractions"]]
        parts.append(line_chart("Retention vs fraction re-embedded", "% of items re-embedded", "retention@k",
                                {name: (fr, ys) for name, ys in rc["retention"].items()}, ylim=(0.0, 1.05)))
    parts.append("</div></body></html>")
    return "\n".join(parts)
