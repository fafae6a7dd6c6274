"""The verbs that write collections through an alignment: ``migrate`` and ``merge``, and ``verify`` that checks a
migration."""
from __future__ import annotations

import click

from ..render import migration as show
from ..render.console import progress
from .group import command, emit, json_mode
from .options import POSITIVE_INT, engine_options, force_space_option, pairs_option


@command()
@click.argument("source_url")
@click.option("--alignment", "alignment_path", required=True, type=click.Path(dir_okay=False),
              help="The alignment artifact (.vb) written by `fit` or `link`.")
@click.option("--to", "target_url", default=None,
              help="New collection to write (must not exist unless --resume/--overwrite; never the source).")
@click.option("--field", default=None, help="Instead of a new collection, add this vector field to SOURCE in place.")
@click.option("--batch-size", type=POSITIVE_INT, default=None,
              help="Records per batch (default: what the target store prefers; a resume keeps the first run's).")
@click.option("--resume", is_flag=True, help="Continue an interrupted migration from its checkpoint.")
@click.option("--overwrite", is_flag=True, help="Drop and recreate the target first (never the source).")
@click.option("--dry-run", is_flag=True, help="Print the plan (count, dims, estimated time and size); write nothing.")
@click.option("--checkpoint", "checkpoint_path", default=None, type=click.Path(dir_okay=False),
              help="Checkpoint file (default: beside the alignment, named after the target).")
@click.option("--index/--no-index", "build_index", default=True, show_default=True,
              help="Build the target's vector index after the load (stores that defer it: pgvector).")
@force_space_option
@engine_options("key ranges of the source copied by Ray tasks")
def migrate(source_url, alignment_path, target_url, field, batch_size, resume, overwrite, dry_run, checkpoint_path,
            build_index, force, engine):
    """Rewrite SOURCE_URL (old model) into the new model's space through an alignment."""
    from ..jobs import migrate as run_migration

    if target_url is None and field is None:
        raise click.UsageError("say where the mapped vectors go: --to URL (a new collection) or --field NAME (a "
                               "vector field added to SOURCE_URL in place)")
    if engine.name == "ray" and (field is not None or dry_run):   # the job's own refusal adds a hint
        from ..errors import InputError

        raise InputError("--engine ray writes a new collection: --field and --dry-run are not supported with it yet")

    bar, task = progress(not json_mode() and not dry_run, "migrating", None)

    def started(total, done):
        bar.update(task, total=total, completed=done)

    def advanced(n):
        bar.advance(task, n)
        t = bar.tasks[0]
        if t.speed:
            bar.update(task, rate=f"{t.speed:,.0f} vectors/s")

    def phase(name):
        if name == "index" and not json_mode():
            bar.update(task, description="building the vector index")
            bar.console.print("all records written; building the target's vector index (this can take minutes; "
                              "--no-index leaves it to you)")

    with bar:
        result = run_migration(source_url, alignment_path, target_url, field=field, batch_size=batch_size,
                               resume=resume, overwrite=overwrite, dry_run=dry_run, checkpoint_path=checkpoint_path,
                               build_index=build_index, on_progress=advanced, on_start=started, on_phase=phase,
                               engine=engine, force=force)
    emit(result, show.plan if dry_run else show.migrated)


@command()
@click.argument("a_url")
@click.argument("b_url")
@click.option("--into", "into_url", required=True, help="New collection that receives the union (in B's space).")
@click.option("--alignment", "alignment_path", required=True, type=click.Path(dir_okay=False),
              help="Alignment from A's space to B's (vecbridge fit / link).")
@pairs_option("ids", "file", aliases=("--links",))
@click.option("--policy", type=click.Choice(["keep-b", "keep-a", "keep-both"]), default="keep-b", show_default=True,
              help="Vector kept for a linked pair (keep-both: A's mapped vector in a second field).")
@click.option("--batch-size", type=POSITIVE_INT, default=None,
              help="Records per write (default: what the store prefers).")
@click.option("--resume", is_flag=True, help="Continue an interrupted merge from its checkpoint.")
@click.option("--overwrite", is_flag=True, help="Drop and recreate the --into collection first (never an input).")
@click.option("--checkpoint", "checkpoint_path", default=None, type=click.Path(dir_okay=False),
              help="Checkpoint file (default: beside the alignment, named after the --into collection).")
@force_space_option
@engine_options("key ranges of B and of A merged by Ray tasks")
def merge(a_url, b_url, into_url, alignment_path, pairs, policy, batch_size, resume, overwrite, checkpoint_path,
          force, engine):
    """Merge index A (old encoder) and index B (new encoder) into one collection in B's space."""
    from ..jobs import merge as run_merge

    bar, task = progress(not json_mode(), "merging", None)
    with bar:
        result = run_merge(a_url, b_url, into_url, alignment_path, links=pairs, policy=policy,
                           batch_size=batch_size, resume=resume, overwrite=overwrite, checkpoint_path=checkpoint_path,
                           on_progress=lambda n: bar.advance(task, n), engine=engine, force=force)
    emit(result, show.merged)


@command()
@click.argument("source_url")
@click.argument("target_url")
@click.option("--alignment", "alignment_path", required=True, type=click.Path(dir_okay=False),
              help="The alignment artifact (.vb) written by `fit` or `link`.")
@click.option("--field", default=None, help="Verify an in-place vector field of TARGET_URL.")
@click.option("--sample", type=POSITIVE_INT, default=1000, show_default=True,
              help="Records whose mapping is recomputed (--engine ray: every record).")
@click.option("--tolerance", type=float, default=1e-5, show_default=True,
              help="Largest difference allowed between a stored and a recomputed vector element.")
@force_space_option
@engine_options("every record checked (id, vector, payload) by Ray tasks over key ranges of the source, no id set "
                "held")
def verify(source_url, target_url, alignment_path, field, sample, tolerance, force, engine):
    """Check a migration: counts, ids, and a sample of mapped vectors and payloads. Exit 1 on any mismatch."""
    from ..errors import CheckFailed
    from ..jobs import verify as run_verify
    from ..render.evaluation import checks

    result = run_verify(source_url, target_url, alignment_path, sample=sample, tolerance=tolerance, field=field,
                        engine=engine, force=force)
    emit(result, checks)
    if not result["ok"]:
        raise CheckFailed("verification failed: " + ", ".join(c["name"] for c in result["checks"] if not c["ok"]))
