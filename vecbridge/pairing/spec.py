"""Turn a pairing (``ids``, ``field:NAME`` or ``file:PATH``; see :class:`~vecbridge.linking.PairSpec`) into a stream
of pair batches read from two collections."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..connectors.base import Collection
from ..linking.pairspec import PairSpec
from .pairs import PairBatch, pairs_by_field, pairs_by_ids, pairs_from_list, read_pairs_file

#: the pairings that are read from the two collections themselves (the others need models or estimators)
STORED = ("ids", "field", "file")


def describe_pairs(spec: "str | PairSpec") -> dict:
    """How anchors were obtained, for the artifact's metadata."""
    return PairSpec.parse(spec).describe()


def iter_pairs(source: Collection, target: Collection, spec: "str | PairSpec" = "ids", *, batch_size: int = 2000,
               limit: int | None = None, seed: int = 0) -> Iterator[PairBatch]:
    """Stream ``(source_batch, target_batch)`` row-aligned pairs according to ``spec``."""
    spec = PairSpec.parse(spec, allowed=STORED)
    if spec.kind == "ids":
        return pairs_by_ids(source, target, batch_size=batch_size, limit=limit, seed=seed)
    if spec.kind == "field":
        return pairs_by_field(source, target, spec.value, batch_size=batch_size, limit=limit, seed=seed)
    pairs = read_pairs_file(spec.value)
    if limit is not None and limit < len(pairs):
        pick = np.sort(np.random.default_rng(seed).choice(len(pairs), limit, replace=False))
        pairs = [pairs[i] for i in pick]
    return pairs_from_list(source, target, pairs, batch_size=batch_size)
