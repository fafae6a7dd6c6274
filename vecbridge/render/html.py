"""Render a compatibility report as one self-contained HTML file (matplotlib plots inlined as SVG, no external
assets)."""
from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

import numpy as np

from .report import partner_of, predicted_top1
from .svg import histogram_counts, line_chart

if TYPE_CHECKING:
    from ..results import Report

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


def render_html(report: "Report | dict") -> str:
    """The report as one HTML page; ``report``: a :class:`~vecbridge.results.Report` (or its ``as_dict()``, a
    ``--json`` output read back)."""
    from .. import results

    rep = report if isinstance(report, results.Report) else results.Report.from_dict(report)
    v = rep.verdict
    ho, fit, corr = rep.held_out, rep.fit, rep.correspondences
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>vecbridge compatibility report</title>"
             f"<style>{_CSS}</style></head><body>",
             "<h1>vecbridge compatibility report</h1>",
             f"<p>{escape(rep.old)} &rarr; {escape(str(rep.new))}</p>",
             f"<div id='verdict' class='verdict {v.verdict}'>{v.verdict}</div>",
             f"<p id='reason'>{escape(v.reason)}</p>"]
    for a in rep.advice:
        parts.append(f"<p>&#9656; {escape(a)}</p>")
    parts.append(f"<h2>Correspondences</h2><p>{escape(corr.mode)}: {escape(corr.reason)}; "
                 f"{corr.train:,} pairs to fit, {corr.held_out:,} held out.</p>")
    pool = ho.pool
    parts.append(f"<h2>Held-out quality</h2><p>Top-1 and mean rank: each held-out item's mapped old vector "
                 f"searched among the new vectors of the {pool:,} held-out items.</p>"
                 "<table><tr><th>metric</th><th>value</th></tr>")
    rows = [(f"top-1 of the {partner_of(corr)} (among {pool:,} held-out items)", f"{ho.top1:.3f}")]
    if ho.top1_predicted is not None and ho.full_size > pool:
        how = "measured" if ho.top1_curve.pool_sizes[-1] >= ho.full_size else "predicted"
        rows.append((f"top-1 among the collection's {ho.full_size:,} items ({how})",
                     escape(predicted_top1(ho))))
    rows += [(f"mean rank (among {pool:,})", f"{ho.mean_rank:.2f}"), ("mean cosine", f"{ho.mean_cosine:.3f}"),
             ("held-out mean squared residual", f"{ho.residual:.4g}"),
             ("in-sample residual", f"{fit.residual:.4g}"),
             ("Procrustes bound (When Embedding Models Meet, 2025)", f"{fit.bound:.4g}"),
             ("dot-product discrepancy delta", f"{fit.delta:.4g}")]
    for name, val in rows:
        parts.append(_row([name, val]))
    parts.append("</table>")
    if rep.retrieval is not None:
        r = rep.retrieval
        parts.append(f"<h2>Retrieval (Recall@{r.k}, {r.n_queries:,} new-model queries)</h2>")
        if r.unreliable and r.measured is None:
            parts.append(f"<p><b>Recall retention not measured</b>: {escape(r.unreliable)}. The queries hardly "
                         f"find their relevant documents even among the new collection's own vectors.</p>")
        parts.append("<table><tr><th>documents in the pool</th><th>mapped</th><th>re-embedded</th>"
                     "<th>retention</th></tr>")
        for size, ret, rm, rn in zip(r.pool_sizes, r.retention, r.recall_mapped, r.recall_native):
            parts.append(_row([f"{int(size):,}", f"{rm:.3f}", f"{rn:.3f}", f"{ret:.3f}"]))
        parts.append(_row([f"{r.full_size:,} (whole collection, predicted)", "", "", _f(r.predicted)]))
        parts.append("</table>")
    if rep.retrieval_unsupervised is not None:
        r = rep.retrieval_unsupervised
        parts.append(f"<h2>Retrieval (unsupervised correspondences)</h2><p>Recall@{r.k} of {r.n_queries:,} "
                     f"new-model queries over {r.pool:,} mapped old vectors: {r.recall_mapped:.3f}"
                     + (f"; predicted over all {r.full_size:,}: {r.predicted:.3f}" if r.predicted is not None else "")
                     + ". Retention against a re-embed needs true pairs.</p>")
    if rep.three_way is not None:
        t = rep.three_way
        parts.append("<h2>Three-way comparison</h2><table><tr><th>setting</th><th>Recall@k</th></tr>")
        for name, val in (("stay on the old model", t.stay_on_old_model), ("mapped upgrade", t.mapped_upgrade),
                          ("full re-embed", t.full_re_embed)):
            parts.append(_row([name, "not measurable without true pairs" if val is None else f"{val:.3f}"]))
        parts.append("</table>")
    if rep.neighbourhood_overlap is not None:
        no = rep.neighbourhood_overlap
        among = f" (among {no.pool:,} held-out items)" if no.pool else ""
        parts.append(f"<h2>Neighbourhoods</h2><p>top-{no.k} overlap of held-out items' neighbourhoods{among}, "
                     f"mapped vs native: {no.overlap:.3f} (no queries given, so recall retention was not "
                     f"measured)</p>")
    opt = rep.options
    if opt is not None:
        rec = opt.recommendation
        note = opt.size_note
        parts.append(f"<h2>Options that keep more quality (target retention {opt.target:.2f})</h2>"
                     f"<p><b>Recommended: {escape(rec.choice)}</b> &mdash; {escape(rec.reason)}</p>"
                     + (f"<p>Retention {escape(note)}; the plain orthogonal map's row is the headline figure.</p>"
                        if note else "")
                     + "<table><tr><th>option</th><th>retention@k (collection)</th><th>measured on the pool</th>"
                     "<th>compute for the collection</th><th>extra storage</th><th>note</th></tr>")
        for o in sorted(rec.options, key=lambda o: -o.retention):
            measured = o.retention if o.retention_measured is None else o.retention_measured
            parts.append(_row([o.name, f"{o.retention:.3f}", _f(measured),
                               f"{o.total_s:.0f} s", f"{o.extra_storage_bytes / 1e6:.1f} MB",
                               ("ruled out: " + o.excluded) if o.excluded else ""]))
        parts.append("</table>")
    lc = rep.learning_curve
    series = {"top-1": (lc.n_anchors, lc.top1)}
    if lc.retention is not None:
        series["retention@k"] = (lc.n_anchors, lc.retention)
    parts.append("<h2>Plots</h2><div class='plots'>")
    parts.append(line_chart("Quality vs number of anchors", "anchors (log scale)",
                            f"held-out value (among {pool:,})", series, xlog=True, ylim=(0.0, 1.02)))
    edges = np.linspace(-1, 1, len(ho.cosine_histogram) + 1)
    parts.append(histogram_counts("Held-out cosine (mapped old vs new)", "cosine", edges, ho.cosine_histogram))
    sv = np.asarray(fit.singular_values)
    parts.append(line_chart(r"Singular values of $X^{\top} Y$", "index", "singular value",
                            {"spectrum": (np.arange(1, len(sv) + 1), sv)}))
    if opt is not None:
        rc = opt.reembed_curve
        fr = [100 * f for f in rc.fractions]
        parts.append(line_chart("Retention vs fraction re-embedded", "% of items re-embedded", "retention@k",
                                {name.replace("_", " "): (fr, ys) for name, ys in rc.retention.items()}))
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
