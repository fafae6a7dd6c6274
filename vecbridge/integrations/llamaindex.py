"""A LlamaIndex embedding model in the space the application's index is in now (:class:`VecbridgeEmbedding`).

>>> from llama_index.core import Settings                                                 # doctest: +SKIP
>>> from vecbridge.integrations.llamaindex import VecbridgeEmbedding                      # doctest: +SKIP
>>> Settings.embed_model = VecbridgeEmbedding("all-mpnet-base-v2", upgrade="docs.upgrade.sqlite")  # doctest: +SKIP

Before the upgrade's cutover the new model's vectors come back translated into the old index's space, after it as
the model gives them, and translated again after a rollback (:class:`~vecbridge.serving.embedder.SpaceEmbedder`).
Needs ``pip install "vecbridge[llamaindex]"``; ``import vecbridge`` never imports LlamaIndex.
"""
from __future__ import annotations

import asyncio

from ..errors import MissingDependency
from ..serving.embedder import SpaceEmbedder

try:
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.embeddings import BaseEmbedding
except ImportError:
    raise MissingDependency('the LlamaIndex integration needs llama-index-core: pip install '
                            '"vecbridge[llamaindex]"') from None

__all__ = ["VecbridgeEmbedding"]

#: LlamaIndex's own settings of an embedding model (the rest go to the SpaceEmbedder)
_OWN = ("embed_batch_size", "callback_manager", "num_workers", "embeddings_cache", "rate_limiter")


class VecbridgeEmbedding(BaseEmbedding):
    """A LlamaIndex :class:`~llama_index.core.embeddings.BaseEmbedding` over a
    :class:`~vecbridge.serving.embedder.SpaceEmbedder`: the same arguments (``model``, ``alignment=``, ``metric=``,
    ``upgrade=``, model options such as ``device=``), or ``embedder=`` one already made; LlamaIndex's own settings
    (``embed_batch_size``, ``callback_manager``...) as usual. The async methods run the sync ones in a thread."""

    _embedder: SpaceEmbedder = PrivateAttr()

    def __init__(self, model=None, *, embedder: SpaceEmbedder | None = None, **options):
        own = {k: options.pop(k) for k in _OWN if k in options}
        embedder = embedder if embedder is not None else SpaceEmbedder(model, **options)
        super().__init__(model_name=embedder.model_name, **own)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "VecbridgeEmbedding"

    @property
    def embedder(self) -> SpaceEmbedder:
        return self._embedder

    def space(self) -> dict:
        """Which space the vectors are in now (:meth:`SpaceEmbedder.space`)."""
        return self._embedder.space()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embedder.embed([query], kind="query")[0].tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._embedder.embed([text], kind="document")[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._embedder.embed(texts, kind="document").tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
