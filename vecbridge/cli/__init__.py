"""Command line: a thin layer over the Python API (click + rich).

Exit codes: 0 success; 1 a check failed; 2 usage error (click); 3 bad input data; 4 store problem (unreachable,
credentials, missing/empty collection, missing client library); 5 bad alignment artifact; 70 internal error;
130 interrupted. Errors are one line on stderr; set ``VECBRIDGE_DEBUG=1`` to see the traceback of an internal error.

One module per verb group; :mod:`.group` handles ``--json`` and errors for every command, :mod:`.options` spells
the shared options once, and :mod:`vecbridge.render` prints the results.
"""
from __future__ import annotations

import click

from .._version import __version__
from .align import evaluate, fit, link
from .drift import drift
from .group import group
from .info import demo, info
from .report import report
from .rewrite import merge, migrate, verify
from .search import search
from .serve import serve
from .upgrade import upgrade

__all__ = ["main"]


@group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vecbridge")
def main():
    """Change embedding models without re-embedding your vector database."""


for _command in (fit, link, evaluate, migrate, merge, verify, search, report, drift, info, demo, upgrade, serve):
    main.add_command(_command)
