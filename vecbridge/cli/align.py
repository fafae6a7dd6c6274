"""The verbs of an alignment: ``fit`` one, ``link`` records to fit on, ``evaluate`` one."""
from __future__ import annotations

import click

from ..jobs.fit import METHODS
from ..jobs.link import UNPAIRED_SAMPLE
from ..render import alignment as show
from ..render.console import progress
from ..render.console import steps as step_lines
from .group import command, emit, json_mode
from .options import (
    POSITIVE_INT,
    STORED_PAIRS,
    engine_options,
    method_option,
    model_options,
    pairs_option,
    params_option,
    prefix_option,
)


@command()
@click.option("--source", "source_url", default=None, help="Collection in the OLD model's space (URL).")
@click.option("--target", "target_url", default=None, help="Collection in the NEW model's space (URL).")
@pairs_option(*STORED_PAIRS, "geh", "unsupervised")
@method_option("; ".join(f"{m.name}: {m.help}" for m in METHODS.values()) + ".")
@click.option("--center/--no-center", default=False, show_default=True, help="Centre both sides before fitting.")
@click.option("--scale/--no-scale", default=False, show_default=True, help="Also fit a global scale.")
@click.option("--alpha", type=float, default=0.01, show_default=True, help="Ridge strength (relative), --method ridge.")
@click.option("--normalize", type=click.Choice(["none", "l2"]), default="none", show_default=True,
              help="L2-normalise vectors before fitting (and before applying).")
@click.option("--holdout", type=float, default=0.0, show_default=True,
              help="Fraction of pairs kept out of the fit (by id hash) for 'vecbridge evaluate'.")
@click.option("--max-pairs", type=POSITIVE_INT, default=None,
              help="Fit on a uniform sample of at most N source records (--pairs geh / unsupervised: N vectors sampled "
                   "per side) [geh / unsupervised: 10,000].")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the holdout split and any sampling.")
@click.option("--batch-size", type=POSITIVE_INT, default=2000, show_default=True, help="Records read per store call.")
@click.option("--source-model", default=None, help="Name of the old model (recorded in the artifact).")
@click.option("--target-model", default=None, help="Name of the new model (recorded in the artifact).")
@prefix_option("source", "old")
@prefix_option("target", "new")
@params_option("GEH / MiniVec2Vec parameter for --pairs geh:PATH / unsupervised (repeatable).")
@click.option("--force", is_flag=True,
              help="--pairs geh / unsupervised: save the map even when it fails validation (marked as failed).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the alignment.")
@engine_options("every stored pair streamed into sums by Ray tasks over key ranges of the source, one fit from "
                "their total (no --max-pairs, unsupervised or clustered)")
def fit(source_url, target_url, pairs, method, center, scale, alpha, normalize, holdout, max_pairs, seed,
        batch_size, source_model, target_model, source_prefixes, target_prefixes, params, force, output, engine):
    """Fit an alignment from SOURCE's embedding space to TARGET's and save it."""
    from ..jobs.fit import fit_to_file

    bar, task = progress(not json_mode(), "pairing and fitting", None)
    with bar:
        alignment, path = fit_to_file(
            output, source_url, target_url, pairs=pairs, method=method, center=center, scale=scale, alpha=alpha,
            normalization=normalize, holdout=holdout, max_pairs=max_pairs, seed=seed, batch_size=batch_size,
            source_model=source_model, target_model=target_model, params=params, force=force, engine=engine,
            source_prefixes=source_prefixes or None, target_prefixes=target_prefixes or None,
            on_start=lambda total: bar.update(task, total=total), on_batch=lambda n: bar.advance(task, n),
            on_step=step_lines(json_mode()))
    emit({"alignment": str(path), **alignment.summary()}, show.fitted)


@command()
@click.argument("source_url")
@click.argument("target_url", required=False)
@pairs_option(*STORED_PAIRS, "reembed", "reference", "geh", "unsupervised", default=None, aliases=("--mode",))
@click.option("--seeds", default=None, type=click.Path(dir_okay=False),
              help="Seed id pairs for GEH (the same as --pairs geh:PATH).")
@click.option("--model", default=None, help="New model (name, path or module:function) for reembed/reference.")
@click.option("--old-model", default=None, help="Old model, for --pairs reference:PATH.")
@click.option("--text-field", default="text", show_default=True, help="Payload field with the stored text.")
@click.option("--sample", type=POSITIVE_INT, default=UNPAIRED_SAMPLE, show_default=True,
              help="Records to sample per collection.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the sample and the linking method.")
@params_option("Estimator parameter for --pairs geh / unsupervised (repeatable), e.g. --param n_runs=10.")
@click.option("--force", is_flag=True,
              help="--pairs geh / unsupervised: write the links even when their map fails validation.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Links file: .csv or .json (id links) or .npz (any pairing; needed when links carry vectors).")
@model_options
def link(source_url, target_url, pairs, seeds, model, old_model, text_field, sample, seed, params, force, output,
         models):
    """Find correspondences between SOURCE (old model) and TARGET (new model) for 'vecbridge fit --pairs file:PATH'."""
    import numpy as np

    from ..errors import InputError
    from ..jobs.link import link as run_link

    if pairs is None:
        if not seeds:
            raise click.UsageError("say how records correspond with --pairs (e.g. --pairs ids)")
        pairs = "geh"

    links = run_link(source_url, target_url, pairs, seeds=seeds, model=model, old_model=old_model,
                     text_field=text_field, sample=sample, seed=seed, params=params, force=force,
                     on_step=step_lines(json_mode()), models=models)
    if len(links) == 0:
        raise InputError(f"--pairs {pairs} found no links")
    path = links.save(output)
    summary = {"links": str(path), "mode": links.mode, "n": len(links),
               "mean_confidence": float(np.mean(links.confidence)), "carries_vectors": links.has_vectors}
    if "validation" in links.meta:
        summary["validation"] = links.meta["validation"]
    if models.summary():
        summary["model_run"] = models.summary()
    emit(summary, show.linked)


@command()
@click.option("--alignment", "alignment_path", required=True, type=click.Path(dir_okay=False),
              help="The alignment artifact (.vb) written by `fit` or `link`.")
@click.option("--source", "source_url", required=True, help="Collection in the OLD model's space.")
@click.option("--target", "target_url", required=True, help="Collection in the NEW model's space.")
@pairs_option(*STORED_PAIRS)
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
def evaluate(alignment_path, source_url, target_url, pairs, queries_url, k, max_pairs, all_pairs, min_top1,
             min_retention, engine):
    """Measure an alignment on corresponding records (held out from the fit when it had a holdout)."""
    from ..errors import CheckFailed
    from ..jobs.evaluate import evaluate_alignment, threshold_failures
    from ..render.evaluation import evaluation

    result = evaluate_alignment(alignment_path, source_url, target_url, pairs=pairs, queries=queries_url, k=k,
                                max_pairs=max_pairs, use_holdout=not all_pairs, engine=engine)
    failures = threshold_failures(result, k, min_top1, min_retention)
    result.passed = not failures
    emit(result, evaluation)
    if failures:
        raise CheckFailed("; ".join(failures))
