"""An upgrade on the terminal: its stage and counts, each step's headline, the plan, the tuned weights."""
from __future__ import annotations

from ..serving.weights import RERANK_TIE
from .alignment import caveat
from .console import console
from .models import print_throughput


def state(status: dict, headline: str | None = None) -> None:
    """``status``: an upgrade's state (:meth:`vecbridge.jobs.upgrade.Upgrade.status`, or what a step returns),
    under the step's ``headline`` (rich markup) if it has one."""
    from rich.markup import escape

    con = console()
    if headline:
        con.print(headline, markup=True)
    c = status["counts"]
    switched = not str(status.get("serving_via") or "").startswith("nothing switched")
    con.print(f"upgrade of {escape(status['source'])} to {escape(status['model'])}: stage [bold]{status['stage']}[/], "
              + ("serving" if switched else "clients are to query") + f" the {status['serving']} model's vectors",
              markup=True)
    con.print(f"  {status['total']:,} records: {c['native']:,} native, {c['mapped']:,} mapped, "
              f"{c['pending']:,} new or changed in the source, {c['no-text']:,} without text "
              f"({status['native_fraction']:.1%} native); new vectors in {status['vectors']}")
    if status.get("texts_gone"):
        con.print(f"  {status['texts_gone']} ({c['no-text']:,} records without text: nothing to re-embed; cutover "
                  f"serves them, finalize keeps them)")
    elif c["no-text"]:
        con.print(f"  {c['no-text']:,} records without text in {status.get('text_field', 'the text field')!r} keep "
                  f"their mapped vectors (no native vector until they get text)")
    v = status.get("map_validation")
    if v:
        verdict = "passed" if v.get("passed") else "[bold red]FAILED[/] (kept with --force: its vectors may be wrong)"
        con.print(f"  map validated without labels: score {v.get('score', float('nan')):.2f} (threshold "
                  f"{v.get('threshold', float('nan')):.2f}) {verdict}", markup=True)
        if v.get("passed"):
            caveat(con, v)
    if status.get("serving_via"):
        con.print(f"  served through: {escape(status['serving_via'])}")
    if status.get("switching"):
        con.print(f"  [yellow]a switch to the {status['switching']['serving']} model's vectors was interrupted[/]: "
                  f"run `vecbridge upgrade cutover` or `rollback` to complete it", markup=True)
    if status.get("dropping"):
        con.print(f"  [yellow]finalize was interrupted while dropping {escape(status['dropping'])}[/]: run "
                  f"`vecbridge upgrade finalize --drop-old --yes` to complete it", markup=True)
    ch = status.get("source_changes")
    if ch:
        con.print(f"  the source since the last sync: {ch['added']:,} added, {ch['changed']:,} changed, "
                  f"{ch['removed']:,} removed" + (" (picked up by the next reembed or cutover)"
                                                  if any(ch.values()) else ""))
    if status.get("credentials"):
        con.print(f"  {status['credentials']}")
    beta = status.get("fusion_beta")
    if isinstance(beta, str) and beta.startswith("not tuned"):
        con.print(f"  searches with old-model queries: {escape(beta)}")
    elif beta is not None:
        con.print(f"  searches with old-model queries: fusion weight {beta}, hub penalty weight "
                  f"{status.get('hub_weight', 0.0)} (tuned)")
    if status.get("cascade_beta") is not None:
        cb = status["cascade_beta"]
        top = status.get("cascade_rerank")
        con.print(f"  cascade{f' (top {top}, every search unless --rerank 0)' if top else ''}: old-model weight "
                  f"{'old model alone' if cb == 'inf' else cb}, hub penalty weight "
                  f"{status.get('cascade_hub_weight') or 0.0} (tuned)")
    if status.get("dropped"):
        con.print(f"  dropped {status['dropped']}")
    p = status.get("probe")
    if p:
        con.print(f"  Recall@{p['k']} on {p['n_queries']:,} probe queries at {p['native_fraction']:.0%} native: served "
                  f"{p['served']:.3f}, new model alone {p['new_model_only']:.3f}, staying on the old model "
                  f"{p['staying']:.3f}")


