"""Command line: a thin layer over the Python API (click + rich).

Exit codes: 0 success; 1 a check failed; 2 usage error (click); 3 bad input data; 4 store problem (unreachable,
credentials, missing/empty collection, missing client library); 5 bad alignment artifact; 70 internal error;
130 interrupted. Errors are one line on stderr; set ``VECBRIDGE_DEBUG=1`` to see the traceback of an internal error.
"""
from __future__ import annotations

import functools
import json
import os
import sqlite3
import sys
import warnings

import click

from ._version import __version__
from .errors import InputError, StoreError, VecbridgeError
from .jobs.fit import METHODS
from .jobs.upgrade.state import PRIORITIES

EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

#: counts and sizes: zero or a negative number is a usage error (exit 2), never silently "the default"
POSITIVE_INT = click.IntRange(min=1)

#: every command's --json, defined once
json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print the result as one JSON document on stdout (machine-readable), no tables.")

#: commands whose interrupted runs continue with --resume
_RESUMABLE = ("migrate", "merge")


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _steps(quiet: bool):
    """The ``on_step`` callback of a job: each step as a dim line on stderr, nothing with ``--json``."""
    if quiet:
        return lambda s: None
    con_err = _console(stderr=True)
    return lambda s: con_err.print(f"[dim]-[/] {s}")


def _emit_error(message: str, code: int):
    from rich.markup import escape

    _console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    sys.exit(code)


