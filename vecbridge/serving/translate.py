"""New-model queries translated into an old collection's space (what ``search --wrap`` and the embedders send
to an old index).
"""
from __future__ import annotations

import numpy as np

from .._deprecated import moved
from ..align.artifact import Alignment


def _orthogonal_isometry(alignment: Alignment) -> bool:
    return alignment.kind == "orthogonal" and alignment.source_dim <= alignment.target_dim


def translate_queries(alignment: Alignment, queries, metric: str = "cosine") -> np.ndarray:
    """New-model query vectors -> vectors to search the old index with (float32)."""
    Q = np.asarray(queries, dtype=np.float32)
    M = alignment.tensor("matrix", np.float32)
    s = float(alignment.metadata["scale"])
    if alignment.metadata["normalization"] == "l2":
        from ..vectors import l2_normalize

        Q = l2_normalize(Q)
    if metric == "l2" and _orthogonal_isometry(alignment):
        mu_x, mu_y = alignment.tensor("source_mean", np.float32), alignment.tensor("target_mean", np.float32)
        return mu_x + ((Q - mu_y) @ M.T) / s
    return Q @ M.T


#: the embedding function is a :class:`~vecbridge.serving.embedder.SpaceEmbedder` now, kept here for one release
__getattr__ = moved(__name__, {"MappedEmbeddings": "vecbridge.serving.embedder"})
