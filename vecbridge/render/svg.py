"""Charts for the self-contained HTML reports, drawn with matplotlib and inlined as SVG (no external files).

Each chart is a :class:`matplotlib.figure.Figure` made directly (never through ``pyplot``, so no display and no
global backend state is touched; saving to SVG needs no GUI), laid out with ``constrained`` layout so no tick or
axis label is clipped, with ticks on round values (:class:`~matplotlib.ticker.MaxNLocator`, steps 1, 2, 2.5, 5) and
the legend outside the plotting area so it never covers a line. :func:`to_svg` returns the ``<svg>`` element alone
(no XML prolog, no metadata) with its element ids made unique, so several charts can live in one HTML page.
"""
from __future__ import annotations

import io
import itertools
import re

import numpy as np

COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"]
SIZE = (5.6, 3.3)           # inches at 100 dpi: about 540 x 320 px, two charts side by side in the report
_counter = itertools.count(1)


def _figure(title: str, xlabel: str, ylabel: str):
    from matplotlib.figure import Figure

    fig = Figure(figsize=SIZE, dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=11, fontweight="bold")
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(True, color="#e5e7eb", linewidth=0.7)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


def _nice_ticks(ax, *, xlog: bool = False, integer_x: bool = False) -> None:
    from matplotlib.ticker import (
        FuncFormatter,
        LogLocator,
        MaxNLocator,
        NullFormatter,
        ScalarFormatter,
    )

    steps = [1, 2, 2.5, 5, 10]
    if xlog:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=7, steps=steps, integer=integer_x))
        fx = ScalarFormatter(useOffset=False)
        fx.set_powerlimits((-3, 5))
        ax.xaxis.set_major_formatter(fx)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=steps))
    fy = ScalarFormatter(useOffset=False)
    fy.set_powerlimits((-3, 5))
    ax.yaxis.set_major_formatter(fy)


def _legend(fig, ax) -> None:
    """Outside the plotting area, under it: never over a line, whatever the data do."""
    handles, labels = ax.get_legend_handles_labels()
    if len(handles) > 1:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(handles), 3), fontsize=8,
                   frameon=False)


def line_figure(title: str, xlabel: str, ylabel: str, series: dict[str, tuple], *, xlog: bool = False,
                ylim: tuple | None = None, integer_x: bool | None = None):
    """A line chart as a matplotlib Figure. ``series``: name -> (xs, ys); None or NaN values are gaps.
    ``integer_x``: ticks on whole numbers only (default: when every x is a whole number, e.g. run ids)."""
    fig, ax = _figure(title, xlabel, ylabel)
    all_x = []
    for c, (name, (xs, ys)) in enumerate(series.items()):
        x = np.asarray(xs, dtype=float)
        y = np.array([np.nan if v is None else v for v in ys], dtype=float)
        all_x.append(x)
        ax.plot(x, y, color=COLORS[c % len(COLORS)], linewidth=1.8, label=name,
                marker="o" if len(x) <= 40 else None, markersize=3.5)
    xs_all = np.concatenate(all_x) if all_x else np.zeros(0)
    if integer_x is None:
        integer_x = bool(len(xs_all)) and bool(np.all(np.isfinite(xs_all))) and bool(np.all(xs_all == np.round(xs_all)))
    _nice_ticks(ax, xlog=xlog, integer_x=integer_x)
    if integer_x and len(xs_all) and np.ptp(xs_all) < 2:   # one or two runs: whole numbers on the axis, not 1.95
        ax.set_xlim(xs_all.min() - 1, xs_all.max() + 1)
    if ylim is not None:
        ax.set_ylim(*ylim)
    _legend(fig, ax)
    return fig


def histogram_figure(title: str, xlabel: str, edges, counts):
    """Bars of pre-binned ``counts`` over the bin ``edges`` (len(counts) + 1 edges)."""
    fig, ax = _figure(title, xlabel, "count")
    edges, counts = np.asarray(edges, float), np.asarray(counts, float)
    ax.stairs(counts, edges, fill=True, color=COLORS[0], alpha=0.85)
    ax.set_xlim(edges[0], edges[-1])
    _nice_ticks(ax)
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10], integer=True))
    return fig


def to_svg(fig, label: str | None = None) -> str:
    """The figure as one inline ``<svg>`` element: no XML prolog or metadata, ids unique to this chart."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "vecbridge"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    prefix = f"vb{next(_counter)}-"
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', text)
    text = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}{m.group(1)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})", text)
    if label:
        from html import escape

        plain = re.sub(r"[${}]", "", label.replace("\\top", "T"))   # mathtext markup out of the spoken label
        text = text.replace("<svg ", f'<svg role="img" aria-label="{escape(plain)}" ', 1)
    return text.strip() + "\n"


def line_chart(title: str, xlabel: str, ylabel: str, series: dict[str, tuple], *, xlog: bool = False,
               ylim: tuple | None = None) -> str:
    """:func:`line_figure` as one inline ``<svg>`` element."""
    return to_svg(line_figure(title, xlabel, ylabel, series, xlog=xlog, ylim=ylim), title)


def histogram_counts(title: str, xlabel: str, edges, counts) -> str:
    """:func:`histogram_figure` as one inline ``<svg>`` element."""
    return to_svg(histogram_figure(title, xlabel, edges, counts), title)
