"""Rewritten and merged collections on the terminal: the dry-run plan, what was written, how fast."""
from __future__ import annotations

from .console import console


def plan(result) -> None:
    """``result``: :func:`vecbridge.jobs.migrate`'s dry run (its ``plan``); nothing was written."""
    con = console()
    p = result["plan"]
    con.print(f"[bold]plan[/] {p['source']} -> {p['target']}" + (f" (field {p['field']})" if p["field"] else ""),
              markup=True)
    con.print(f"  {p['count']:,} records, {p['source_dim']}d -> {p['target_dim']}d, metric {p['metric']}, "
              f"batches of {p['batch_size']:,}")
    con.print(f"  estimated read+map time {p['estimated_read_map_s']:.1f} s; target size about "
              f"{p['estimated_target_bytes'] / 1e6:,.1f} MB")
    for note in p["notes"]:
        con.print(f"  note: {note}")
    con.print("  nothing was written (dry run)")


def migrated(result) -> None:
    """``result``: :func:`vecbridge.jobs.migrate`'s :class:`~vecbridge.results.MigrationResult`."""
    con = console()
    where = result["target"] + (f" (field {result['field']})" if result["field"] else "")
    if result["resumed_from"] and not result["written"]:
        con.print(f"[bold green]done[/]: nothing was left to migrate; {where} holds all "
                  f"{result['resumed_from']:,} records of the earlier run ({result['seconds']:.1f} s)", markup=True)
        return
    rate = f" ({result['vectors_per_s']:,.0f} vectors/s)" if result["vectors_per_s"] else ""
    resumed = f", resumed after {result['resumed_from']:,}" if result["resumed_from"] else ""
    con.print(f"[bold green]migrated[/] {result['written']:,} records into {where} in "
              f"{result['seconds']:.1f} s{rate}{resumed}", markup=True)
    space_lines(result.get("space"))


def space_lines(*checks) -> None:
    """One line per space check that did not simply pass: overridden with --force, or not checked and why."""
    for check in checks:
        if not check or check["verdict"] == "ok":
            continue
        if check["forced"]:
            console().print(f"[bold yellow]space check overridden (--force)[/]: {check['reason']}", markup=True)
        elif check["verdict"] == "unchecked":
            console().print(f"space of {check['collection']} not checked: {check['reason']}")


def merged(result) -> None:
    """``result``: :func:`vecbridge.jobs.merge`'s :class:`~vecbridge.results.MergeResult`."""
    console().print(f"[bold green]merged[/] {result['a_count']:,} + {result['b_count']:,} records into "
                    f"{result['into']}: {result['count']:,} records, {result['linked']:,} linked pairs "
                    f"({result['policy']}), {result['renamed']:,} renamed ids", markup=True)
    space_lines(*(result.get("space") or {}).values())
