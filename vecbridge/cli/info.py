"""``info`` describes a collection or an alignment file; ``demo`` runs the main job on the bundled sample."""
from __future__ import annotations

from pathlib import Path

import click

from ..render.console import pretty_json
from ..render.console import steps as step_lines
from .group import command, emit, json_mode
from .options import POSITIVE_INT


@command()
@click.argument("target")
@click.option("--space", is_flag=True,
              help="Estimate from a sample which known embedding space the collection is in, and what share of it "
                   "looks like each (a collection half re-embedded shows as mixed).")
@click.option("--alignment", "alignments", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="With --space: an alignment whose two spaces are known spaces too (repeatable).")
@click.option("--sample", type=POSITIVE_INT, default=1000, show_default=True, help="With --space: vectors sampled.")
def info(target, space, alignments, sample):
    """Describe a collection (URL) or an alignment file."""
    from ..runtime.open import describe

    if alignments and not space:
        raise click.UsageError("--alignment goes with --space")
    if not space:
        emit(describe(target), pretty_json)
        return
    from ..runtime.open import load_alignment, open_collection
    from ..runtime.provenance import space_report

    known = [(Path(a).name, load_alignment(a)[0]) for a in alignments]
    emit(space_report(open_collection(target), known, n=sample), pretty_json)


@command()
@click.option("--workdir", default="vecbridge-demo", show_default=True, type=click.Path(file_okay=False),
              help="Where the demo's collections and alignment are written.")
def demo(workdir):
    """Upgrade a bundled real MiniLM collection to MPNet without re-embedding it: fit, migrate, verify, measure."""
    from ..jobs.demo import run_demo
    from ..render.demo import demo as show

    emit(run_demo(workdir, step=step_lines(json_mode())), show)
