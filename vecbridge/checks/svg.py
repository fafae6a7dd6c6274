"""Tiny dependency-free SVG charts for self-contained HTML reports (line charts and histograms)."""
from __future__ import annotations

from html import escape

import numpy as np

W, H, PAD = 520, 260, 44
COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c"]


def _scale(v, lo, hi, a, b):
    return a + (b - a) * (0.5 if hi == lo else (v - lo) / (hi - lo))


def _frame(title: str, xlabel: str, ylabel: str, xlo, xhi, ylo, yhi, xlog=False) -> list[str]:
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" '
           f'aria-label="{escape(title)}">',
           f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{escape(title)}</text>',
           f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - 10}" y2="{H - PAD}" stroke="#444"/>',
           f'<line x1="{PAD}" y1="{H - PAD}" x2="{PAD}" y2="24" stroke="#444"/>',
           f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle" font-size="11">{escape(xlabel)}</text>',
           f'<text x="12" y="{H / 2}" text-anchor="middle" font-size="11" transform="rotate(-90 12 {H / 2})">'
           f'{escape(ylabel)}</text>']
    for t in np.linspace(ylo, yhi, 5):
        y = _scale(t, ylo, yhi, H - PAD, 24)
        out.append(f'<text x="{PAD - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="10">{t:.3g}</text>')
        out.append(f'<line x1="{PAD}" y1="{y:.1f}" x2="{W - 10}" y2="{y:.1f}" stroke="#eee"/>')
    ticks = np.geomspace(xlo, xhi, 5) if xlog and xlo > 0 else np.linspace(xlo, xhi, 5)
    for t in ticks:
        x = _scale(np.log10(t) if xlog else t, np.log10(xlo) if xlog else xlo, np.log10(xhi) if xlog else xhi,
                   PAD, W - 10)
        out.append(f'<text x="{x:.1f}" y="{H - PAD + 14}" text-anchor="middle" font-size="10">{t:.3g}</text>')
    return out


def line_chart(title: str, xlabel: str, ylabel: str, series: dict[str, tuple], *, xlog: bool = False,
               ylim: tuple | None = None) -> str:
    """``series``: name -> (xs, ys). Returns one <svg> element."""
    xs_all = np.concatenate([np.asarray(x, float) for x, _ in series.values()])
    ys_all = np.concatenate([np.asarray(y, float) for _, y in series.values()])
    xlo, xhi = float(xs_all.min()), float(xs_all.max())
    ylo, yhi = ylim if ylim else (float(np.nanmin(ys_all)), float(np.nanmax(ys_all)))
    out = _frame(title, xlabel, ylabel, xlo, xhi, ylo, yhi, xlog)
    fx = (lambda v: _scale(np.log10(v), np.log10(xlo), np.log10(xhi), PAD, W - 10)) if xlog else \
        (lambda v: _scale(v, xlo, xhi, PAD, W - 10))
    for c, (name, (x, y)) in enumerate(series.items()):
        color = COLORS[c % len(COLORS)]
        pts = " ".join(f"{fx(a):.1f},{_scale(b, ylo, yhi, H - PAD, 24):.1f}" for a, b in zip(x, y) if np.isfinite(b))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>')
        for a, b in zip(x, y):
            if np.isfinite(b):
                out.append(f'<circle cx="{fx(a):.1f}" cy="{_scale(b, ylo, yhi, H - PAD, 24):.1f}" r="3" fill="{color}"/>')
        out.append(f'<text x="{W - 14}" y="{36 + 14 * c}" text-anchor="end" font-size="11" fill="{color}">'
                   f'{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def histogram(title: str, xlabel: str, values, bins: int = 30) -> str:
    values = np.asarray(values, float)
    counts, edges = np.histogram(values, bins=bins)
    out = _frame(title, xlabel, "count", float(edges[0]), float(edges[-1]), 0.0, float(max(counts.max(), 1)))
    for cnt, a, b in zip(counts, edges[:-1], edges[1:]):
        x0 = _scale(a, edges[0], edges[-1], PAD, W - 10)
        x1 = _scale(b, edges[0], edges[-1], PAD, W - 10)
        y = _scale(cnt, 0, max(counts.max(), 1), H - PAD, 24)
        out.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 1, 1):.1f}" height="{H - PAD - y:.1f}" '
                   f'fill="{COLORS[0]}"/>')
    out.append("</svg>")
    return "\n".join(out)
