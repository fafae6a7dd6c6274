"""``serve``: one upgrade, or one wrapped old collection, as an OpenAI-compatible HTTP service
(:mod:`vecbridge.service`); the command parses its options and starts uvicorn."""
from __future__ import annotations

import click

from .group import command, redacted
from .options import POSITIVE_INT, WrapSpec, force_space_option, model_options


@command()
@click.option("--state", "state_path", default=None, type=click.Path(dir_okay=False),
              help="An upgrade's state file: served at whatever stage it is in (stage changes made by other "
                   "processes are picked up without a restart).")
@click.option("--wrap", "wrapped", default=None, metavar="OLD_URL=ALIGNMENT", type=WrapSpec(),
              help="Or one old-model collection searched through an alignment.")
@click.option("--model", default=None,
              help="The new model: a name, a local path or module:function [default: the upgrade's]; with "
                   "--upstream, the model name sent to that endpoint.")
@click.option("--old-model", default=None,
              help="Also encode each text query of /search with the old model and fuse the scores (as `upgrade "
                   "search --old-model`).")
@click.option("--upstream", default=None, metavar="URL",
              help="Run the new model behind this OpenAI-compatible API (its base URL, e.g. "
                   "https://api.openai.com/v1) instead of here.")
@click.option("--upstream-key-env", default=None, metavar="NAME",
              help="Environment variable holding the --upstream endpoint's key [default: OPENAI_API_KEY, where set].")
@click.option("--token-env", default=None, metavar="NAME",
              help="Environment variable holding the token clients must send (Authorization: Bearer <token>); "
                   "without it, anyone who reaches the port may call the service.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="Port to listen on.")
@click.option("--workers", type=POSITIVE_INT, default=1, show_default=True,
              help="uvicorn worker processes (each loads the models).")
@click.option("--threads", type=POSITIVE_INT, default=None, show_default="twice the CPU cores, at most 8",
              help="Requests each process works on at a time (models and store calls run in this many threads).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True, help="uvicorn's log level (info: a line per request).")
@click.option("--rerank", type=click.IntRange(min=0), default=None, metavar="K",
              help="With --state: re-score each search's top K candidates with the new model and write back what it "
                   "embeds as native vectors (the cascade: what users retrieve is re-embedded first) [default: the K "
                   "`upgrade tune --rerank K|auto` tuned; none before; 0: off].")
@force_space_option
@model_options
def serve(state_path, wrapped, model, old_model, upstream, upstream_key_env, token_env, host, port, workers, threads,
          log_level, rerank, force, models):
    """Serve an upgrade (--state) or a wrapped collection (--wrap) over HTTP: OpenAI-compatible /v1/embeddings in
    the space the index is in now, /search, /status, /healthz and Prometheus /metrics."""
    from ..service import require

    require()
    from ..service.config import ServeConfig
    from ..service.server import run

    config = ServeConfig(state=state_path, wrap=wrapped, model=model, old_model=old_model, upstream=upstream,
                         upstream_key_env=upstream_key_env, token_env=token_env, device=models.device,
                         model_batch_size=models.batch_size, precision=models.precision, threads=threads,
                         force=force, rerank=rerank)
    run(config, host=host, port=port, workers=workers, log_level=log_level,
        on_ready=lambda line: click.echo(f"- {redacted(line)}", err=True))
