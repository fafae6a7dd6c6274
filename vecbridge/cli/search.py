"""``search``: new-model queries over old collections wrapped in an alignment and native new ones."""
from __future__ import annotations

import click

from ..render.search import hits
from .group import command, emit, model_line
from .options import POSITIVE_INT, WrapSpec, force_space_option, model_options


def _load(path):
    """A ``.npy`` array of query vectors given by the user; never unpickled."""
    import numpy as np

    from ..errors import InputError

    try:
        return np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise InputError(f"{path}: not a numpy array file ({exc})") from None


@command()
@click.option("--wrap", "wrapped", multiple=True, metavar="OLD_URL=ALIGNMENT", type=WrapSpec(),
              help="An old-model collection searched through an alignment (repeatable).")
@click.option("--native", multiple=True, metavar="URL", help="A collection already in the new model's space.")
@click.option("--vectors", "vectors_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help=".npy file of new-model query vectors (one row per query).")
@click.option("--old-vectors", "old_vectors_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The old model's vectors of the same queries (.npy, row for row): dual-query fusion over the "
                   "wrapped collections, which keeps more quality where the old model still runs.")
@click.option("--beta", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Weight of the old-model query in dual-query fusion.")
@click.option("--rerank-model", default=None,
              help="Re-score the wrapped collections' top candidates with this new model's vectors of their stored "
                   "texts (name, path or module:function).")
@click.option("--text-field", default="text", show_default=True,
              help="Payload field with the text: shown beside each hit, and re-scored by --rerank-model.")
@click.option("--hub-log", "hub_log_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="New-model vectors of logged queries (.npy): candidates pay the hub penalty.")
@click.option("--hub-weight", type=click.FloatRange(min=0), default=0.5, show_default=True,
              help="Weight of the hub penalty (with --hub-log).")
@click.option("--candidates", "k_candidates", type=POSITIVE_INT, default=50, show_default=True,
              help="Candidates per query that fusion, the hub penalty or re-ranking re-scores.")
@click.option("-k", "k", type=POSITIVE_INT, default=10, show_default=True, help="Results per query.")
@force_space_option
@model_options
def search(wrapped, native, vectors_path, old_vectors_path, beta, rerank_model, text_field, hub_log_path,
           hub_weight, k_candidates, k, force, models):
    """Federated search with new-model query vectors over wrapped old and native new collections."""
    from ..serving.wrap import search_collections

    if (old_vectors_path or rerank_model) and not wrapped:
        raise click.UsageError("--old-vectors and --rerank-model apply to --wrap collections")
    results = search_collections(list(wrapped), native, _load(vectors_path), k,
                                 old_queries=_load(old_vectors_path) if old_vectors_path else None, beta=beta,
                                 rerank_model=rerank_model, text_field=text_field, k_candidates=k_candidates,
                                 hub_log=_load(hub_log_path) if hub_log_path else None, hub_weight=hub_weight,
                                 show_field=text_field, force=force, models=models)
    emit(results, hits)
    model_line(models)
