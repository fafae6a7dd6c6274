"""``drift run|watch|history``: scheduled checks that a deployed alignment still fits the data."""
from __future__ import annotations

import click

from ..render import drift as show
from .group import emit, group, redacted
from .options import POSITIVE_INT, force_space_option


@group()
def drift():
    """Scheduled drift checks defined in a TOML file (see vecbridge.runtime.drift_store)."""


@drift.command("run")
@click.argument("config", type=click.Path(dir_okay=False))
@force_space_option
def drift_run(config, force):
    """Run the check once (for cron or CI); exit 1 on a breach."""
    from ..errors import CheckFailed
    from ..jobs.drift import DriftConfig, run_check

    result = run_check(DriftConfig.load(config), force=force)
    emit(result, show.check)
    if result["breached"]:
        raise CheckFailed(f"drift: {result['reason']}")


@drift.command("watch")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--every", default="1h", show_default=True, help="Interval: 30s, 15m, 1h, 1d.")
@click.option("--max-runs", type=POSITIVE_INT, default=None, help="Stop after this many runs.")
@click.option("--stop-on-breach", is_flag=True, help="Exit 1 at the first breach instead of continuing.")
@force_space_option
def drift_watch(config, every, max_runs, stop_on_breach, force):
    """Run the check on a schedule until interrupted."""
    from ..errors import CheckFailed
    from ..jobs.drift import DriftConfig, parse_every, watch

    for result in watch(DriftConfig.load(config), parse_every(every), max_runs=max_runs, force=force):
        emit(result, show.check)
        if result["breached"] and stop_on_breach:
            raise CheckFailed(f"drift: {result['reason']}")


@drift.command("history")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--plot", "plot_path", default=None, type=click.Path(dir_okay=False), help="Write an HTML plot.")
def drift_history(config, plot_path):
    """Show past runs (and plot them)."""
    from pathlib import Path

    from ..jobs.drift import DriftConfig, History
    from ..render.html import drift_history_html

    cfg = DriftConfig.load(config)
    rows = History(cfg.history).rows()
    if plot_path:
        Path(plot_path).write_text(redacted(drift_history_html(cfg.name, rows)), encoding="utf-8")
    emit(rows, show.history, cfg.name)
