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
from ..secrets import environment_secrets, redact_text, scrub, secrets_in

EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

#: commands whose interrupted runs continue with --resume
RESUMABLE = ("migrate", "merge")

_JSON = "vecbridge.json"
_SECRETS = "vecbridge.secrets"


def given_secrets() -> list[str]:
    """The literal secrets this command was given, in its arguments (URLs' passwords, secret query values) and in
    the environment (``PGPASSWORD``, ``MILVUS_TOKEN`` ...): no line it prints may show one, whoever wrote the line
    (a client library's error, click's own usage error quoting an argument)."""
    ctx = click.get_current_context(silent=True)
    return [*(ctx.meta.get(_SECRETS, ()) if ctx else ()), *environment_secrets()]


def redacted(text: str) -> str:
    """``text`` without a secret this command was given, nor any other (a document it writes: HTML, a plot)."""
    return redact_text(text, given_secrets())


def fail(message: str, code: int):
    """One line on stderr (without a secret), then exit with ``code``."""
    print_error(redacted(message))
    sys.exit(code)


@contextlib.contextmanager
def reported(ctx: click.Context):
    """Every expected failure of the subcommand ``ctx`` runs as one line on stderr and a meaningful exit code; its
    warnings as lines too."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            # a file some library left open, noticed when it is collected: the interpreter's hygiene, not the
            # user's (Python hides these by default), and it would interleave with the command's output
            warnings.simplefilter("ignore", ResourceWarning)
            warnings.showwarning = lambda msg, cat, *a, **k: print_warning(redacted(str(msg)))
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
    except click.ClickException as exc:   # click prints it: a usage error may quote an argument
        exc.message = redacted(exc.message)
        raise
    except click.exceptions.Exit:
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
        print_json(scrub(result, given_secrets()))
    else:
        render(result, *args)


def model_line(models) -> None:
    """The model's throughput (``models``: :class:`vecbridge.runtime.models.ModelOptions`) as a step line on
    stderr, for a command whose JSON is a list of hits and cannot carry it; nothing with ``--json``."""
    from ..render.console import steps
    from ..render.models import throughput

    line = throughput(models.summary())
    if line:
        steps(json_mode())(line)


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

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # the outermost group sees every argument: their secrets, for every line the command prints
        ctx.meta.setdefault(_SECRETS, secrets_in(*args))
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        # the subcommand is parsed and run inside: a bad value of a parameter type is reported like any input
        with reported(ctx):
            return super().invoke(ctx)


#: ``@command()``: a :class:`Command`; ``@group()``: a :class:`Group`
command = functools.partial(click.command, cls=Command)
group = functools.partial(click.group, cls=Group)
