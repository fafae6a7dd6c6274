"""``info`` describes a collection or an alignment file; ``demo`` runs the main job on the bundled sample."""
from __future__ import annotations

import click

from ..render.console import pretty_json
from ..render.console import steps as step_lines
from .group import command, emit, json_mode


@command()
@click.argument("target")
def info(target):
    """Describe a collection (URL) or an alignment file."""
    from ..runtime.open import describe

    emit(describe(target), pretty_json)


@command()
@click.option("--workdir", default="vecbridge-demo", show_default=True, type=click.Path(file_okay=False),
              help="Where the demo's collections and alignment are written.")
def demo(workdir):
    """Upgrade a bundled real MiniLM collection to MPNet without re-embedding it: fit, migrate, verify, measure."""
    from ..jobs.demo import run_demo
    from ..render.demo import demo as show

    emit(run_demo(workdir, step=step_lines(json_mode())), show)
