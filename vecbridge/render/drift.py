"""Drift checks on the terminal: one line per run, the history as a table (:mod:`.html` plots it)."""
from __future__ import annotations

from .console import console


def check(result: dict) -> None:
    """``result``: one run of :func:`vecbridge.jobs.drift.run_check`."""
    from rich.markup import escape

    m = result["measures"]

    def measure(k):   # a ratio over a near-zero native recall is no measurement: say so, never print the ratio
        if k == "retention" and m.get("retention_unreliable"):
            return f"retention unreliable (native recall {m.get('recall_native', 0.0):.3f} too low to compare)"
        return f"{k} {m[k]:.4g}"

    shown = ", ".join(measure(k) for k in ("residual_ratio", "retention", "centroid_shift", "mmd_pvalue", "top1")
                      if k in m)
    status = "[red]BREACH[/]" if result["breached"] else "[green]ok[/]"
    console().print(f"{status} {escape(result['name'])}: {escape(shown or 'reference sample saved')}", markup=True)


def history(rows: list[dict], name: str) -> None:
    """``rows``: the check ``name``'s past runs (:class:`vecbridge.runtime.drift_store.History`)."""
    from rich import box
    from rich.table import Table

    # figures in a table that fits a terminal of 80 columns; a breach's reason is a sentence, printed under it
    table = Table(title=f"drift history: {name} ({len(rows)} runs)", box=box.SIMPLE_HEAD)
    for col in ("run", "at (UTC)", "residual", "retention", "centroid", "MMD p", "status"):
        table.add_column(col, no_wrap=True)

    def fmt(m, k):
        return "-" if k not in m else "unreliable" if m[k] is None else f"{m[k]:.4g}"

    for r in rows:
        m = r["measures"]
        table.add_row(str(r["id"]), r["at"][:16].replace("T", " "), fmt(m, "residual_ratio"), fmt(m, "retention"),
                      fmt(m, "centroid_shift"), fmt(m, "mmd_pvalue"), "BREACH" if r["breached"] else "ok")
    con = console()
    con.print(table)
    for r in rows:
        if r["breached"]:
            con.print(f"run {r['id']}: {r['reason']}")
