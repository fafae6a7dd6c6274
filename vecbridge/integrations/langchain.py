"""LangChain embeddings in the space the application's index is in now (:class:`VecbridgeEmbeddings`).

>>> from vecbridge.integrations.langchain import VecbridgeEmbeddings                      # doctest: +SKIP
>>> emb = VecbridgeEmbeddings("all-mpnet-base-v2", upgrade="docs.upgrade.sqlite")          # doctest: +SKIP
>>> store = PGVector(embeddings=emb, collection_name="docs", connection=...)               # doctest: +SKIP

Before the upgrade's cutover the new model's vectors come back translated into the old index's space, after it as
the model gives them, and translated again after a rollback (:class:`~vecbridge.serving.embedder.SpaceEmbedder`).
Needs ``pip install "vecbridge[langchain]"``; ``import vecbridge`` never imports LangChain.
"""
from __future__ import annotations

from ..errors import MissingDependency
from ..serving.embedder import SpaceEmbedder

try:
    from langchain_core.embeddings import Embeddings
except ImportError:
    raise MissingDependency('the LangChain integration needs langchain-core: pip install "vecbridge[langchain]"') \
        from None

__all__ = ["VecbridgeEmbeddings"]


class VecbridgeEmbeddings(Embeddings):
    """A LangChain :class:`~langchain_core.embeddings.Embeddings` over a
    :class:`~vecbridge.serving.embedder.SpaceEmbedder`: the same arguments (``model``, ``alignment=``, ``metric=``,
    ``upgrade=``, model options such as ``device=``), or ``embedder=`` one already made. The async methods run the
    sync ones in a thread pool (LangChain's default), which the embedder allows."""

    def __init__(self, model=None, *, embedder: SpaceEmbedder | None = None, **options):
        self.embedder = embedder if embedder is not None else SpaceEmbedder(model, **options)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embedder.embed(texts, kind="document").tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embedder.embed([text], kind="query")[0].tolist()

    def space(self) -> dict:
        """Which space the vectors are in now (:meth:`SpaceEmbedder.space`)."""
        return self.embedder.space()
