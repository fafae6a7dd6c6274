"""Correspondences from shared keys: equal ids, equal payload values, or an explicit file of id pairs.

These are the cheapest and most reliable anchors: when the old and the new collection hold the same items under
the same ids (or a payload key such as a URL or a text hash), every shared item is a pair. Pairs are produced in
batches of :class:`~vecbridge.connectors.VectorBatch` so an alignment can be fitted on millions of them in a stream.
"""
from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ..connectors.base import Collection, VectorBatch
from ..errors import InputError

PairBatch = tuple[VectorBatch, VectorBatch]


def in_holdout(ids: Sequence, fraction: float, salt: str = "vecbridge") -> np.ndarray:
    """Deterministic split by id hash: True for ids in the held-out fraction.

    The same id always lands on the same side, whatever the order or the batch it arrives in, so ``fit`` and a later
    ``evaluate`` agree on the split without storing it.
    """
    if fraction <= 0:
        return np.zeros(len(ids), dtype=bool)
    out = np.empty(len(ids), dtype=bool)
    for j, i in enumerate(ids):
        h = hashlib.blake2b(f"{salt}\x00{i}".encode(), digest_size=8).digest()
        out[j] = int.from_bytes(h, "big") / 2.0**64 < fraction
    return out


def _get_with_id_coercion(coll: Collection, ids: list) -> VectorBatch:
    """``coll.get(ids)``, retrying numeric-looking string ids as integers (ids read from CSV are strings)."""
    got = coll.get(ids)
    if len(got) == 0 and ids and all(isinstance(i, str) and i.lstrip("-").isdigit() for i in ids):
        got = coll.get([int(i) for i in ids])
        got.ids = [str(i) for i in got.ids]
    return got


def _align(src: VectorBatch, tgt: VectorBatch, src_keys: list, tgt_keys: list) -> PairBatch | None:
    pos = {k: j for j, k in enumerate(tgt_keys)}
    keep_s = [i for i, k in enumerate(src_keys) if k in pos]
    if not keep_s:
        return None
    keep_t = [pos[src_keys[i]] for i in keep_s]
    return src.take(np.asarray(keep_s)), tgt.take(np.asarray(keep_t))


def pairs_by_ids(source: Collection, target: Collection, *, batch_size: int = 2000,
                 limit: int | None = None, seed: int = 0) -> Iterator[PairBatch]:
    """Pairs of records that have the same id in both collections.

    Streams the source (or a seeded uniform sample of ``limit`` records) and looks the same ids up in the target.
    """
    batches = _source_batches(source, batch_size, limit, seed)
    for src in batches:
        tgt = _get_with_id_coercion(target, list(src.ids))
        pair = _align(src, tgt, list(src.ids), [i for i in tgt.ids])
        if pair is None:
            str_src = [str(i) for i in src.ids]
            pair = _align(src, tgt, str_src, [str(i) for i in tgt.ids])
        if pair is not None:
            yield pair


def pairs_by_field(source: Collection, target: Collection, field: str, *, batch_size: int = 2000,
                   limit: int | None = None, seed: int = 0) -> Iterator[PairBatch]:
    """Pairs of records whose payload ``field`` is equal (e.g. a URL or a text hash). Builds a key index of the
    target first (one pass over its payloads), then streams the source."""
    index: dict = {}
    for batch in target.scan(batch_size):
        for rid, payload in zip(batch.ids, batch.payloads):
            if field in payload and payload[field] is not None:
                index.setdefault(payload[field], rid)
    if not index:
        raise InputError(f"no record of the target has payload field {field!r}")
    yield from pairs_through_index(_source_batches(source, batch_size, limit, seed), target, field, index)


