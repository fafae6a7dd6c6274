"""The command classes: every command takes ``--json``, and every failure becomes one line and an exit code, here
and nowhere else.

A command's callback reads the mode with :func:`json_mode` (a quiet run: no progress bar, no step lines) and prints
its result with :func:`emit` (the JSON document, or the human rendering of :mod:`vecbridge.render`).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import sys
import warnings

import click

from ..errors import InputError, StoreError, VecbridgeError
from ..render.console import print_error, print_json, print_warning

EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

#: commands whose interrupted runs continue with --resume
RESUMABLE = ("migrate", "merge")

_JSON = "vecbridge.json"


def fail(message: str, code: int):
    """One line on stderr, then exit with ``code``."""
    print_error(message)
    sys.exit(code)


@contextlib.contextmanager
def reported(ctx: click.Context):
    """Every expected failure of the subcommand ``ctx`` runs as one line on stderr and a meaningful exit code; its
    warnings as lines too."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = lambda msg, cat, *a, **k: print_warning(msg)
            yield
    except VecbridgeError as exc:
        fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        resumable = ctx.invoked_subcommand in RESUMABLE
        hint = "; rerun the same command with --resume to continue where it stopped" if resumable else ""
        fail(f"interrupted{hint}", EXIT_INTERRUPTED)
    except PermissionError as exc:   # a file we were not allowed to touch: the user's to fix, not a bug
        where = f" {exc.filename}" if exc.filename else ""
        fail(f"permission denied:{where} ({exc.strerror or exc})", StoreError.exit_code)
    except sqlite3.OperationalError as exc:   # a state or history database that cannot be opened or written
        fail(f"cannot open or write a database file ({exc}): check that the file and its folder are writable",
             StoreError.exit_code)
    except sqlite3.DatabaseError as exc:   # not a database, or a damaged one: the user's file, not a bug
        fail(f"a database file is damaged or is not one ({exc})", InputError.exit_code)
    except json.JSONDecodeError as exc:   # JSON read from a file the user gave: bad input, not a bug
        fail(f"invalid JSON in an input file ({exc})", InputError.exit_code)
    except (click.exceptions.Exit, click.ClickException):
        raise
    except Exception as exc:  # an unexpected bug: still one line unless debugging
        if os.environ.get("VECBRIDGE_DEBUG"):
            raise
        fail(f"internal error: {type(exc).__name__}: {exc} (set VECBRIDGE_DEBUG=1 for details)", EXIT_INTERNAL)


def json_mode() -> bool:
    """Whether the command running was given ``--json``."""
    return click.get_current_context().meta.get(_JSON, False)


def emit(result, render, *args) -> None:
    """``result`` as one JSON document with ``--json``, else ``render(result, *args)`` for a person."""
    if json_mode():
        print_json(result)
    else:
        render(result, *args)


class Command(click.Command):
    """A command with ``--json`` (its last option): the flag goes to :func:`json_mode`, not to the callback."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.params.append(click.Option(
            ["--json", "as_json"], is_flag=True,
            help="Print the result as one JSON document on stdout (machine-readable), no tables."))

    def invoke(self, ctx: click.Context):
        ctx.meta[_JSON] = ctx.params.pop("as_json", False)
        return super().invoke(ctx)


class Group(click.Group):
    """A group of :class:`Command` (and of groups like itself) whose subcommand runs under :func:`reported`."""

    command_class = Command
    group_class = type   # a subgroup is a Group too

    def invoke(self, ctx: click.Context):
        # the subcommand is parsed and run inside: a bad value of a parameter type is reported like any input
        with reported(ctx):
            return super().invoke(ctx)


#: ``@command()``: a :class:`Command`; ``@group()``: a :class:`Group`
command = functools.partial(click.command, cls=Command)
group = functools.partial(click.group, cls=Group)
