"""Turn a pairing (``ids``, ``field:NAME`` or ``file:PATH``; see :class:`~vecbridge.linking.PairSpec`) into a stream
of pair batches read from two collections."""
from __future__ import annotations

from typing import Iterator

from ..connectors.base import Collection
from ..linking.pairspec import PairSpec
from .pairs import PairBatch
from .table import BATCH_SIZE, STORED, pairing

__all__ = ["STORED", "describe_pairs", "iter_pairs"]


def describe_pairs(spec: "str | PairSpec") -> dict:
    """How anchors were obtained, for the artifact's metadata."""
    return PairSpec.parse(spec).describe()


def iter_pairs(source: Collection, target: Collection, spec: "str | PairSpec" = "ids", *,
               batch_size: int = BATCH_SIZE, limit: int | None = None, seed: int = 0) -> Iterator[PairBatch]:
    """Stream ``(source_batch, target_batch)`` row-aligned pairs according to ``spec`` (its row's stream in
    :data:`vecbridge.pairing.table.PAIRINGS`)."""
    spec = PairSpec.parse(spec, allowed=STORED)
    return pairing(spec).stream(source, target, spec, batch_size=batch_size, limit=limit, seed=seed)
