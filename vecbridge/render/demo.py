"""The demo on the terminal: the migration, Recall@10 of each way to serve, the staged upgrade."""
from __future__ import annotations

from .console import console


def demo(r: dict) -> None:
    """``r``: what :func:`vecbridge.jobs.demo.run_demo` measured."""
    from rich.table import Table

    con = console()
    m = r["migration"]
    con.print(f"migrated {m['written']:,} records into {r['new_collection']} in {m['seconds']:.2f} s; "
              f"verify: {'ok' if m['verified'] else 'FAILED'}")
    rec = r["recall_at_10"]
    table = Table(title="Recall@10, 500 held-out queries over the 1,500-document collection")
    table.add_column("setting")
    table.add_column("recall@10", justify="right")
    table.add_row("stay on the old model (MiniLM queries over OLD)", f"{rec['stay_on_old_model']:.3f}")
    table.add_row("new-model queries over OLD, no map", f"{rec['new_queries_no_map']:.3f}")
    table.add_row("[bold]new-model queries over migrated NEW (vecbridge)[/]",
                  f"[bold]{rec['new_queries_migrated']:.3f}[/]")
    table.add_row("new-model queries over OLD wrapped (nothing rewritten)", f"{rec['new_queries_wrapped']:.3f}")
    table.add_row("full re-embed with the new model (reference)", f"{rec['full_re_embed']:.3f}")
    con.print(table)
    con.print(f"alignment: {r['alignment']} (fitted on {r['items_re_embedded']:,} re-embedded items of "
              f"{r['items_total']:,}); wrapped search returns the same results as the migrated collection: "
              f"{r['wrapped_equals_migrated']}")
    con.print(f"recall retention@10 vs a full re-embed: [bold]{r['recall_retention_at_10']:.3f}[/]; "
              f"top-10 overlap with the re-embedded index {r['top10_overlap']:.3f}")
    if rec["new_queries_migrated"] < rec["stay_on_old_model"]:
        con.print(f"[yellow]note:[/] mapped vectors alone serve {rec['new_queries_migrated']:.3f}, below staying on "
                  f"the old model ({rec['stay_on_old_model']:.3f}): a map keeps most, not all, of what a re-embed "
                  f"gives, so switching queries to the new model over mapped vectors alone would lose recall here. "
                  f"The staged upgrade below serves fused queries instead, then re-embeds in the background.")
    table = Table(title="vecbridge upgrade, stage by stage: what it serves (Recall@10, same 500 queries)")
    for col in ("stage", "native vectors", "new-model queries", "fused with old-model queries"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for i, st in enumerate(r["upgrade_stages"]):
        name = "start (the rest mapped)" if i == 0 else f"re-embed to {st['native_fraction']:.0%}"
        table.add_row(name, f"{st['native_fraction']:.0%}", f"{st['recall_new_queries']:.3f}",
                      f"{st['recall_fused']:.3f}")
    con.print(table)
    first, last = r["upgrade_stages"][0], r["upgrade_stages"][-1]
    con.print(f"staying on the old model serves {rec['stay_on_old_model']:.3f}: with fused queries the upgrade serves "
              f"{first['recall_fused']:.3f} from the first day, and once re-embedded {last['recall_new_queries']:.3f}, "
              f"the full re-embed's {rec['full_re_embed']:.3f}, without a day of downtime")
    con.print(f"the demo's files take {r['workdir_bytes'] / 1e6:.0f} MB in {r['workdir']}: remove the folder when "
              f"done")
