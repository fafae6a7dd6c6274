"""``upgrade``: move a live collection to a new model in stages (plan, start, re-embed, search, cut over, roll back,
finalize), each step a command over one state file."""
from __future__ import annotations

import sys

import click

from ..render import upgrade as show
from ..render.console import progress
from ..render.console import steps as step_lines
from ..runtime.record_stamps import PRIORITIES
from ..serving.weights import RERANK_LADDER, RERANK_TIE
from .group import emit, fail, group, json_mode, model_line
from .options import (
    POSITIVE_INT,
    Rerank,
    engine_options,
    force_space_option,
    method_option,
    model_options,
    pairs_option,
    params_option,
    state_option,
)


@group()
def upgrade():
    """Move a live collection to a new model: map now, re-embed in the background, cut over, roll back."""


@upgrade.command("plan")
@click.argument("source_url")
@click.option("--to-model", "model", required=True, help="The new model: a name, a local path or module:function.")
@click.option("--text-field", default="text", show_default=True, help="Payload field with each record's text.")
@click.option("--sample", type=POSITIVE_INT, default=64, show_default=True, help="Texts encoded to measure the cost.")
@click.option("--queries", "queries_url", default=None,
              help="New-model query vectors (id = the id of each query's relevant record): predict each stage.")
@click.option("--old-queries", "old_queries_url", default=None, help="The same queries in the old model.")
@click.option("--pool", type=POSITIVE_INT, default=None,
              help="Records re-embedded (besides the queries' answers) to predict each stage on [default: 2,000, at "
                   "most a quarter of the collection].")
@click.option("--fit-sample", type=POSITIVE_INT, default=None,
              help="Records re-embedded to fit the map, as `upgrade start` will [default: 2,000, at most a quarter "
                   "of the collection].")
@click.option("--rerank", type=Rerank(minimum=1), default=100, show_default=True,
              help="The cascade predicted beside each stage: `search --rerank K`; `auto`: with the K `upgrade tune "
                   "--rerank auto` would choose at that stage.")
@method_option("The alignment method `upgrade start` will fit.")
@model_options
def upgrade_plan(source_url, model, text_field, sample, queries_url, old_queries_url, pool, fit_sample, rerank,
                 method, models):
    """Dry run: what re-embedding SOURCE_URL costs here and, given queries, what each stage serves. Writes nothing."""
    from ..jobs.upgrade import plan

    step = step_lines(json_mode())
    bar, task = progress(not json_mode(), "re-embedding to predict", None)
    with bar:
        p = plan(source_url, model=model, text_field=text_field, sample=sample, queries=queries_url,
                 old_queries=old_queries_url, pool=pool, fit_sample=fit_sample, rerank=rerank, method=method,
                 on_step=step,
                 on_start=lambda n: bar.update(task, total=n), on_progress=lambda n: bar.advance(task, n),
                 models=models)
    emit(p, show.plan)


@upgrade.command("start")
@click.argument("source_url")
@click.option("--to-model", "model", required=True, help="The new model: a name, a local path or module:function.")
@click.option("--text-field", default=None,
              help="Payload field with each record's text [default: text; with --pairs unsupervised / geh:SEEDS or "
                   "--alignment, leave it out if the texts are gone: the mapped vectors are then final].")
@click.option("--field", default=None, help="New vector field of SOURCE for the new vectors (pgvector, Qdrant).")
@click.option("--to", "target_url", default=None, help="New collection for the new vectors (other stores).")
@click.option("--alignment", "alignment_path", default=None, type=click.Path(dir_okay=False),
              help="Use this alignment instead of fitting one on a re-embedded sample.")
@pairs_option("reembed", "unsupervised", "geh", default="reembed")
@click.option("--new-vectors", "new_vectors_url", default=None,
              help="--pairs unsupervised / geh:SEEDS: a collection of new-model vectors of in-domain items (for GEH, "
                   "holding the seeds' partners) to fit the map against; the map is validated without labels and "
                   "refused when it fails, before anything is written (--force keeps it, marked as failed).")
@click.option("--fit-sample", type=POSITIVE_INT, default=None,
              help="Stored texts re-embedded to fit the map (they are kept as native vectors) [default: 2,000]; with "
                   "--pairs unsupervised / geh:SEEDS, vectors sampled from each collection [default: 10,000].")
@method_option("Alignment method fitted on the re-embedded sample (clustered keeps more quality).")
@params_option("Estimator parameter for --pairs unsupervised / geh:SEEDS (repeatable), e.g. --param n_runs=10.")
@click.option("--overwrite", is_flag=True,
              help="Drop and recreate the --to collection if it exists (never the source, nor a field of it).")