def handle_errors(fn):
    """Turn every expected failure into one line on stderr and a meaningful exit code."""

    from rich.markup import escape

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("default")
                warnings.showwarning = lambda msg, cat, *a, **k: _console(stderr=True).print(
                    f"[yellow]warning:[/] {escape(str(msg))}", markup=True, soft_wrap=True)
                return fn(*args, **kwargs)
        except VecbridgeError as exc:
            _emit_error(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            ctx = click.get_current_context(silent=True)
            hint = ("; rerun the same command with --resume to continue where it stopped"
                    if ctx is not None and ctx.info_name in _RESUMABLE else "")
            _emit_error(f"interrupted{hint}", EXIT_INTERRUPTED)
        except PermissionError as exc:   # a file we were not allowed to touch: the user's to fix, not a bug
            where = f" {exc.filename}" if exc.filename else ""
            _emit_error(f"permission denied:{where} ({exc.strerror or exc})", StoreError.exit_code)
        except sqlite3.OperationalError as exc:   # a state or history database that cannot be opened or written
            _emit_error(f"cannot open or write a database file ({exc}): check that the file and its folder are "
                        f"writable", StoreError.exit_code)
        except sqlite3.DatabaseError as exc:   # not a database, or a damaged one: the user's file, not a bug
            _emit_error(f"a database file is damaged or is not one ({exc})", InputError.exit_code)
        except json.JSONDecodeError as exc:   # JSON read from a file the user gave: bad input, not a bug
            _emit_error(f"invalid JSON in an input file ({exc})", InputError.exit_code)
        except click.exceptions.Exit:
            raise
        except click.ClickException:
            raise
        except Exception as exc:  # an unexpected bug: still one line unless debugging
            if os.environ.get("VECBRIDGE_DEBUG"):
                raise
            _emit_error(f"internal error: {type(exc).__name__}: {exc} (set VECBRIDGE_DEBUG=1 for details)",
                        EXIT_INTERNAL)

    return wrapper


def _print_json(obj):
    click.echo(json.dumps(obj, indent=2, default=_json_default))


def _json_default(o):
    import numpy as np

    if hasattr(o, "as_dict"):   # a job's result dataclass
        return o.as_dict()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _progress(enabled: bool, description: str, total: int | None):
    """A rich progress bar on stderr (rate and ETA); a no-op context when disabled."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), console=_console(stderr=True),
                        disable=not enabled, transient=True)
    task = progress.add_task(description, total=total, rate="")
    return progress, task


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vecbridge")
def main():
    """Change embedding models without re-embedding your vector database."""


def pairs_option(*kinds: str, default: str | None = "ids", aliases: tuple[str, ...] = ()):
    """The one ``--pairs`` option: how the records of the two collections correspond (the grammar of
    :class:`vecbridge.linking.PairSpec`), limited to the pairings the command can use."""
    words = {"ids": "ids (same id)", "field": "field:NAME (same payload value)",
             "file": "file:PATH (CSV/JSON of id pairs, or a links .npz)", "reembed": "reembed (with --model)",
             "reference": "reference:PATH (with --old-model and --model)", "geh": "geh:PATH (seed id pairs)",
             "unsupervised": "unsupervised (nothing shared: mini-vec2vec)"}
    return click.option("--pairs", *aliases, default=default, show_default=default is not None, metavar="PAIRING",
                        help="How records correspond: " + " | ".join(words[k] for k in kinds) + ".")


def engine_options(ray_does: str):
    """``--engine local|ray``, ``--ray-address`` and ``--workers``: one spelling for every job that can run on a Ray
    cluster; ``ray_does`` says what the Ray engine does for this command."""
    def decorate(fn):
        for option in reversed([
            click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                         help=f"local: one process; ray: {ray_does} (pip install 'vecbridge[ray]'; stores that "
                              f"several processes may open: file, pgvector, Milvus, Qdrant and Chroma servers)."),
            click.option("--ray-address", default=None, envvar="RAY_ADDRESS",
                         help="Ray cluster to run on with --engine ray (default: $RAY_ADDRESS, else a local Ray)."),
            click.option("--workers", type=POSITIVE_INT, default=2, show_default=True,
                         help="Ray tasks (or actors) at a time with --engine ray."),
        ]):
            fn = option(fn)
        return fn
    return decorate


_STORED_PAIRS = ("ids", "field", "file")


@main.command()
@click.option("--source", "source_url", default=None, help="Collection in the OLD model's space (URL).")
@click.option("--target", "target_url", default=None, help="Collection in the NEW model's space (URL).")
@pairs_option(*_STORED_PAIRS, "unsupervised")
@click.option("--method", type=click.Choice(list(METHODS)), default="orthogonal", show_default=True,
              help="; ".join(f"{m.name}: {m.help}" for m in METHODS.values()) + ".")
@click.option("--center/--no-center", default=False, show_default=True, help="Centre both sides before fitting.")
@click.option("--scale/--no-scale", default=False, show_default=True, help="Also fit a global scale.")
@click.option("--alpha", type=float, default=0.01, show_default=True, help="Ridge strength (relative), --method ridge.")
@click.option("--normalize", type=click.Choice(["none", "l2"]), default="none", show_default=True,
              help="L2-normalise vectors before fitting (and before applying).")
@click.option("--holdout", type=float, default=0.0, show_default=True,
              help="Fraction of pairs kept out of the fit (by id hash) for 'vecbridge evaluate'.")
@click.option("--max-pairs", type=POSITIVE_INT, default=None,
              help="Fit on a uniform sample of at most N source records.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the holdout split and any sampling.")
@click.option("--batch-size", type=POSITIVE_INT, default=2000, show_default=True, help="Records read per store call.")
@click.option("--source-model", default=None, help="Name of the old model (recorded in the artifact).")
@click.option("--target-model", default=None, help="Name of the new model (recorded in the artifact).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="MiniVec2Vec parameter for --pairs unsupervised (repeatable).")
@click.option("--force", is_flag=True,
              help="--pairs unsupervised: save the map even when it fails validation (marked as failed).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the alignment.")
@engine_options("every stored pair streamed into sums by Ray tasks over key ranges of the source, one fit from "
                "their total (no --max-pairs, unsupervised or clustered)")
@json_option
@handle_errors
def fit(source_url, target_url, pairs, method, center, scale, alpha, normalize, holdout, max_pairs, seed,
        batch_size, source_model, target_model, params, force, output, engine, ray_address, workers, as_json):
    """Fit an alignment from SOURCE's embedding space to TARGET's and save it."""
    from .jobs.fit import fit_to_file

    progress, task = _progress(not as_json, "pairing and fitting", None)
    with progress:
        alignment, path = fit_to_file(
            output, source_url, target_url, pairs=pairs, method=method, center=center, scale=scale, alpha=alpha,
            normalization=normalize, holdout=holdout, max_pairs=max_pairs, seed=seed, batch_size=batch_size,
            source_model=source_model, target_model=target_model, params=_parse_params(params), force=force,
            engine=engine, workers=workers, ray_address=ray_address,
            on_start=lambda total: progress.update(task, total=total), on_batch=lambda n: progress.advance(task, n))
    summary = {"alignment": str(path), **alignment.summary()}
    if as_json:
        _print_json(summary)
        return
    f = alignment.metadata["fit"]
    con = _console()
    anchors = alignment.metadata.get("anchors", {})
    examined = anchors.get("n_examined")
    if anchors.get("pseudo_pairs"):   # no true pair behind this map: say how it was made, never "from N pairs"
        made = (f"without pairs ({anchors.get('method')} on {anchors.get('n_source', 0):,} + "
                f"{anchors.get('n_target', 0):,} unpaired vectors)")
    else:
        made = f"from {f['n_pairs']:,} pairs" + (f" ({examined:,} source records examined)" if examined else "")
    con.print(f"[bold green]saved[/] {path}: {alignment.kind} map {alignment.source_dim}d -> "
              f"{alignment.target_dim}d {made}", markup=True)
    _print_validation(con, alignment.metadata.get("validation"))
    if "bound" in f:
        con.print(f"  in-sample mean squared residual {f['residual']:.4g} (Procrustes bound {f['bound']:.4g}, "
                  f"dot-product discrepancy delta {f['delta']:.4g})")
    if alignment.metadata.get("is_projection"):
        con.print("  [yellow]note:[/] the source has more dimensions than the target: this map is a projection",
                  markup=True)


def _print_validation(con, validation):
    """One line on the label-free validation of an unsupervised or seed-grown result, if it had one."""
    from rich.markup import escape

    if not validation:
        return
    if validation.get("passed"):
        con.print(f"  validation passed: score {validation['score']:.2f} >= {validation['threshold']:.2f} "
                  f"({escape(validation['reason'])})")
    else:
        con.print(f"  [bold red]validation FAILED[/] (kept because of --force): score {validation['score']:.2f} < "
                  f"{validation['threshold']:.2f} ({escape(validation['reason'])})", markup=True)


def _parse_params(items) -> dict:
    """``KEY=VALUE`` strings to a dict; values read as JSON (numbers, true/false/null) and as text otherwise."""
    import json

    from .errors import InputError

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--param expects KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


@main.command()
@click.argument("source_url")
@click.argument("target_url", required=False)
@pairs_option(*_STORED_PAIRS, "reembed", "reference", "geh", "unsupervised", default=None, aliases=("--mode",))
@click.option("--seeds", default=None, type=click.Path(dir_okay=False),
              help="Seed id pairs for GEH (the same as --pairs geh:PATH).")
@click.option("--model", default=None, help="New model (name, path or module:function) for reembed/reference.")
@click.option("--old-model", default=None, help="Old model, for --pairs reference:PATH.")
@click.option("--text-field", default="text", show_default=True, help="Payload field with the stored text.")
@click.option("--sample", type=POSITIVE_INT, default=10_000, show_default=True,
              help="Records to sample per collection.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the sample and the linking method.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Estimator parameter for --pairs geh / unsupervised (repeatable), e.g. --param n_runs=10.")
@click.option("--force", is_flag=True,
              help="--pairs geh / unsupervised: write the links even when their map fails validation.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Links file: .csv or .json (id links) or .npz (any pairing; needed when links carry vectors).")
@json_option
@handle_errors
def link(source_url, target_url, pairs, seeds, model, old_model, text_field, sample, seed, params, force, output,
         as_json):
    """Find correspondences between SOURCE (old model) and TARGET (new model) for 'vecbridge fit --pairs file:PATH'."""
    import numpy as np

    from .errors import InputError
    from .jobs.link import link as run_link

    if pairs is None:
        if not seeds:
            raise click.UsageError("say how records correspond with --pairs (e.g. --pairs ids)")
        pairs = "geh"

    step = _steps(as_json)
    links = run_link(source_url, target_url, pairs, seeds=seeds, model=model, old_model=old_model,
                     text_field=text_field, sample=sample, seed=seed, params=_parse_params(params), force=force,
                     on_step=step)
    if len(links) == 0:
        raise InputError(f"--pairs {pairs} found no links")
    path = links.save(output)
    summary = {"links": str(path), "mode": links.mode, "n": len(links),
               "mean_confidence": float(np.mean(links.confidence)), "carries_vectors": links.has_vectors}
    if "validation" in links.meta:
        summary["validation"] = links.meta["validation"]
    if as_json:
        _print_json(summary)
    else:
        con = _console()
        con.print(f"[bold green]linked[/] {len(links):,} pairs ({links.mode}, mean confidence "
                  f"{summary['mean_confidence']:.2f}) -> {path}", markup=True)
        _print_validation(con, links.meta.get("validation"))


@main.command()
@click.option("--alignment", "alignment_path", required=True, type=click.Path(dir_okay=False),
              help="The alignment artifact (.vb) written by `fit` or `link`.")
@click.option("--source", "source_url", required=True, help="Collection in the OLD model's space.")
@click.option("--target", "target_url", required=True, help="Collection in the NEW model's space.")
@pairs_option(*_STORED_PAIRS)
@click.option("--queries", "queries_url", default=None,
              help="New-model query vectors (a collection), each query's id = its relevant document's id in "
                   "--source (whatever --pairs links by): recall retention.")
@click.option("-k", "k", type=POSITIVE_INT, default=10, show_default=True,
              help="Neighbours retrieved per query (recall@k).")
@click.option("--max-pairs", type=POSITIVE_INT, default=10000, show_default=True,
              help="Evaluate on at most this many held-out pairs.")
@click.option("--all-pairs", is_flag=True, help="Also evaluate on pairs used in the fit (ignore the holdout split).")
@click.option("--min-top1", type=float, default=None, help="Exit 1 if held-out top-1 falls below this.")
@click.option("--min-retention", type=float, default=None, help="Exit 1 if recall retention@k falls below this.")
@engine_options("a uniform sample of --max-pairs of all the pairs, drawn by Ray tasks over key ranges of the source")
@json_option
@handle_errors
def evaluate(alignment_path, source_url, target_url, pairs, queries_url, k, max_pairs, all_pairs, min_top1,
             min_retention, engine, ray_address, workers, as_json):
    """Measure an alignment on corresponding records (held out from the fit when it had a holdout)."""
    from .errors import CheckFailed, InputError
    from .jobs.evaluate import evaluate_alignment

    if engine == "ray":
        from .jobs.distributed_reduce import evaluate_on_ray

        def evaluate_alignment(*args, **options):
            return evaluate_on_ray(*args, workers=workers, ray_address=ray_address, **options)

    result = evaluate_alignment(alignment_path, source_url, target_url, pairs=pairs, queries=queries_url, k=k,
                                max_pairs=max_pairs, use_holdout=not all_pairs)
    failures = []
    if min_top1 is not None and result.pairs.top1 < min_top1:
        failures.append(f"top-1 {result.pairs.top1:.3f} < {min_top1}")
    if min_retention is not None:
        if result.retrieval is None:
            raise InputError("--min-retention needs --queries")
        retention = result.retrieval.retention
        if retention is None:   # the native recall is too low for the ratio to mean anything: not a pass
            failures.append(f"retention@{k} {result.retrieval.unreliable or 'unreliable'}")
        elif retention < min_retention:
            failures.append(f"retention@{k} {retention:.3f} < {min_retention}")
    result.passed = not failures
    if as_json:
        _print_json(result)
    else:
        _print_evaluation(result)
    if failures:
        raise CheckFailed("; ".join(failures))


def _print_evaluation(result):
    """``result``: a :class:`vecbridge.results.Evaluation`."""
    from rich.table import Table

    table = Table(title=f"{result.n_pairs:,} {'held-out ' if result.held_out else ''}pairs")
    for col in ("map", "top-1", "mean rank", "mean cosine"):
        table.add_column(col, justify="right" if col != "map" else "left")
    for name, r in (("alignment", result.pairs), ("no map", result.no_map)):
        if r is not None:
            table.add_row(name, f"{r.top1:.3f}", f"{r.mean_rank:.2f}", f"{r.mean_cosine:.3f}")
    con = _console()
    con.print(table)
    if result.retrieval is not None:
        r = result.retrieval
        retention = f"{r.retention:.3f}" if r.retention is not None else (r.unreliable or "unreliable")
        con.print(f"recall@{r.k}: mapped {r.recall_mapped:.3f} vs native {r.recall_native:.3f} -> "
                  f"retention {retention}; top-{r.k} overlap {r.overlap:.3f} ({r.n_queries:,} queries)")


@main.command()
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
@engine_options("key ranges of the source copied by Ray tasks")
@json_option
@handle_errors
def migrate(source_url, alignment_path, target_url, field, batch_size, resume, overwrite, dry_run, checkpoint_path,
            build_index, engine, ray_address, workers, as_json):
    """Rewrite SOURCE_URL (old model) into the new model's space through an alignment."""
    from .jobs import migrate as run_migration

    if target_url is None and field is None:
        raise click.UsageError("say where the mapped vectors go: --to URL (a new collection) or --field NAME (a "
                               "vector field added to SOURCE_URL in place)")
    if engine == "ray":
        from .errors import InputError

        if field is not None or dry_run:
            raise InputError("--engine ray writes a new collection: --field and --dry-run are not supported with it "
                             "yet")
        from .jobs.distributed import migrate_on_ray

        def run_migration(source, alignment, target, *, field, dry_run, **options):
            return migrate_on_ray(source, alignment, target, workers=workers, ray_address=ray_address, **options)

    progress, task = _progress(not as_json and not dry_run, "migrating", None)

    def started(total, done):
        progress.update(task, total=total, completed=done)

    def advanced(n):
        progress.advance(task, n)
        t = progress.tasks[0]
        if t.speed:
            progress.update(task, rate=f"{t.speed:,.0f} vectors/s")

    def phase(name):
        if name == "index" and not as_json:
            progress.update(task, description="building the vector index")
            progress.console.print("all records written; building the target's vector index (this can take "
                                   "minutes; --no-index leaves it to you)")

    with progress:
        result = run_migration(source_url, alignment_path, target_url, field=field, batch_size=batch_size,
                               resume=resume, overwrite=overwrite, dry_run=dry_run, checkpoint_path=checkpoint_path,
                               build_index=build_index, on_progress=advanced, on_start=started, on_phase=phase)
    if as_json:
        _print_json(result)
        return
    con = _console()
    if dry_run:
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
        return
    where = result["target"] + (f" (field {result['field']})" if result["field"] else "")
    if result["resumed_from"] and not result["written"]:
        con.print(f"[bold green]done[/]: nothing was left to migrate; {where} holds all "
                  f"{result['resumed_from']:,} records of the earlier run ({result['seconds']:.1f} s)", markup=True)
        return
    rate = f" ({result['vectors_per_s']:,.0f} vectors/s)" if result["vectors_per_s"] else ""
    resumed = f", resumed after {result['resumed_from']:,}" if result["resumed_from"] else ""
    con.print(f"[bold green]migrated[/] {result['written']:,} records into {where} in "
              f"{result['seconds']:.1f} s{rate}{resumed}", markup=True)


@main.command()
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
@engine_options("key ranges of B and of A merged by Ray tasks")
@json_option
@handle_errors
def merge(a_url, b_url, into_url, alignment_path, pairs, policy, batch_size, resume, overwrite, checkpoint_path,
          engine, ray_address, workers, as_json):
    """Merge index A (old encoder) and index B (new encoder) into one collection in B's space."""
    from .jobs import merge as run_merge

    if engine == "ray":
        from .jobs.distributed import merge_on_ray

        def run_merge(*args, **options):
            return merge_on_ray(*args, workers=workers, ray_address=ray_address, **options)

    progress, task = _progress(not as_json, "merging", None)
    with progress:
        result = run_merge(a_url, b_url, into_url, alignment_path, links=pairs, policy=policy,
                           batch_size=batch_size, resume=resume, overwrite=overwrite, checkpoint_path=checkpoint_path,
                           on_progress=lambda n: progress.advance(task, n))
    if as_json:
        _print_json(result)
        return
    _console().print(f"[bold green]merged[/] {result['a_count']:,} + {result['b_count']:,} records into "
                     f"{result['into']}: {result['count']:,} records, {result['linked']:,} linked pairs "
                     f"({result['policy']}), {result['renamed']:,} renamed ids", markup=True)


@main.command()
@click.argument("source_url")
@click.argument("target_url")
@click.option("--alignment", "alignment_path", required=True, type=click.Path(dir_okay=False),
              help="The alignment artifact (.vb) written by `fit` or `link`.")
@click.option("--field", default=None, help="Verify an in-place vector field of TARGET_URL.")
@click.option("--sample", type=POSITIVE_INT, default=1000, show_default=True,
              help="Records whose mapping is recomputed (--engine ray: every record).")
@click.option("--tolerance", type=float, default=1e-5, show_default=True,
              help="Largest difference allowed between a stored and a recomputed vector element.")
@engine_options("every record checked (id, vector, payload) by Ray tasks over key ranges of the source, no id set "
                "held")
@json_option
@handle_errors
def verify(source_url, target_url, alignment_path, field, sample, tolerance, engine, ray_address, workers, as_json):
    """Check a migration: counts, ids, and a sample of mapped vectors and payloads. Exit 1 on any mismatch."""
    from .errors import CheckFailed
    from .jobs import verify as run_verify

    if engine == "ray":
        from .jobs.distributed_reduce import verify_on_ray

        def run_verify(source, target, alignment, *, sample, **options):   # a full check: no sample
            return verify_on_ray(source, target, alignment, workers=workers, ray_address=ray_address, **options)

    result = run_verify(source_url, target_url, alignment_path, sample=sample, tolerance=tolerance, field=field)
    if as_json:
        _print_json(result)
    else:
        con = _console()
        for c in result["checks"]:
            mark = "[green]ok[/]  " if c["ok"] else "[red]FAIL[/]"
            con.print(f"{mark} {c['name']}: {c['detail']}", markup=True)
    if not result["ok"]:
        raise CheckFailed("verification failed: " + ", ".join(c["name"] for c in result["checks"] if not c["ok"]))


@main.command()
@click.option("--wrap", "wrapped", multiple=True, metavar="OLD_URL=ALIGNMENT",
              help="An old-model collection searched through an alignment (repeatable).")
@click.option("--native", multiple=True, metavar="URL", help="A collection already in the new model's space.")
@click.option("--vectors", "vectors_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help=".npy file of new-model query vectors (one row per query).")
@click.option("--old-vectors", "old_vectors_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The old model's vectors of the same queries (.npy, row for row): dual-query fusion over the "
                   "wrapped collections, which keeps more quality where the old model still runs.")
@click.option("--beta", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Weight of the old-model query in dual-query fusion.")
@click.option("--rerank-model", default=None,
              help="Re-score the wrapped collections' top candidates with this new model's vectors of their stored "
                   "texts (name, path or module:function).")
@click.option("--text-field", default="text", show_default=True,
              help="Payload field with the text: shown beside each hit, and re-scored by --rerank-model.")
@click.option("--hub-log", "hub_log_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="New-model vectors of logged queries (.npy): candidates pay the hub penalty.")
@click.option("--hub-weight", type=click.FloatRange(min=0), default=0.5, show_default=True,
              help="Weight of the hub penalty (with --hub-log).")
@click.option("--candidates", "k_candidates", type=POSITIVE_INT, default=50, show_default=True,
              help="Candidates per query that fusion, the hub penalty or re-ranking re-scores.")
@click.option("-k", "k", type=POSITIVE_INT, default=10, show_default=True, help="Results per query.")
@json_option
@handle_errors
def search(wrapped, native, vectors_path, old_vectors_path, beta, rerank_model, text_field, hub_log_path,
           hub_weight, k_candidates, k, as_json):
    """Federated search with new-model query vectors over wrapped old and native new collections."""
    import numpy as np

    from .errors import InputError
    from .serving.wrap import search_collections

    pairs = []
    for spec in wrapped:
        url, sep, align = spec.rpartition("=")
        if not sep or not url:
            raise InputError(f"--wrap takes OLD_URL=ALIGNMENT, got {spec!r}")
        pairs.append((url, align))
    def load(path):
        try:
            return np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise InputError(f"{path}: not a numpy array file ({exc})") from None

    if (old_vectors_path or rerank_model) and not pairs:
        raise click.UsageError("--old-vectors and --rerank-model apply to --wrap collections")
    results = search_collections(pairs, native, load(vectors_path), k,
                                 old_queries=load(old_vectors_path) if old_vectors_path else None, beta=beta,
                                 rerank_model=rerank_model, text_field=text_field, k_candidates=k_candidates,
                                 hub_log=load(hub_log_path) if hub_log_path else None, hub_weight=hub_weight,
                                 show_field=text_field)
    if as_json:
        _print_json(results)
        return
    from rich.markup import escape

    con = _console()
    for qi, rows in enumerate(results):
        con.print(f"[bold]query {qi}[/]", markup=True)
        for rank, r in enumerate(rows, 1):
            text = f"  {escape(_snippet(r['text']))}" if "text" in r else ""
            con.print(f"  {rank:3d}. {escape(str(r['id']))}  {r['score']:.4f}{text}  [dim]{r['source']}[/]",
                      markup=True)


def _snippet(value, width: int = 80) -> str:
    """A stored text on one line, cut to ``width`` characters."""
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[:width - 1] + "…"


@main.command()
@click.argument("old_url")
@click.argument("new_url", required=False)
@pairs_option("ids", "field", "reembed", "geh", "unsupervised", default=None)
@click.option("--method", type=click.Choice(list(METHODS)), default="orthogonal", show_default=True,
              help="The alignment method you will fit: held-out quality and retrieval are measured with it.")
@click.option("--key", default=None, help="Payload field that identifies the same item (as --pairs field:NAME).")
@click.option("--model", default=None, help="New model (name, path or module:function) to re-embed stored texts.")
@click.option("--text-field", default=None, help="Payload field holding the text (with --model).")
@click.option("--seeds", default=None, type=click.Path(dir_okay=False),
              help="CSV/JSON of seed id pairs (as --pairs geh:PATH).")
@click.option("--queries", "queries_url", default=None,
              help="New-model query vectors (a collection), each query's id = its relevant document's id in "
                   "OLD_URL (whatever --pairs links by): recall retention.")
@click.option("--old-queries", "old_queries_url", default=None,
              help="The same queries in the old model: three-way comparison (stay / mapped / re-embed).")
@click.option("--sample", type=POSITIVE_INT, default=5000, show_default=True,
              help="Records sampled from the collections.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the sample and the held-out split.")
@click.option("--center/--no-center", default=False, show_default=True,
              help="Centre both sides before fitting the map.")
@click.option("--target", "target_retention", type=float, default=0.95, show_default=True,
              help="Retention@k the recommended option must keep (measured with --queries).")
@click.option("--unsupervised/--no-unsupervised", default=True, show_default=True,
              help="Fall back to unsupervised mini-vec2vec when no other correspondences exist.")
@click.option("--old-model-retired", is_flag=True,
              help="The old model will not run any more: judge mapped-now against re-embed-first, not against "
                   "staying on it.")
@click.option("--html", "html_path", default=None, type=click.Path(dir_okay=False), help="Write an HTML report.")
@click.option("--fail-on", type=click.Choice(["no-go", "caution"]), default=None,
              help="Exit 1 when the verdict is this bad (for CI gates).")
@engine_options("a uniform sample of --sample of all the pairs sharing an id or a payload key, drawn by Ray tasks "
                "over key ranges of OLD")
@json_option
@handle_errors
def report(old_url, new_url, pairs, method, key, model, text_field, seeds, queries_url, old_queries_url, sample, seed,
           center, target_retention, unsupervised, old_model_retired, html_path, fail_on, engine, ray_address, workers,
           as_json):
    """Dry-run compatibility report: will the upgrade work, and how much retrieval quality is kept?"""
    from pathlib import Path

    from .errors import CheckFailed
    from .jobs.report import compatibility_report
    from .render.html import render_html

    if engine == "ray":
        from .jobs.distributed_reduce import report_on_ray

        def compatibility_report(*args, **options):
            return report_on_ray(*args, workers=workers, ray_address=ray_address, **options)

    step = _steps(as_json)
    rep = compatibility_report(old_url, new_url, sample=sample, seed=seed, pairs=pairs, method=method, key=key,
                               model=model, text_field=text_field, seeds=seeds, queries_new=queries_url,
                               queries_old=old_queries_url, center=center, unsupervised=unsupervised,
                               target_retention=target_retention, old_model_retired=old_model_retired,
                               on_step=step)
    if html_path:
        Path(html_path).write_text(render_html(rep), encoding="utf-8")
    if as_json:
        _print_json(rep)
    else:
        _print_report(rep, html_path)
    bad = {"no-go": ("NO-GO",), "caution": ("NO-GO", "CAUTION")}.get(fail_on, ())
    if rep.verdict.verdict in bad:
        raise CheckFailed(f"verdict {rep.verdict.verdict}: {rep.verdict.reason}")


def _print_report(rep, html_path):
    """``rep``: a :class:`vecbridge.results.Report`."""
    from rich.markup import escape
    from rich.table import Table

    con = _console()
    v = rep.verdict
    color = {"GO": "green", "CAUTION": "yellow", "NO-GO": "red"}[v.verdict]
    c, ho = rep.correspondences, rep.held_out
    con.print(f"correspondences: [bold]{c.mode}[/] ({escape(c.reason)}); {c.train:,} to fit, "
              f"{c.held_out:,} held out", markup=True)
    table = Table(title="held-out quality")
    table.add_column("metric")
    table.add_column("value", justify="right")
    partner = "pseudo-partner (unsupervised)" if c.pseudo else "true partner"
    pool = ho.pool
    table.add_row(f"top-1 of the {partner} (among {pool:,} held-out items)", f"{ho.top1:.3f}")
    if ho.top1_predicted is not None and ho.full_size > pool:
        how = "measured" if ho.top1_curve.pool_sizes[-1] >= ho.full_size else "predicted"
        table.add_row(f"top-1 among the collection's {ho.full_size:,} items ({how})", f"{ho.top1_predicted:.3f}")
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
        table.add_row(f"Recall@{r.k} of new-model queries over mapped old vectors", f"{r.recall_mapped:.3f}")
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


@main.group()
def drift():
    """Scheduled drift checks defined in a TOML file (see vecbridge.jobs.drift)."""


def _print_drift(result: dict, as_json: bool):
    if as_json:
        _print_json(result)
        return
    m = result["measures"]

    def measure(k):   # a ratio over a near-zero native recall is no measurement: say so, never print the ratio
        if k == "retention" and m.get("retention_unreliable"):
            return f"retention unreliable (native recall {m.get('recall_native', 0.0):.3f} too low to compare)"
        return f"{k} {m[k]:.4g}"

    shown = ", ".join(measure(k) for k in ("residual_ratio", "retention", "centroid_shift", "mmd_pvalue", "top1")
                      if k in m)
    status = "[red]BREACH[/]" if result["breached"] else "[green]ok[/]"
    from rich.markup import escape

    _console().print(f"{status} {escape(result['name'])}: {escape(shown or 'reference sample saved')}", markup=True)


@drift.command("run")
@click.argument("config", type=click.Path(dir_okay=False))
@json_option
@handle_errors
def drift_run(config, as_json):
    """Run the check once (for cron or CI); exit 1 on a breach."""
    from .errors import CheckFailed
    from .jobs.drift import DriftConfig, run_check

    result = run_check(DriftConfig.load(config))
    _print_drift(result, as_json)
    if result["breached"]:
        raise CheckFailed(f"drift: {result['reason']}")


@drift.command("watch")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--every", default="1h", show_default=True, help="Interval: 30s, 15m, 1h, 1d.")
@click.option("--max-runs", type=POSITIVE_INT, default=None, help="Stop after this many runs.")
@click.option("--stop-on-breach", is_flag=True, help="Exit 1 at the first breach instead of continuing.")
@json_option
@handle_errors
def drift_watch(config, every, max_runs, stop_on_breach, as_json):
    """Run the check on a schedule until interrupted."""
    import time as _time

    from .errors import CheckFailed
    from .jobs.drift import DriftConfig, parse_every, run_check

    interval = parse_every(every)
    cfg = DriftConfig.load(config)
    runs = 0
    while True:
        started = _time.monotonic()
        result = run_check(cfg)
        _print_drift(result, as_json)
        runs += 1
        if result["breached"] and stop_on_breach:
            raise CheckFailed(f"drift: {result['reason']}")
        if max_runs is not None and runs >= max_runs:
            return
        _time.sleep(max(0.0, interval - (_time.monotonic() - started)))


@drift.command("history")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--plot", "plot_path", default=None, type=click.Path(dir_okay=False), help="Write an HTML plot.")
@json_option
@handle_errors
def drift_history(config, plot_path, as_json):
    """Show past runs (and plot them)."""
    from pathlib import Path

    from rich import box
    from rich.table import Table

    from .jobs.drift import DriftConfig, History
    from .render.html import drift_history_html

    cfg = DriftConfig.load(config)
    rows = History(cfg.history).rows()
    if plot_path:
        Path(plot_path).write_text(drift_history_html(cfg.name, rows), encoding="utf-8")
    if as_json:
        _print_json(rows)
        return
    # figures in a table that fits a terminal of 80 columns; a breach's reason is a sentence, printed under it
    table = Table(title=f"drift history: {cfg.name} ({len(rows)} runs)", box=box.SIMPLE_HEAD)
    for col in ("run", "at (UTC)", "residual", "retention", "centroid", "MMD p", "status"):
        table.add_column(col, no_wrap=True)

    def fmt(m, k):
        return "-" if k not in m else "unreliable" if m[k] is None else f"{m[k]:.4g}"

    for r in rows:
        m = r["measures"]
        table.add_row(str(r["id"]), r["at"][:16].replace("T", " "), fmt(m, "residual_ratio"), fmt(m, "retention"),
                      fmt(m, "centroid_shift"), fmt(m, "mmd_pvalue"), "BREACH" if r["breached"] else "ok")
    console = _console()
    console.print(table)
    for r in rows:
        if r["breached"]:
            console.print(f"run {r['id']}: {r['reason']}")


@main.command()
@click.argument("target")
@json_option
@handle_errors
def info(target, as_json):
    """Describe a collection (URL) or an alignment file."""
    from .runtime.open import describe

    data = describe(target)
    if as_json:
        _print_json(data)
    else:
        _console().print_json(json.dumps(data, default=_json_default))


@main.command()
@click.option("--workdir", default="vecbridge-demo", show_default=True, type=click.Path(file_okay=False),
              help="Where the demo's collections and alignment are written.")
@json_option
@handle_errors
def demo(workdir, as_json):
    """Upgrade a bundled real MiniLM collection to MPNet without re-embedding it: fit, migrate, verify, measure."""
    from .jobs.demo import run_demo

    con = _console(stderr=True)
    result = run_demo(workdir, step=(lambda s: None) if as_json else (lambda s: con.print(f"[dim]-[/] {s}")))
    if as_json:
        _print_json(result)
        return
    _print_demo(result)


def _print_demo(r: dict):
    from rich.table import Table

    con = _console()
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


@main.group()
def upgrade():
    """Move a live collection to a new model: map now, re-embed in the background, cut over, roll back."""


def _state_option(required: bool = True):
    return click.option("--state", "state_path", required=required, type=click.Path(dir_okay=False),
                        help="The upgrade's state file" + (" (the one `upgrade start` wrote)." if required else
                                                           " (default: <collection>.upgrade.sqlite here)."))


def _print_upgrade(status: dict, as_json: bool, headline: str | None = None):
    from rich.markup import escape

    if as_json:
        _print_json(status)
        return
    con = _console()
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
    if c["no-text"]:
        con.print(f"  {c['no-text']:,} records without text in {status.get('text_field', 'the text field')!r} keep "
                  f"their mapped vectors (no native vector until they get text)")
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
    if status.get("dropped"):
        con.print(f"  dropped {status['dropped']}")
    p = status.get("probe")
    if p:
        con.print(f"  Recall@{p['k']} on {p['n_queries']:,} probe queries at {p['native_fraction']:.0%} native: served "
                  f"{p['served']:.3f}, new model alone {p['new_model_only']:.3f}, staying on the old model "
                  f"{p['staying']:.3f}")


def _print_plan(p: dict, con) -> None:
    from rich.table import Table

    con.print(f"{p['source']}: {p['count']:,} records ({p['with_text']:.0%} with text), {p['dim']}d")
    con.print(f"{p['model']}: {p['seconds_per_text'] * 1000:.1f} ms per text here; a full re-embed takes about "
              f"{p['full_reembed_seconds'] / 3600:.2f} h")
    pr = p.get("predicted")
    if pr:
        table = Table(title=f"predicted Recall@{pr['k']} of {pr['queries']:,} queries among {pr['pool']:,} records "
                            f"(map: {pr['method']} on {pr['fit_sample']:,} re-embedded texts)")
        for col in ("stage", "native", "new model", "fused with the old model", "old-query weight"):
            table.add_column(col, justify="left" if col == "stage" else "right")
        table.add_row("stay on the old model", "-", "-", f"{pr['staying']:.3f}", "-")
        for st in pr["stages"]:
            f = st["native_fraction"]
            name = "start (mapped)" if f == 0 else "full re-embed" if f == 1 else f"{f:.0%} re-embedded"
            table.add_row(name, f"{f:.0%}", f"{st['recall']:.3f}", f"{st['recall_fused']:.3f}", str(st["beta"]))
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
@click.option("--method", type=click.Choice(list(METHODS)), default="orthogonal", show_default=True,
              help="The alignment method `upgrade start` will fit.")
@json_option
@handle_errors
def upgrade_plan(source_url, model, text_field, sample, queries_url, old_queries_url, pool, fit_sample, method,
                 as_json):
    """Dry run: what re-embedding SOURCE_URL costs here and, given queries, what each stage serves. Writes nothing."""
    from .jobs.upgrade import plan

    step = _steps(as_json)
    progress, task = _progress(not as_json, "re-embedding to predict", None)
    with progress:
        p = plan(source_url, model=model, text_field=text_field, sample=sample, queries=queries_url,
                 old_queries=old_queries_url, pool=pool, fit_sample=fit_sample, method=method, on_step=step,
                 on_start=lambda n: progress.update(task, total=n), on_progress=lambda n: progress.advance(task, n))
    if as_json:
        _print_json(p)
        return
    _print_plan(p, _console())


@upgrade.command("start")
@click.argument("source_url")
@click.option("--to-model", "model", required=True, help="The new model: a name, a local path or module:function.")
@click.option("--text-field", default="text", show_default=True, help="Payload field with each record's text.")
@click.option("--field", default=None, help="New vector field of SOURCE for the new vectors (pgvector, Qdrant).")
@click.option("--to", "target_url", default=None, help="New collection for the new vectors (other stores).")
@click.option("--alignment", "alignment_path", default=None, type=click.Path(dir_okay=False),
              help="Use this alignment instead of fitting one on a re-embedded sample.")
@click.option("--fit-sample", type=POSITIVE_INT, default=2000, show_default=True,
              help="Stored texts re-embedded to fit the map (they are kept as native vectors).")
@click.option("--method", type=click.Choice(list(METHODS)), default="orthogonal", show_default=True,
              help="Alignment method fitted on the re-embedded sample (clustered keeps more quality).")
@click.option("--overwrite", is_flag=True,
              help="Drop and recreate the --to collection if it exists (never the source, nor a field of it).")
@_state_option(required=False)
@json_option
@handle_errors
def upgrade_start(source_url, model, text_field, field, target_url, alignment_path, fit_sample, method, overwrite,
                  state_path, as_json):
    """Fit the map, write mapped vectors beside the old ones and stamp every record (the old vectors stay)."""
    from .jobs.upgrade import start

    if (field is None) == (target_url is None):
        raise click.UsageError("say where the new vectors go: --field NAME (a new vector field of SOURCE_URL) or "
                               "--to URL (a new collection), one of them")
    step = _steps(as_json)
    status = start(source_url, model=model, text_field=text_field, field=field, to=target_url,
                   alignment=alignment_path, method=method, fit_sample=fit_sample, state_path=state_path,
                   overwrite=overwrite, on_step=step)
    _print_upgrade(status, as_json, f"[bold green]started[/]: state in {status['state']}")


@upgrade.command("reembed")
@_state_option()
@click.option("--limit", type=POSITIVE_INT, default=None, help="Re-embed at most N records in this run.")
@click.option("--until", type=click.FloatRange(0, 1, min_open=True), default=None,
              help="Stop when this fraction of the collection is native.")
@click.option("--budget-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop after this many seconds.")
@click.option("--priority", type=click.Choice(list(PRIORITIES)), default="random", show_default=True,
              help="Order of re-embedding: a fixed shuffle; the mapped vectors expected to be worst (residual) or "
                   "attracting the most queries (hubs) first; the records a query log retrieves most (queries; "
                   "after `upgrade query-log`).")
@click.option("--batch-size", type=POSITIVE_INT, default=64, show_default=True, help="Texts per call to the model.")
@click.option("--max-per-second", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Rate limit (texts per second), e.g. for an API model.")
@click.option("--price-per-1k", type=click.FloatRange(min=0), default=None,
              help="What the model costs per 1,000 texts (an API model): the upgrade's spend is kept across runs.")
@click.option("--spend-cap", type=click.FloatRange(min=0), default=None,
              help="Stop before the upgrade's total spend would exceed this (with --price-per-1k).")
@engine_options("batches embedded and written by Ray actors, each loading the model once")
@json_option
@handle_errors
def upgrade_reembed(state_path, limit, until, budget_seconds, priority, batch_size, max_per_second, price_per_1k,
                    spend_cap, engine, ray_address, workers, as_json):
    """Replace mapped vectors by the new model's own (resumable: run it again after any interruption)."""
    from .jobs.upgrade import open_upgrade

    progress, task = _progress(not as_json, "re-embedding", None)
    with open_upgrade(state_path) as up, progress:
        run = up.reembed
        if engine == "ray":
            from .jobs.distributed_reembed import reembed_on_ray

            run = functools.partial(reembed_on_ray, up, workers=workers, ray_address=ray_address)
        result = run(limit=limit, until=until, budget_seconds=budget_seconds, priority=priority,
                     batch_size=batch_size, max_per_second=max_per_second, price_per_1k=price_per_1k,
                     spend_cap=spend_cap,
                     on_start=lambda n: progress.update(task, total=n),
                     on_progress=lambda n: progress.advance(task, n))
    _print_upgrade(result, as_json, f"[bold green]re-embedded[/] {result['reembedded']:,} records in "
                                    f"{result['seconds']:.1f} s (the source: {result['new_in_source']:,} added, "
                                    f"{result['changed_in_source']:,} changed, {result['removed_from_source']:,} "
                                    f"removed since the last run)"
                   + (f"; {result['without_text']:,} without text in {result['text_field']!r} keep their mapped "
                      f"vectors" if result["without_text"] else "")
                   + (f"; stopped by the {result['stopped_by']}" if result["stopped_by"] != "done" else "")
                   + (f"; spent {result['spent']:.2f} in all" if price_per_1k is not None else ""))


@upgrade.command("status")
@_state_option()
@click.option("--queries", "queries_url", default=None,
              help="Measure quality now on these new-model queries (id = each query's relevant record's id).")
@click.option("--old-queries", "old_queries_url", default=None, help="The same queries in the old model.")
@json_option
@handle_errors
def upgrade_status(state_path, queries_url, old_queries_url, as_json):
    """Stage, serving model, how many records are native, mapped or waiting, and the quality last measured."""
    from .jobs.upgrade import measure, open_upgrade

    if (queries_url is None) != (old_queries_url is None):
        raise click.UsageError("measuring needs --queries and --old-queries together")
    if queries_url:
        _print_upgrade(measure(state_path, queries_url, old_queries_url), as_json)
        return
    with open_upgrade(state_path) as up:
        up.settle()   # a finalize --drop-old killed after its drop: recorded now
        status = up.status()
        if status["stage"] not in ("starting", "finalized") and not status.get("dropping"):
            status["source_changes"] = up.changes()
        _print_upgrade(status, as_json)


@upgrade.command("search")
@_state_option()
@click.argument("texts", nargs=-1, required=True)
@click.option("-k", "k", type=POSITIVE_INT, default=10, show_default=True, help="Results per query.")
@click.option("--old-model", default=None,
              help="Also encode each query with the old model and fuse the scores (keeps more quality while the "
                   "old model is the better retriever).")
@click.option("--beta", type=click.FloatRange(min=0), default=None,
              help="Weight of the old-model query in the fusion (default: the one `upgrade tune` chose, else 1).")
@click.option("--hub-weight", type=click.FloatRange(min=0), default=None,
              help="Hub penalty: subtract this times each record's hub score (default: what `upgrade tune` chose).")
@json_option
@handle_errors
def upgrade_search(state_path, texts, k, old_model, beta, hub_weight, as_json):
    """Search the upgrade's vectors with query TEXTS encoded by the new model, at any stage."""
    from rich.markup import escape

    from .jobs.upgrade import open_upgrade
    from .serving.wrap import attach_field

    with open_upgrade(state_path) as up:
        ids, scores = up.search(list(texts), k, old_model=old_model, beta=beta, hub_weight=hub_weight)
        rows = [[{"id": i, "score": float(s), "source": up.source.display_url} for i, s in zip(r, sc)]
                for r, sc in zip(ids, scores)]
        attach_field(rows, {up.source.display_url: up.source}, up.meta["text_field"])
    if as_json:
        _print_json(rows)
        return
    con = _console()
    for text, hits in zip(texts, rows):
        con.print(f"[bold]{escape(text)}[/]", markup=True)
        for rank, h in enumerate(hits, 1):
            shown = f"  {escape(_snippet(h['text']))}" if "text" in h else ""
            con.print(f"  {rank:3d}. {escape(str(h['id']))}  {h['score']:.4f}{shown}", markup=True)


@upgrade.command("tune")
@_state_option()
@click.option("--queries", "queries_url", required=True,
              help="New-model query vectors (id = the id of each query's relevant record).")
@click.option("--old-queries", "old_queries_url", required=True, help="The same queries in the old model.")
@click.option("-k", "k", type=POSITIVE_INT, default=10, show_default=True, help="Results per query.")
@json_option
@handle_errors
def upgrade_tune(state_path, queries_url, old_queries_url, k, as_json):
    """Choose the fusion and hub-penalty weights on queries with known answers, never below staying."""
    from .jobs.upgrade import tune

    result = tune(state_path, queries_url, old_queries_url, k=k)
    if as_json:
        _print_json(result)
        return
    _console().print(f"fusion weight beta = {result['beta']}, hub penalty weight {result['hub_weight']}: "
                     f"Recall@{k} {result['recall']:.3f} on "
                     f"{result['n_queries']:,} queries (new model alone {result['new_model_only']:.3f}, staying on "
                     f"the old model {result['staying']:.3f}); `upgrade search --old-model` uses it")


@upgrade.command("query-log")
@_state_option()
@click.option("--queries", "queries_url", required=True,
              help="A sample of your query log, encoded by the new model (a collection of query vectors).")
@click.option("-k", "k", type=POSITIVE_INT, default=10, show_default=True, help="Results per query.")
@json_option
@handle_errors
def upgrade_query_log(state_path, queries_url, k, as_json):
    """Score every record against logged queries: the hubs and queries priorities, and the hub penalty."""
    from .jobs.upgrade import learn_queries

    result = learn_queries(state_path, queries_url, k=k)
    _print_upgrade(result, as_json, f"[bold green]scored[/] {result['records_scored']:,} records against "
                                    f"{result['queries']:,} logged queries ({result['records_retrieved']:,} "
                                    f"retrieved by at least one)")


def _upgrade_move(name: str, doc: str):
    @upgrade.command(name, help=doc)
    @_state_option()
    @json_option
    @handle_errors
    def command(state_path, as_json):
        from rich.markup import escape

        from .jobs.upgrade import open_upgrade

        with open_upgrade(state_path) as up:
            status = getattr(up, name)()
        via = escape(status["serving_via"])
        headline = (f"[bold green]{name}[/]: the {status['serving']} model's vectors are served through {via}"
                    if not via.startswith("nothing switched") else
                    f"[bold yellow]{name}[/] recorded, but {via}")
        _print_upgrade(status, as_json, headline)

    return command


_upgrade_move("cutover", "Serve the new model's vectors (pgvector: the <table>_serving view, switched atomically).")
_upgrade_move("rollback", "Serve the old model's vectors again, exactly as before the upgrade.")
@upgrade.command("finalize")
@_state_option()
@click.option("--drop-old", is_flag=True,
              help="Also remove the old vectors: the old vector column (pgvector) or the old collection (also "
                   "after a plain finalize).")
@click.option("--yes", is_flag=True, help="With --drop-old: do not ask for confirmation.")
@json_option
@handle_errors
def upgrade_finalize(state_path, drop_old, yes, as_json):
    """End the upgrade after a cutover, once every record is native (the old vectors stay unless --drop-old)."""
    from .jobs.upgrade import open_upgrade

    if drop_old and not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("--drop-old removes the old model's vectors for good: pass --yes to confirm "
                                   "(there is no terminal to ask)")
        if not click.confirm("Drop the old model's vectors for good? Rollback will no longer be possible",
                             err=True):
            _emit_error("nothing dropped: not confirmed", 1)
    with open_upgrade(state_path) as up:
        status = up.finalize(drop_old=drop_old)
    _print_upgrade(status, as_json, "[bold green]finalize[/]")


if __name__ == "__main__":  # pragma: no cover
    main()
