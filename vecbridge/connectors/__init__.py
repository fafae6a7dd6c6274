"""Connect to vector stores by URL (an fsspec-style registry: scheme -> lazily imported class).

>>> from vecbridge.connectors import connect
>>> coll = connect("file://./old_vectors")            # doctest: +SKIP
>>> coll.info().dim                                     # doctest: +SKIP

A store's client library is imported only when its scheme is used; if it is missing, the error names the extra to
install (``pip install "vecbridge[milvus]"``) instead of raising a bare ImportError.
"""
from __future__ import annotations

import importlib

from ..errors import InputError, MissingDependency, UsageError
from .base import Collection, CollectionInfo, VectorBatch, check_metric
from .url import check_url, redact, scheme_of

#: scheme -> (import path "module:Class", pip extra that provides its client)
REGISTRY: dict[str, tuple[str, str | None]] = {
    "file": ("vecbridge.connectors.file:FileCollection", None),
    "qdrant": ("vecbridge.connectors.qdrant:QdrantCollection", "qdrant"),
    "qdrant-edge": ("vecbridge.connectors.qdrant_edge:QdrantEdgeCollection", "qdrant-edge"),
    "milvus": ("vecbridge.connectors.milvus:MilvusCollection", "milvus"),
    "chroma": ("vecbridge.connectors.chroma:ChromaCollection", "chroma"),
    "postgresql": ("vecbridge.connectors.pgvector:PgVectorCollection", "pgvector"),
    "postgres": ("vecbridge.connectors.pgvector:PgVectorCollection", "pgvector"),
}


def register(scheme: str, target: str, extra: str | None = None, *, clobber: bool = False) -> None:
    """Map a URL scheme to ``"package.module:ClassName"`` (imported on first use)."""
    scheme = scheme.lower()
    if scheme in REGISTRY and not clobber:
        raise InputError(f"scheme {scheme!r} is already registered")
    REGISTRY[scheme] = (target, extra)


def connector_class(scheme: str) -> type[Collection]:
    try:
        target, extra = REGISTRY[scheme]
    except KeyError:
        known = ", ".join(f"{s}://" for s in sorted(REGISTRY))
        raise UsageError(f"unknown store scheme {scheme!r}:// (known: {known})") from None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name == module_name:  # our own module is missing: a packaging bug, not a missing extra
            raise
        hint = f'pip install "vecbridge[{extra}]"' if extra else "reinstall vecbridge"
        raise MissingDependency(f"{scheme}:// needs a client library that is not installed "
                                f"({exc.name or exc}); install it with: {hint}") from None
    return getattr(module, class_name)


def connect(url: str, **options) -> Collection:
    """Open the collection a URL names (it need not exist yet: ``create`` makes it)."""
    if not isinstance(url, str) or not url:
        raise InputError("a store URL is required, e.g. file://./vectors or qdrant://localhost:6333/collection")
    scheme = scheme_of(url)
    cls = connector_class(scheme)
    if scheme != "file":   # a bare path is taken as it is written
        check_url(url)
    return cls(url, **options)


__all__ = ["connect", "register", "REGISTRY", "Collection", "CollectionInfo", "VectorBatch", "check_metric",
           "redact"]
