"""Options and parameter types that several commands share, each spelt once."""
from __future__ import annotations

import functools

import click

from ..errors import InputError
from ..jobs.fit import METHODS

#: counts and sizes: zero or a negative number is a usage error (exit 2), never silently "the default"
POSITIVE_INT = click.IntRange(min=1)

#: the pairings read from stored records or a file (no model to run)
STORED_PAIRS = ("ids", "field", "file")

_PAIRINGS = {"ids": "ids (same id)", "field": "field:NAME (same payload value)",
             "file": "file:PATH (CSV/JSON of id pairs, or a links .npz)", "reembed": "reembed (with --model)",
             "reference": "reference:PATH (with --old-model and --model)", "geh": "geh:PATH (seed id pairs)",
             "unsupervised": "unsupervised (nothing shared: mini-vec2vec)"}


class Pairing(click.ParamType):
    """How the records of two collections correspond (the grammar of :class:`vecbridge.linking.PairSpec`), limited
    to ``kinds``. The spelling goes to the job as given: the job reads it, and knows which pairings it can use."""

    name = "pairing"

    def __init__(self, *kinds: str):
        self.kinds = kinds

    def get_metavar(self, param, ctx=None) -> str:
        return "PAIRING"

    @property
    def help(self) -> str:
        return "How records correspond: " + " | ".join(_PAIRINGS[k] for k in self.kinds) + "."


def pairs_option(*kinds: str, default: str | None = "ids", aliases: tuple[str, ...] = ()):
    """The one ``--pairs`` option, limited to the pairings the command can use."""
    kind = Pairing(*kinds)
    return click.option("--pairs", *aliases, type=kind, default=default, show_default=default is not None,
                        metavar="PAIRING", help=kind.help)


class KeyValue(click.ParamType):
    """``KEY=VALUE`` to ``(key, value)``; the value read as JSON (numbers, true/false/null), else kept as text."""

    name = "key=value"

    def __init__(self, option: str):
        self.option = option

    def convert(self, value, param, ctx):
        import json

        if isinstance(value, tuple):
            return value
        key, sep, text = value.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{self.option} expects KEY=VALUE, got {value!r}")
        try:
            return key.strip(), json.loads(text)
        except ValueError:
            return key.strip(), text


def params_option(help: str):
    """``--param KEY=VALUE`` (repeatable): estimator parameters, as a dict."""
    return click.option("--param", "params", multiple=True, metavar="KEY=VALUE", type=KeyValue("--param"),
                        callback=lambda ctx, param, pairs: dict(pairs), help=help)


class WrapSpec(click.ParamType):
    """``OLD_URL=ALIGNMENT`` to ``(url, alignment)``: an old-model collection searched through an alignment."""

    name = "old_url=alignment"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        url, sep, align = value.rpartition("=")
        if not sep or not url:
            raise InputError(f"--wrap takes OLD_URL=ALIGNMENT, got {value!r}")
        return url, align


def method_option(help: str):
    """``--method``: the alignment method (:data:`vecbridge.align.methods.METHODS`)."""
    return click.option("--method", type=click.Choice(list(METHODS)), default="orthogonal", show_default=True,
                        help=help)


def engine_options(ray_does: str):
    """``--engine local|ray``, ``--ray-address`` and ``--workers``: one spelling for every job that can run on a Ray
    cluster, given to the command as one ``engine`` (:func:`vecbridge.runtime.engine.make_engine`); ``ray_does``
    says what the Ray engine does for this command."""
    def decorate(fn):
        @functools.wraps(fn)
        def with_engine(*args, engine: str, ray_address: str | None, workers: int, **kwargs):
            from ..runtime.engine import make_engine

            return fn(*args, engine=make_engine(engine, workers=workers, ray_address=ray_address), **kwargs)

        for option in reversed([
            click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                         help=f"local: one process; ray: {ray_does} (pip install 'vecbridge[ray]'; stores that "
                              f"several processes may open: file, pgvector, Milvus, Qdrant and Chroma servers)."),
            click.option("--ray-address", default=None, envvar="RAY_ADDRESS",
                         help="Ray cluster to run on with --engine ray (default: $RAY_ADDRESS, else a local Ray)."),
            click.option("--workers", type=POSITIVE_INT, default=2, show_default=True,
                         help="Ray tasks (or actors) at a time with --engine ray."),
        ]):
            with_engine = option(with_engine)
        return with_engine
    return decorate


def state_option(required: bool = True):
    """``--state``: an upgrade's state file."""
    return click.option("--state", "state_path", required=required, type=click.Path(dir_okay=False),
                        help="The upgrade's state file" + (" (the one `upgrade start` wrote)." if required else
                                                           " (default: <collection>.upgrade.sqlite here)."))
