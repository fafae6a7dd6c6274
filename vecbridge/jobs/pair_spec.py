"""Turn a user's pairing choice (``ids``, ``field:NAME``, or a pairs file) into a stream of pair batches."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from ..connectors.base import Collection
from ..errors import InputError
from .pairs import PairBatch, pairs_by_field, pairs_by_ids, pairs_from_list, read_pairs_file


def describe_pairs(spec: str) -> dict:
    """How anchors were obtained, for the artifact's metadata."""
    if spec == "ids":
        return {"method": "shared-ids"}
    if spec.startswith("field:"):
        return {"method": "payload-field", "field": spec[6:]}
    return {"method": "pairs-file", "file": Path(spec).name}


def iter_pairs(source: Collection, target: Collection, spec: str = "ids", *, batch_size: int = 2000,
               limit: int | None = None, seed: int = 0) -> Iterator[PairBatch]:
    """Stream ``(source_batch, target_batch)`` row-aligned pairs according to ``spec``."""
    if spec == "ids":
        return pairs_by_ids(source, target, batch_size=batch_size, limit=limit, seed=seed)
    if spec.startswith("field:"):
        if not spec[6:]:
            raise InputError("--pairs field:NAME needs a payload field name")
        return pairs_by_field(source, target, spec[6:], batch_size=batch_size, limit=limit, seed=seed)
    if Path(spec).suffix.lower() in (".csv", ".json", ".tsv", ".txt", ".npz") or Path(spec).exists():
        pairs = read_pairs_file(spec)
        if limit is not None and limit < len(pairs):
            import numpy as np

            pick = np.sort(np.random.default_rng(seed).choice(len(pairs), limit, replace=False))
            pairs = [pairs[i] for i in pick]
        return pairs_from_list(source, target, pairs, batch_size=batch_size)
    raise InputError(f"--pairs must be 'ids', 'field:NAME' or a CSV/JSON file of id pairs; got {spec!r}")
