"""Measured alignments and checked migrations on the terminal: the evaluation table, the verify checks."""
from __future__ import annotations

from .console import console


def evaluation(result) -> None:
    """``result``: a :class:`vecbridge.results.Evaluation`."""
    from rich.table import Table

    table = Table(title=f"{result.n_pairs:,} {'held-out ' if result.held_out else ''}pairs")
    for col in ("map", "top-1", "mean rank", "mean cosine"):
        table.add_column(col, justify="right" if col != "map" else "left")
    for name, r in (("alignment", result.pairs), ("no map", result.no_map)):
        if r is not None:
            table.add_row(name, f"{r.top1:.3f}", f"{r.mean_rank:.2f}", f"{r.mean_cosine:.3f}")
    con = console()
    con.print(table)
    if result.retrieval is not None:
        r = result.retrieval
        retention = f"{r.retention:.3f}" if r.retention is not None else (r.unreliable or "unreliable")
        con.print(f"recall@{r.k}: mapped {r.recall_mapped:.3f} vs native {r.recall_native:.3f} -> "
                  f"retention {retention}; top-{r.k} overlap {r.overlap:.3f} ({r.n_queries:,} queries)")


def checks(result) -> None:
    """``result``: what :func:`vecbridge.jobs.verify` returns: one line per check."""
    con = console()
    for c in result["checks"]:
        mark = "[green]ok[/]  " if c["ok"] else "[red]FAIL[/]"
        con.print(f"{mark} {c['name']}: {c['detail']}", markup=True)
    if isinstance(result, dict) and result.get("space"):
        from .migration import space_lines

        space_lines(*result["space"].values())
