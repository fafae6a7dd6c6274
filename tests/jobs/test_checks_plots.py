"""The report's plots: matplotlib, inline SVG, nice ticks, nothing clipped, legends clear of the lines."""
from __future__ import annotations

import re

import numpy as np

from vecbridge.render import svg


def _inside(fig, artist, tol=1.0):
    bb, fb = artist.get_window_extent(), fig.bbox
    return bb.x0 >= fb.x0 - tol and bb.y0 >= fb.y0 - tol and bb.x1 <= fb.x1 + tol and bb.y1 <= fb.y1 + tol


def _nice(ticks) -> bool:
    """Evenly spaced ticks whose step is 1, 2, 2.5 or 5 times a power of ten."""
    t = np.asarray(ticks, float)
    step = np.diff(t)
    if len(step) == 0 or not np.allclose(step, step[0], rtol=1e-6):
        return False
    mant = step[0] / 10 ** np.floor(np.log10(step[0]))
    return any(abs(mant - m) < 1e-6 for m in (1, 2, 2.5, 5, 10))


def test_line_chart_has_nice_ticks_and_nothing_clipped():
    sv = np.concatenate([np.linspace(40, 2, 380), [3e-15, 2e-15, 1.27e-15, 1e-16]])
    fig = svg.line_figure("Singular values", "index", "singular value", {"spectrum": (np.arange(1, 385), sv)})
    fig.draw_without_rendering()
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    assert _nice([t for t in ax.get_xticks() if lo <= t <= hi])
    lo, hi = ax.get_ylim()
    assert _nice([t for t in ax.get_yticks() if lo <= t <= hi])
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    shown = [t for t in ax.get_xticklabels() if x0 <= t.get_position()[0] <= x1] + \
        [t for t in ax.get_yticklabels() if y0 <= t.get_position()[1] <= y1]   # drawn ticks only
    texts = [*shown, ax.xaxis.label, ax.yaxis.label, ax.title, ax.yaxis.get_offset_text()]
    for t in texts:
        if t.get_text():
            assert _inside(fig, t), t.get_text()
    assert not any("e-15" in t.get_text() for t in ax.get_yticklabels())


def test_legend_does_not_cover_the_lines():
    xs = [25, 50, 100, 200, 500, 1000]
    series = {"top-1": (xs, [0.2, 0.5, 0.8, 0.95, 0.99, 1.0]), "retention@k": (xs, [0.3, 0.5, 0.7, 0.8, 0.85, 0.9])}
    fig = svg.line_figure("Quality vs anchors", "anchors", "held-out value", series, xlog=True, ylim=(0, 1))
    fig.draw_without_rendering()
    ax = fig.axes[0]
    leg = ax.get_legend() or fig.legends[0]
    lb, ab = leg.get_window_extent(), ax.get_window_extent()
    overlap_w = min(lb.x1, ab.x1) - max(lb.x0, ab.x0)
    overlap_h = min(lb.y1, ab.y1) - max(lb.y0, ab.y0)
    assert overlap_w <= 0 or overlap_h <= 0          # the legend sits outside the plotting area
    assert _inside(fig, leg)
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels and not any(re.search(r"\.\d", s) for s in labels)   # 100, 1000, not 59.5 or 141


def test_run_axis_uses_integer_ticks():
    fig = svg.line_figure("retention", "run", "retention", {"retention": ([1, 2, 3, 4, 5, 6, 7], [0.9] * 7)})
    fig.draw_without_rendering()
    ticks = fig.axes[0].get_xticks()
    assert np.allclose(ticks, np.round(ticks))


def test_svg_output_is_inline_and_self_contained():
    a = svg.line_chart("A", "x", "y", {"s": ([1, 2, 3], [1.0, 2.0, np.nan])})
    b = svg.histogram_counts("B", "cosine", np.linspace(-1, 1, 21), np.arange(20))
    for s in (a, b):
        assert s.startswith("<svg") and s.rstrip().endswith("</svg>")
        assert "<?xml" not in s and "<!DOCTYPE" not in s
        assert "http" not in s.replace("http://www.w3.org", "")
    ids_a = set(re.findall(r'id="([^"]+)"', a))
    ids_b = set(re.findall(r'id="([^"]+)"', b))
    assert ids_a and not ids_a & ids_b             # two charts in one page never share an element id
    for ref in re.findall(r'(?:href="#|url\(#)([^")]+)', a):
        assert ref in ids_a


def test_hand_drawn_code_is_gone():
    import inspect

    src = inspect.getsource(svg)
    assert "matplotlib" in src and "<polyline" not in src and "_frame" not in src
