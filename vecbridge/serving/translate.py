"""New-model queries translated into an old collection's space, and an embedder that maps its output.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..align.artifact import Alignment
from ..runtime.open import load_alignment


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


class MappedEmbeddings:
    """Drop-in embedding function: new model in, old-space vectors out, for code that queries an old index.

    ``embed`` is any callable from a list of texts to new-model vectors (e.g. ``SentenceTransformer.encode``).
    Provides ``__call__``, ``embed_documents`` and ``embed_query`` (the shapes LangChain-style stores expect).
    """

    def __init__(self, embed: Callable[[list[str]], np.ndarray], alignment, metric: str = "cosine"):
        self.embed = embed
        self.alignment, _ = load_alignment(alignment)
        self.metric = metric

    def __call__(self, texts: list[str]) -> np.ndarray:
        return translate_queries(self.alignment, self.embed(list(texts)), self.metric)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self([text])[0].tolist()