@state_option(required=False)
@force_space_option
@model_options
def upgrade_start(source_url, model, text_field, field, target_url, alignment_path, pairs, new_vectors_url,
                  fit_sample, method, params, overwrite, state_path, force, models):
    """Fit the map, write mapped vectors beside the old ones and stamp every record (the old vectors stay)."""
    from ..jobs.upgrade import start

    if (field is None) == (target_url is None):
        raise click.UsageError("say where the new vectors go: --field NAME (a new vector field of SOURCE_URL) or "
                               "--to URL (a new collection), one of them")
    status = start(source_url, model=model, text_field=text_field, field=field, to=target_url,
                   alignment=alignment_path, method=method, fit_sample=fit_sample, state_path=state_path,
                   overwrite=overwrite, force=force, on_step=step_lines(json_mode()), models=models, pairs=pairs,
                   new_vectors=new_vectors_url, params=params)
    emit(status, show.started)


@upgrade.command("reembed")
@state_option()
@click.option("--limit", type=POSITIVE_INT, default=None, help="Re-embed at most N records in this run.")
@click.option("--until", type=click.FloatRange(0, 1, min_open=True), default=None,
              help="Stop when this fraction of the collection is native.")
@click.option("--budget-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop after this many seconds.")
@click.option("--priority", type=click.Choice(list(PRIORITIES)), default="random", show_default=True,
              help="Order of re-embedding: a fixed shuffle; the mapped vectors expected to be worst (residual) or "
                   "attracting the most queries (hubs) first; the records a query log retrieves most (queries; "
                   "after `upgrade query-log`).")
@click.option("--batch-size", type=POSITIVE_INT, default=None,
              help="Records per batch: texts per call to the model and records per store write [default: 64, or "
                   "the model's batch when larger: --model-batch-size, 256 on a GPU].")
