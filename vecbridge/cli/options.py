"""Options and parameter types that several commands share, each spelt once."""
from __future__ import annotations

import functools

import click

from ..errors import InputError
from ..jobs.fit import METHODS
from ..secrets import redact_url

#: counts and sizes: zero or a negative number is a usage error (exit 2), never silently "the default"
POSITIVE_INT = click.IntRange(min=1)

#: the pairings read from stored records or a file (no model to run)
STORED_PAIRS = ("ids", "field", "file")

_PAIRINGS = {"ids": "ids (same id)", "field": "field:NAME (same payload value)",
             "file": "file:PATH (CSV/JSON of id pairs, or a links .npz)", "reembed": "reembed (with --model)",
             "reference": "reference:PATH (with --old-model and --model)", "geh": "geh:PATH (seed id pairs)",
             "unsupervised": "unsupervised (nothing shared: mini-vec2vec)"}


#: the one override of the space check made before a map is applied (vecbridge.runtime.provenance)
force_space_option = click.option(
    "--force", is_flag=True,
    help="Apply the map even where a collection does not look like the space the map expects on its side (or holds "
         "more than one space); the override is recorded in the result and the written collection's stamp.")


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


class Rerank(click.ParamType):
    """A number of candidates (0 or more), or ``auto``: a tuning measures how many are worth re-scoring."""

    name = "rerank"

    def __init__(self, minimum: int = 0):
        self.minimum = minimum

    def get_metavar(self, param, ctx=None) -> str:
        return "K|auto"

    def convert(self, value, param, ctx):
        if value == "auto" or isinstance(value, int) and value >= self.minimum:
            return value
        if str(value).isdigit() and int(value) >= self.minimum:
            return int(value)
        self.fail(f"{value!r} is not a number of candidates ({self.minimum} or more) or 'auto'", param, ctx)


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


def prefix_option(side: str, which: str):
    """``--source-prefix`` / ``--target-prefix KIND=TEXT`` (repeatable): the prefix the side's model puts before each
    kind of text (``query="query: "``), recorded in that side's space fingerprint."""
    return click.option(f"--{side}-prefix", f"{side}_prefixes", multiple=True, metavar="KIND=TEXT",
                        type=KeyValue(f"--{side}-prefix"), callback=lambda ctx, param, pairs: dict(pairs),
                        help=f"A prefix the {which} model's texts carry, e.g. query='query: ' (repeatable; recorded "
                             f"in the artifact's fingerprint of its space).")


class WrapSpec(click.ParamType):
    """``OLD_URL=ALIGNMENT`` to ``(url, alignment)``: an old-model collection searched through an alignment."""

    name = "old_url=alignment"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        url, sep, align = value.rpartition("=")
        if not sep or not url:
            raise InputError(f"--wrap takes OLD_URL=ALIGNMENT, got {redact_url(value)!r}")
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


def model_options(fn):
    """``--device``, ``--model-batch-size`` and ``--precision``: where a command's models run, given to it as one
    ``models`` (:class:`vecbridge.runtime.models.ModelOptions`, which also keeps their throughput). One spelling for
    every command that runs a model; ``--model-batch-size``, because ``--batch-size`` already means records per
    store write where a command has it."""
    from ..runtime.models import CPU_BATCH, DEVICES, GPU_BATCH, PRECISIONS

    @functools.wraps(fn)
    def with_models(*args, device: str, model_batch_size: int | None, precision: str, **kwargs):
        from ..runtime.models import ModelOptions

        return fn(*args, models=ModelOptions(device, model_batch_size, precision), **kwargs)

    for option in reversed([
        click.option("--device", type=click.Choice(list(DEVICES)), default="auto", show_default=True,
                     help="Where the model runs: auto takes a CUDA GPU (else Apple's mps) when PyTorch sees one, "
                          "else the CPU; cuda where there is none is an error. A module:function model runs where "
                          "its own code puts it."),
        click.option("--model-batch-size", type=POSITIVE_INT, default=None,
                     help=f"Texts per forward pass of the model [default: {GPU_BATCH} on a GPU, {CPU_BATCH} on the "
                          f"CPU]."),
        click.option("--precision", type=click.Choice(list(PRECISIONS)), default="auto", show_default=True,
                     help="auto: fp16 on a CUDA GPU (faster), fp32 elsewhere; fp32 forces full precision."),
    ]):
        with_models = option(with_models)
    return with_models


def state_option(required: bool = True):
    """``--state``: an upgrade's state file."""
    return click.option("--state", "state_path", required=required, type=click.Path(dir_okay=False),
                        help="The upgrade's state file" + (" (the one `upgrade start` wrote)." if required else
                                                           " (default: <collection>.upgrade.sqlite here)."))
