"""Fitted alignments and links on the terminal: what was saved, from what, and how it validated."""
from __future__ import annotations

from .console import console
from .models import print_throughput


def fitted(summary: dict) -> None:
    """``summary``: ``vecbridge fit``'s JSON (the artifact's path and metadata)."""
    f = summary["fit"]
    con = console()
    anchors = summary.get("anchors", {})
    examined = anchors.get("n_examined")
    if anchors.get("pseudo_pairs"):   # no true pair behind this map: say how it was made, never "from N pairs"
        made = (f"without pairs ({anchors.get('method')} on {anchors.get('n_source', 0):,} + "
                f"{anchors.get('n_target', 0):,} unpaired vectors)")
    else:
        made = f"from {f['n_pairs']:,} pairs" + (f" ({examined:,} source records examined)" if examined else "")
    con.print(f"[bold green]saved[/] {summary['alignment']}: {summary['kind']} map {int(summary['source_dim'])}d -> "
              f"{int(summary['target_dim'])}d {made}", markup=True)
    validation(con, summary.get("validation"))
    refined = summary.get("refinement")
    if refined:   # GEH's links, refined before the fit
        con.print(f"  refined: {refined['pairs']:,} mutual nearest pairs from {refined['links']:,} GEH links"
                  if refined.get("kept") else f"  not refined: {refined.get('why', 'the links kept')}")
    if "bound" in f:
        con.print(f"  in-sample mean squared residual {f['residual']:.4g} (Procrustes bound {f['bound']:.4g}, "
                  f"dot-product discrepancy delta {f['delta']:.4g})")
    if summary.get("is_projection"):
        con.print("  [yellow]note:[/] the source has more dimensions than the target: this map is a projection",
                  markup=True)


def linked(summary: dict) -> None:
    """``summary``: ``vecbridge link``'s JSON."""
    con = console()
    con.print(f"[bold green]linked[/] {summary['n']:,} pairs ({summary['mode']}, mean confidence "
              f"{summary['mean_confidence']:.2f}) -> {summary['links']}", markup=True)
    print_throughput(summary.get("model_run"), con)
    validation(con, summary.get("validation"))
    if summary.get("mode") == "geh":   # the links are cut for precision; a map wants them refined
        con.print("  for a map, `fit --pairs geh:SEEDS` refines these links over both collections first (`fit --pairs "
                  "file:LINKS` fits them as they are)")


def validation(con, validation) -> None:
    """One line on the label-free validation of an unsupervised or seed-grown result, if it had one."""
    from rich.markup import escape

    if not validation:
        return
    if validation.get("passed"):
        con.print(f"  validation passed: score {validation['score']:.2f} >= {validation['threshold']:.2f} "
                  f"({escape(validation['reason'])})")
        caveat(con, validation)
    else:
        con.print(f"  [bold red]validation FAILED[/] (kept because of --force): score {validation['score']:.2f} < "
                  f"{validation['threshold']:.2f} ({escape(validation['reason'])})", markup=True)


def caveat(con, validation: dict) -> None:
    """What a map that passed without true pairs costs: its warning (few rows), else its note (they say the same,
    the warning louder); nothing for other maps."""
    from rich.markup import escape

    if validation.get("warning"):
        con.print(f"  [bold yellow]warning:[/] {escape(validation['warning'])}", markup=True)
    elif validation.get("note"):
        con.print(f"  [yellow]note:[/] {escape(validation['note'])}", markup=True)
