"""``report``: before anything is written, will the upgrade work and how much retrieval quality is kept?"""
from __future__ import annotations

import click

from ..jobs.link import UNPAIRED_SAMPLE
from ..jobs.report import FAILING, REPORT_SAMPLE
from ..render.console import steps as step_lines
from .group import command, emit, json_mode, redacted
from .options import POSITIVE_INT, engine_options, method_option, model_options, pairs_option


@command()
@click.argument("old_url")
@click.argument("new_url", required=False)
@pairs_option("ids", "field", "file", "reembed", "geh", "unsupervised", default=None)
@method_option("The alignment method you will fit: held-out quality and retrieval are measured with it.")
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
@click.option("--sample", type=POSITIVE_INT, default=None,
              help=f"Records sampled from the collections [default: {REPORT_SAMPLE:,} pairs; {UNPAIRED_SAMPLE:,} "
                   f"records per side for geh and unsupervised, as fit reads them].")
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
@click.option("--fail-on", type=click.Choice(list(FAILING)), default=None,
              help="Exit 1 when the verdict is this bad (for CI gates).")
@engine_options("a uniform sample of --sample of all the pairs sharing an id or a payload key, drawn by Ray tasks "
                "over key ranges of OLD")
@model_options
def report(old_url, new_url, pairs, method, key, model, text_field, seeds, queries_url, old_queries_url, sample, seed,
           center, target_retention, unsupervised, old_model_retired, html_path, fail_on, engine, models):
    """Dry-run compatibility report: will the upgrade work, and how much retrieval quality is kept?"""
    from pathlib import Path

    from ..errors import CheckFailed
    from ..jobs.report import compatibility_report
    from ..render.html import render_html
    from ..render.report import report as show

    rep = compatibility_report(old_url, new_url, sample=sample, seed=seed, pairs=pairs, method=method, key=key,
                               model=model, text_field=text_field, seeds=seeds, queries_new=queries_url,
                               queries_old=old_queries_url, center=center, unsupervised=unsupervised,
                               target_retention=target_retention, old_model_retired=old_model_retired,
                               on_step=step_lines(json_mode()), engine=engine, models=models)
    if html_path:
        Path(html_path).write_text(redacted(render_html(rep)), encoding="utf-8")
    emit(rep, show, html_path)
    if rep.verdict.verdict in FAILING.get(fail_on, ()):
        raise CheckFailed(f"verdict {rep.verdict.verdict}: {rep.verdict.reason}")