def plan(p: dict, con=None) -> None:
    """``p``: :func:`vecbridge.jobs.upgrade.plan`'s cost and predicted quality per stage."""
    from rich.table import Table

    con = con or console()
    con.print(f"{p['source']}: {p['count']:,} records ({p['with_text']:.0%} with text), {p['dim']}d")
    con.print(f"{p['model']}: {p['seconds_per_text'] * 1000:.1f} ms per text here; a full re-embed takes about "
              f"{p['full_reembed_seconds'] / 3600:.2f} h")
    print_throughput(p.get("model_run"), con)
    pr = p.get("predicted")
    if pr:
        size = pr.get("collection_size")
        table = Table(title=f"predicted Recall@{pr['k']} of {pr['queries']:,} queries, at the collection's "
                            f"{size:,} records (within the pool of {pr['pool']:,} re-embedded records in brackets; "
                            f"map: {pr['method']} on {pr['fit_sample']:,} re-embedded texts)" if size else
                            f"predicted Recall@{pr['k']} of {pr['queries']:,} queries among {pr['pool']:,} records "
                            f"(map: {pr['method']} on {pr['fit_sample']:,} re-embedded texts)")
        cascade = all("recall_cascade_at_size" in st for st in pr["stages"]) and size
        for col in ("stage", "native", "new model", "fused with the old model", "old-query weight") + (
                (f"cascade, --rerank {pr.get('rerank', 100)}",) if cascade else ()):
            table.add_column(col, justify="left" if col == "stage" else "right")

        def both(at, pool):
            return f"{at:.3f} ({pool:.3f})" if at is not None else f"{pool:.3f}"
        table.add_row("stay on the old model", "-", "-", both(pr.get("staying_at_size"), pr["staying"]), "-",
                      *(("-",) if cascade else ()))
        for st in pr["stages"]:
            f = st["native_fraction"]
            name = "start (mapped)" if f == 0 else "full re-embed" if f == 1 else f"{f:.0%} re-embedded"
            table.add_row(name, f"{f:.0%}", both(st.get("recall_at_size"), st["recall"]),
                          both(st.get("recall_fused_at_size"), st["recall_fused"]), str(st["beta"]),
                          *((f"{st['recall_cascade_at_size']:.3f}" + (f" (top {st['cascade_rerank']})"
                                                                        if pr.get("rerank") == "auto" else ""),)
                            if cascade else ()))
        con.print(table)
        at = pr["new_model_alone_from"]
        full = pr["stages"][-1]
        if at is None:
            con.print(f"the new model alone never serves as well as staying, not even after a full re-embed "
                      f"({full['recall']:.3f} against {pr['staying']:.3f}): serve fused (`upgrade search "
                      f"--old-model`) or stay on the old model.")
        else:
            con.print("the new model alone serves as well as staying " + (
                "from the start" if at == 0 else "only after a full re-embed" if at == 1
                else f"from about {at:.0%} re-embedded") + (
                "" if at == 0 else "; before that, serve fused (`upgrade search --old-model`)") + ".")
        con.print("Recall within a pool is higher than within the whole collection: compare the stages, not the "
                  "levels.")
    else:
        con.print("quality at each stage: give --queries and --old-queries (queries with known answers)")
    for s in p["stages"]:
        con.print(f"  - {s}")


def started(status: dict) -> None:
    state(status, f"[bold green]started[/]: state in {status['state']}")
    print_throughput(status.get("model_run"))


def reembedded(result: dict, priced: bool) -> None:
    """``priced``: the run was given a price per 1,000 texts (its spend is shown)."""
    state(result, f"[bold green]re-embedded[/] {result['reembedded']:,} records in {result['seconds']:.1f} s (the "
                  f"source: {result['new_in_source']:,} added, {result['changed_in_source']:,} changed, "
                  f"{result['removed_from_source']:,} removed since the last run)"
          + (f"; {result['without_text']:,} without text in {result['text_field']!r} keep their mapped vectors"
             if result["without_text"] else "")
          + (f"; stopped by the {result['stopped_by']}" if result["stopped_by"] != "done" else "")
          + (f"; spent {result['spent']:.2f} in all" if priced else ""))
    for r in result.get("refits") or []:
        kept = (f", {r['remapped']:,} mapped records mapped again" if r["accepted"]
                else " (kept the map in use: not better by enough)")
        console().print(f"map refitted on {r['pairs']:,} re-embedded pairs: held-out cosine "
                        f"{r['cosine_before']:.4f} -> {r['cosine_after']:.4f}{kept}")
    print_throughput(result.get("model_run"))


def scored(result: dict) -> None:
    """What ``upgrade query-log`` learnt from the logged queries."""
    state(result, f"[bold green]scored[/] {result['records_scored']:,} records against {result['queries']:,} logged "
                  f"queries ({result['records_retrieved']:,} retrieved by at least one)")


def moved(status: dict, name: str) -> None:
    """After ``cutover`` or ``rollback`` (``name``): what serves now, or that nothing could be switched."""
    from rich.markup import escape

    via = escape(status["serving_via"])
    headline = (f"[bold green]{name}[/]: the {status['serving']} model's vectors are served through {via}"
                if not via.startswith("nothing switched") else
                f"[bold yellow]{name}[/] recorded, but {via}")
    state(status, headline)


def finalized(status: dict) -> None:
    state(status, "[bold green]finalize[/]")


def tuned(result: dict, k: int) -> None:
    """``result``: :func:`vecbridge.jobs.upgrade.tune`'s weights and the recall they keep."""
    console().print(f"fusion weight beta = {result['beta']}, hub penalty weight {result['hub_weight']}: "
                    f"Recall@{k} {result['recall']:.3f} on {result['n_queries']:,} queries (new model alone "
                    f"{result['new_model_only']:.3f}, staying on the old model {result['staying']:.3f}); "
                    f"`upgrade search --old-model` uses it")
    c = result.get("cascade")
    if c:
        console().print(f"cascade (top {c['rerank']}): old-model weight {c['cascade_beta']}, hub penalty weight "
                        f"{c.get('hub_weight', 0.0)}, Recall@{k} {c['recall']:.3f} (without the penalty "
                        f"{c.get('recall_without_penalty', c['recall']):.3f}); {c['written_back']:,} candidates "
                        f"embedded and written back native; `upgrade search` and `serve --state` now run it on "
                        f"every search (--rerank 0: off)")
        tried = c.get("recall_by_rerank") or {}
        if len(tried) > 1:
            console().print("  candidates tried (Recall@{}): {}; the smallest within {} of the best kept".format(
                k, ", ".join(f"top {n} {r:.3f}" for n, r in tried.items()), RERANK_TIE))
        wider = ", ".join(f"the top {n}: {share:.1%}" for n, share in (c.get("larger_k_would_hold") or {}).items())
        console().print(f"  the top {c['rerank']} candidates held the relevant record for "
                        f"{c['candidates_hold_relevant']:.1%} of the queries: no weight ranks the others, a larger "
                        f"--rerank can" + (f" ({wider})" if wider else ""))
