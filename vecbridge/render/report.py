"""The compatibility report on the terminal (:mod:`vecbridge.render.html` writes it as a page)."""
from __future__ import annotations

from .console import console
from .models import print_throughput


def predicted_top1(ho) -> str:
    """The top-1 predicted at the collection's size, with the 95% margin the held-out sample leaves it."""
    margin = ho.top1_margin   # None in a report saved before it was given; NaN with no held-out item
    return f"{ho.top1_predicted:.3f}" + (f" ± {margin:.3f}" if margin is not None and margin == margin else "")


def partner_of(c) -> str:
    """What the held-out pairs' partner is: the same item, a GEH link, or an unsupervised estimate."""
    if c.pseudo:
        return "pseudo-partner (unsupervised)"
    return "linked partner (GEH)" if c.mode == "geh" else "true partner"


def report(rep, html_path=None) -> None:
    """``rep``: a :class:`vecbridge.results.Report`; ``html_path``: where its HTML page was written, if it was."""
    from rich.markup import escape
    from rich.table import Table

    con = console()
    v = rep.verdict
    color = {"GO": "green", "CAUTION": "yellow", "NO-GO": "red"}[v.verdict]
    c, ho = rep.correspondences, rep.held_out
    con.print(f"correspondences: [bold]{c.mode}[/] ({escape(c.reason)}); {c.train:,} to fit, "
              f"{c.held_out:,} held out", markup=True)
    print_throughput(rep.model_run, con)
    table = Table(title="held-out quality")
    table.add_column("metric")
    table.add_column("value", justify="right")
    partner = partner_of(c)
    pool = ho.pool
    table.add_row(f"top-1 of the {partner} (among {pool:,} held-out items)", f"{ho.top1:.3f}")
    if ho.top1_predicted is not None and ho.full_size > pool:
        how = "measured" if ho.top1_curve.pool_sizes[-1] >= ho.full_size else "predicted"
        table.add_row(f"top-1 among the collection's {ho.full_size:,} items ({how})", predicted_top1(ho))
    table.add_row(f"mean rank (among {pool:,})", f"{ho.mean_rank:.2f}")
    table.add_row("mean cosine", f"{ho.mean_cosine:.3f}")
    table.add_row("residual (held-out / in-sample / bound)",
                  f"{ho.residual:.3g} / {rep.fit.residual:.3g} / {rep.fit.bound:.3g}")
    if rep.retrieval is not None:
        r = rep.retrieval
        if r.measured is None:
            table.add_row(f"recall retention@{r.k}", escape(r.unreliable or "unreliable"))
        else:
            table.add_row(f"recall retention@{r.k} (measured on {r.pool:,} docs)", f"{r.measured:.3f}")
            table.add_row(f"recall retention@{r.k} (predicted for {r.full_size:,} docs)", f"{r.predicted:.3f}")
    if rep.retrieval_unsupervised is not None:
        r = rep.retrieval_unsupervised
        table.add_row(f"Recall@{r.k} of new-model queries over mapped old vectors (measured on {r.pool:,} docs)",
                      f"{r.recall_mapped:.3f}")
        if r.predicted is not None:
            table.add_row(f"Recall@{r.k} over mapped old vectors (predicted for {r.full_size:,} docs)",
                          f"{r.predicted:.3f}")
    if rep.three_way is not None:
        t = rep.three_way
        full = "n/a" if t.full_re_embed is None else f"{t.full_re_embed:.3f}"
        table.add_row("Recall@k: stay / mapped / re-embed",
                      f"{t.stay_on_old_model:.3f} / {t.mapped_upgrade:.3f} / {full}")
    if rep.neighbourhood_overlap is not None:
        no = rep.neighbourhood_overlap
        table.add_row(f"neighbourhood top-{no.k} overlap" + (f" (among {no.pool:,} held-out items)"
                                                           if no.pool else ""), f"{no.overlap:.3f}")
    con.print(table)
    for a in rep.advice:
        con.print(f"note: {escape(a)}")
    con.print(f"[bold {color}]{v.verdict}[/]: {escape(v.reason)}", markup=True)
    if html_path:
        con.print(f"HTML report: {html_path}")