def pairs_through_index(batches, target: Collection, field: str, index: dict) -> Iterator[PairBatch]:
    """Pairs of each source batch's records with the target records ``index`` names for their payload ``field``
    (key -> target id): the matching of :func:`pairs_by_field`, for a key index built once (a distributed fit
    builds it over the target's key ranges and reuses it in every task)."""
    for src in batches:
        keys = [p.get(field) if p else None for p in src.payloads]
        keep = [j for j, k in enumerate(keys) if k is not None and k in index]
        if not keep:
            continue
        src = src.take(np.asarray(keep))
        tgt = target.get([index[keys[j]] for j in keep])
        tgt_by_id = {i: j for j, i in enumerate(tgt.ids)}
        rows = [(a, tgt_by_id[index[keys[j]]]) for a, j in enumerate(keep) if index[keys[j]] in tgt_by_id]
        if rows:
            yield src.take(np.array([a for a, _ in rows])), tgt.take(np.array([b for _, b in rows]))


def read_pairs_file(path) -> list[tuple[str, str]]:
    """Id pairs from CSV (columns ``source_id,target_id[,confidence]``, header optional), JSON (a list of 2-element
    lists or of ``{"source_id":..., "target_id":...}`` objects, or ``vecbridge link``'s ``{"links": [...]}``), or a
    ``.npz`` links file."""
    if Path(path).suffix.lower() == ".npz":
        from ..linking.links import Links

        links = Links.load_npz(path)
        return list(zip(links.source_ids, links.target_ids))
    path = Path(path)
    if not path.is_file():
        raise InputError(f"pairs file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a CSV or JSON text file of id pairs (byte {exc.start} is not UTF-8)") from None
    pairs: list[tuple[str, str]] = []
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise InputError(f"{path}: invalid JSON ({exc})") from None
        if isinstance(data, dict):  # the format `vecbridge link` writes: {"mode", "meta", "links": [...]}
            data = data.get("links", [])
        if not isinstance(data, list):
            raise InputError(f"{path}: expected a JSON list of id pairs")
        for item in data:
            if isinstance(item, dict) and "source_id" in item and "target_id" in item:
                pairs.append((item["source_id"], item["target_id"]))
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                pairs.append((item[0], item[1]))
            else:
                raise InputError(f"{path}: each pair must be [source_id, target_id]")
    else:
        rows = [r for r in csv.reader(text.splitlines()) if r]
        if rows and [c.strip().lower() for c in rows[0][:2]] == ["source_id", "target_id"]:
            rows = rows[1:]
        for r in rows:
            if len(r) < 2:
                raise InputError(f"{path}: each line must hold source_id,target_id")
            pairs.append((r[0].strip(), r[1].strip()))
    if not pairs:
        raise InputError(f"{path}: no pairs")
    return pairs


def pairs_from_list(source: Collection, target: Collection, pairs: Sequence[tuple], *,
                    batch_size: int = 2000) -> Iterator[PairBatch]:
    """Fetch explicit (source_id, target_id) pairs from both collections in batches; missing ids are skipped."""
    for lo in range(0, len(pairs), batch_size):
        chunk = pairs[lo:lo + batch_size]
        src = _get_with_id_coercion(source, [p[0] for p in chunk])
        tgt = _get_with_id_coercion(target, [p[1] for p in chunk])
        s_pos = {str(i): j for j, i in enumerate(src.ids)}
        t_pos = {str(i): j for j, i in enumerate(tgt.ids)}
        rows = [(s_pos[str(a)], t_pos[str(b)]) for a, b in chunk if str(a) in s_pos and str(b) in t_pos]
        if rows:
            yield src.take(np.array([a for a, _ in rows])), tgt.take(np.array([b for _, b in rows]))


def _source_batches(source: Collection, batch_size: int, limit: int | None, seed: int) -> Iterator[VectorBatch]:
    if limit is None:
        yield from source.scan(batch_size)
        return
    sample = source.sample(limit, seed=seed)
    for lo in range(0, len(sample), batch_size):
        yield sample.take(np.arange(lo, min(lo + batch_size, len(sample))))
