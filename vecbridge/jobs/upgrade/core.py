"""An upgrade under way, with every verb (:class:`Upgrade`), and the jobs that open one by its state file."""
from __future__ import annotations

from pathlib import Path

from ...connectors.base import VectorBatch
from ...errors import StoreError
from ...runtime.open import open_collection
from .base import HUB_K
from .cutover import Switching
from .scheduler import Scheduling
from .serving import Serving, query_pairs


class Upgrade(Switching, Scheduling, Serving):
    """An upgrade under way, opened from its state file: the collections, the models, and the jobs on them
    (stages: :class:`~.cutover.Switching`; re-embedding: :class:`~.scheduler.Scheduling`; serving:
    :class:`~.serving.Serving`)."""


def open_upgrade(path) -> Upgrade:
    """The upgrade whose state file is ``path``."""
    if not Path(path).is_file():
        raise StoreError(f"no upgrade state at {path}")
    return Upgrade.open(path)


def tune(path, queries, old_queries, *, k: int = 10, rerank: int = 0, models=None) -> dict:
    """:meth:`Upgrade.tune_fusion` on two query collections (the same queries embedded by the new and the old model,
    each query's id being its relevant record's id, as ``vecbridge report --queries`` takes them); with ``rerank``
    K, then :meth:`Upgrade.tune_cascade` on the same queries (``cascade`` in the result)."""
    new_q, old_q = query_pairs(queries, old_queries)
    with open_upgrade(path) as up:
        out = up.tune_fusion(new_q.vectors, old_q.vectors, list(new_q.ids), k=k)
        if rerank:
            up.run_models(models)
            out["cascade"] = up.tune_cascade(new_q.vectors, old_q.vectors, list(new_q.ids), k=k, rerank=rerank)
        return out


def measure(path, queries, old_queries, *, k: int = 10) -> dict:
    """:meth:`Upgrade.measure` on two query collections (as :func:`tune` takes them)."""
    new_q, old_q = query_pairs(queries, old_queries)
    with open_upgrade(path) as up:
        return up.measure(new_q.vectors, old_q.vectors, list(new_q.ids), k=k)


def learn_queries(path, queries, *, k: int = HUB_K) -> dict:
    """:meth:`Upgrade.learn_queries` on a collection of new-model query vectors (a sample of the query log)."""
    log = VectorBatch.concat(list(open_collection(queries).scan(batch_size=2000)))
    with open_upgrade(path) as up:
        return up.learn_queries(log.vectors, k=k)
