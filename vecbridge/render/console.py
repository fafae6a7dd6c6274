"""The terminal: rich consoles, JSON documents, progress bars, step, warning and error lines, defined once."""
from __future__ import annotations

import json

import click


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def print_json(obj) -> None:
    """``obj`` as one indented JSON document on stdout (a job's result dataclass through its ``as_dict``)."""
    click.echo(json.dumps(obj, indent=2, default=json_default))


def pretty_json(obj) -> None:
    """``obj`` as coloured, indented JSON for a person."""
    console().print_json(json.dumps(obj, default=json_default))


def json_default(o):
    import numpy as np

    if hasattr(o, "as_dict"):   # a job's result dataclass
        return o.as_dict()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def print_error(message: str) -> None:
    from rich.markup import escape

    console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)


def print_warning(message) -> None:
    from rich.markup import escape

    console(stderr=True).print(f"[yellow]warning:[/] {escape(str(message))}", markup=True, soft_wrap=True)


def steps(quiet: bool):
    """The ``on_step`` callback of a job: each step as a dim line on stderr, nothing with ``--json``."""
    if quiet:
        return lambda s: None
    con_err = console(stderr=True)
    return lambda s: con_err.print(f"[dim]-[/] {s}")


def progress(enabled: bool, description: str, total: int | None):
    """A rich progress bar on stderr (rate and ETA) and its task; a no-op when disabled."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), console=console(stderr=True),
                   disable=not enabled, transient=True)
    task = bar.add_task(description, total=total, rate="")
    return bar, task


def snippet(value, width: int = 80) -> str:
    """A stored text on one line, cut to ``width`` characters."""
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[:width - 1] + "…"