@click.option("--max-per-second", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Rate limit (texts per second), e.g. for an API model.")
@click.option("--price-per-1k", type=click.FloatRange(min=0), default=None,
              help="What the model costs per 1,000 texts (an API model): the upgrade's spend is kept across runs.")
@click.option("--spend-cap", type=click.FloatRange(min=0), default=None,
              help="Stop before the upgrade's total spend would exceed this (with --price-per-1k).")
@click.option("--refit/--no-refit", default=True, show_default=True,
              help="Refit the map on the records re-embedded so far as they grow, and map the records still mapped "
                   "again when the new map is better on held-out re-embedded records.")
@engine_options("batches embedded and written by Ray actors, each loading the model once")
@model_options
def upgrade_reembed(state_path, limit, until, budget_seconds, priority, batch_size, max_per_second, price_per_1k,
                    spend_cap, refit, engine, models):
    """Replace mapped vectors by the new model's own (resumable: run it again after any interruption)."""
    from ..jobs.upgrade import open_upgrade

    bar, task = progress(not json_mode(), "re-embedding", None)
    with open_upgrade(state_path) as up, bar:
        result = up.reembed(limit=limit, until=until, budget_seconds=budget_seconds, priority=priority,
                            batch_size=batch_size, max_per_second=max_per_second, price_per_1k=price_per_1k,
                            spend_cap=spend_cap, engine=engine, models=models, refit=refit,
                            on_start=lambda n: bar.update(task, total=n), on_progress=lambda n: bar.advance(task, n))
    emit(result, show.reembedded, price_per_1k is not None)


@upgrade.command("status")
@state_option()
@click.option("--queries", "queries_url", default=None,
              help="Measure quality now on these new-model queries (id = each query's relevant record's id).")
@click.option("--old-queries", "old_queries_url", default=None, help="The same queries in the old model.")
def upgrade_status(state_path, queries_url, old_queries_url):
    """Stage, serving model, how many records are native, mapped or waiting, and the quality last measured."""
    from ..jobs.upgrade import measure, open_upgrade

    if (queries_url is None) != (old_queries_url is None):
        raise click.UsageError("measuring needs --queries and --old-queries together")
    if queries_url:
        emit(measure(state_path, queries_url, old_queries_url), show.state)
        return
    with open_upgrade(state_path) as up:
        up.settle()   # a finalize --drop-old killed after its drop: recorded now
        status = up.status()
        if status["stage"] not in ("starting", "finalized") and not status.get("dropping"):
            status["source_changes"] = up.changes()
        emit(status, show.state)


@upgrade.command("search")
@state_option()
@click.argument("texts", nargs=-1, required=True)
@click.option("-k", "k", type=POSITIVE_INT, default=10, show_default=True, help="Results per query.")
@click.option("--old-model", default=None,
              help="Also encode each query with the old model and fuse the scores (keeps more quality while the "
                   "old model is the better retriever).")
@click.option("--beta", type=click.FloatRange(min=0), default=None,
              help="Weight of the old-model query in the fusion (default: the one `upgrade tune` chose; before any "
                   "tuning the old model alone until cutover, the new model alone after it).")
@click.option("--hub-weight", type=click.FloatRange(min=0), default=None,
              help="Hub penalty: subtract this times each record's hub score (default: what `upgrade tune` chose).")
@click.option("--rerank", type=click.IntRange(min=0), default=None, metavar="K",
              help="Cascade: score the top K candidates again with the new model's vectors of their texts; those "
                   "embedded for it are written back as native vectors (re-embedding what users retrieve first) "
                   "[default: the K `upgrade tune --rerank K|auto` tuned; none before; 0: off].")
@model_options
def upgrade_search(state_path, texts, k, old_model, beta, hub_weight, rerank, models):
    """Search the upgrade's vectors with query TEXTS encoded by the new model, at any stage."""
    from ..jobs.upgrade import open_upgrade
    from ..render.search import text_hits
    from ..serving.wrap import attach_field

    with open_upgrade(state_path) as up:
        ids, scores = up.search(list(texts), k, old_model=old_model, beta=beta, hub_weight=hub_weight, rerank=rerank,
                                models=models)
        rows = [[{"id": i, "score": float(s), "source": up.source.display_url} for i, s in zip(r, sc)]
                for r, sc in zip(ids, scores)]
        attach_field(rows, {up.source.display_url: up.source}, up.meta["text_field"])
    emit(rows, text_hits, texts)
    model_line(models)


@upgrade.command("tune")
@state_option()
@click.option("--queries", "queries_url", required=True,
              help="New-model query vectors (id = the id of each query's relevant record).")
@click.option("--old-queries", "old_queries_url", required=True, help="The same queries in the old model.")
@click.option("-k", "k", type=POSITIVE_INT, default=10, show_default=True, help="Results per query.")
@click.option("--rerank", type=Rerank(), default=0, show_default=True,
              help="Also tune the cascade (`search --rerank K`): the queries' top K candidates are embedded by the "
                   "new model and written back as native vectors; `auto` also chooses K (of "
                   f"{', '.join(map(str, RERANK_LADDER))}: the smallest whose Recall@k on these queries is within "
                   f"{RERANK_TIE} of the best).")
@model_options
def upgrade_tune(state_path, queries_url, old_queries_url, k, rerank, models):
    """Choose the fusion and hub-penalty weights on queries with known answers, never below staying."""
    from ..jobs.upgrade import tune

    emit(tune(state_path, queries_url, old_queries_url, k=k, rerank=rerank, models=models), show.tuned, k)


@upgrade.command("query-log")
@state_option()
@click.option("--queries", "queries_url", required=True,
              help="A sample of your query log, encoded by the new model (a collection of query vectors).")
@click.option("-k", "k", type=POSITIVE_INT, default=10, show_default=True, help="Results per query.")
def upgrade_query_log(state_path, queries_url, k):
    """Score every record against logged queries: the hubs and queries priorities, and the hub penalty."""
    from ..jobs.upgrade import learn_queries

    emit(learn_queries(state_path, queries_url, k=k), show.scored)


def _move(name: str, doc: str):
    """``cutover`` or ``rollback``: the upgrade's method of that name, then what serves now."""
    @upgrade.command(name, help=doc)
    @state_option()
    def command(state_path):
        from ..jobs.upgrade import open_upgrade

        with open_upgrade(state_path) as up:
            status = getattr(up, name)()
        emit(status, show.moved, name)

    return command


_move("cutover", "Serve the new model's vectors (pgvector: the <table>_serving view, switched atomically).")
_move("rollback", "Serve the old model's vectors again, exactly as before the upgrade.")


@upgrade.command("finalize")
@state_option()
@click.option("--drop-old", is_flag=True,
              help="Also remove the old vectors: the old vector column (pgvector) or the old collection (also "
                   "after a plain finalize).")
@click.option("--yes", is_flag=True, help="With --drop-old: do not ask for confirmation.")
def upgrade_finalize(state_path, drop_old, yes):
    """End the upgrade after a cutover, once every record is native (the old vectors stay unless --drop-old)."""
    from ..jobs.upgrade import open_upgrade

    if drop_old and not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("--drop-old removes the old model's vectors for good: pass --yes to confirm "
                                   "(there is no terminal to ask)")
        if not click.confirm("Drop the old model's vectors for good? Rollback will no longer be possible",
                             err=True):
            fail("nothing dropped: not confirmed", 1)
    with open_upgrade(state_path) as up:
        status = up.finalize(drop_old=drop_old)
    emit(status, show.finalized)
