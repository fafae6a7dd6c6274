"""Check a migration: same ids on both sides, and a sample of mapped vectors recomputed from the source."""
from __future__ import annotations

import numpy as np

from ..connectors.base import Collection
from ..results import Check, VerifyResult
from ..vectors import l2_normalize
from .open import load_alignment, open_collection

_RESERVED = ("_vb_",)


def _ids(coll: Collection, batch_size: int = 5000) -> set:
    return {str(i) for batch in coll.scan(batch_size=batch_size) for i in batch.ids}


def _user_payload(p: dict) -> dict:
    return {k: v for k, v in (p or {}).items() if not k.startswith(_RESERVED)}


def verify(source, target, alignment, *, sample: int = 1000, seed: int = 0, tolerance: float = 1e-5,
           field: str | None = None) -> VerifyResult:
    """Whether ``target`` holds ``source`` mapped through ``alignment``: counts, dimension, ids, a sample of vectors
    recomputed, payloads (:class:`VerifyResult`: ``ok`` and the ``checks``); nothing is written anywhere.

    Vectors are compared relative to their norm (float32 storage); in cosine collections, stores that normalise on
    insert (Qdrant) are compared by direction.
    """
    alignment, _ = load_alignment(alignment)
    src, tgt = open_collection(source), open_collection(target)
    if field is not None:
        tgt = tgt.with_vector_field(field)
    checks = []

    s_info, t_info = src.info(), tgt.info()
    checks.append(Check("count", s_info.count == t_info.count, f"source {s_info.count:,}, target {t_info.count:,}"))
    checks.append(Check("dimension", t_info.dim == alignment.target_dim,
                        f"target {t_info.dim}, alignment output {alignment.target_dim}"))
    s_ids, t_ids = _ids(src), _ids(tgt)
    missing, extra = s_ids - t_ids, t_ids - s_ids
    checks.append(Check("ids", not missing and not extra,
                        f"{len(missing):,} missing in target, {len(extra):,} not in source"
                        + (f" (e.g. {sorted(missing)[:3] or sorted(extra)[:3]})" if missing or extra else "")))

    smp = src.sample(sample, seed=seed)
    got = tgt.get(list(smp.ids))
    pos = {str(i): j for j, i in enumerate(got.ids)}
    rows = [j for j, i in enumerate(smp.ids) if str(i) in pos]
    expected = alignment.transform(smp.vectors[rows]) if rows else np.zeros((0, alignment.target_dim))
    actual = got.vectors[[pos[str(smp.ids[j])] for j in rows]] if rows else np.zeros_like(expected)
    if t_info.metric == "cosine":
        expected, actual = l2_normalize(expected), l2_normalize(actual)
        err = np.abs(expected - actual).max(axis=1) if rows else np.zeros(0)
    else:
        scale = np.maximum(np.linalg.norm(expected, axis=1), 1e-12)
        err = np.abs(expected - actual).max(axis=1) / scale if rows else np.zeros(0)
    bad = int((err > tolerance).sum())
    checks.append(Check("vectors", bad == 0 and len(rows) == len(smp),
                        f"{len(rows):,} sampled records recomputed, {bad} differ by more than {tolerance:g} "
                        f"(max {float(err.max()) if len(err) else 0.0:.2e})"))
    payload_bad = sum(_user_payload(smp.payloads[j]) != _user_payload(got.payloads[pos[str(smp.ids[j])]])
                      for j in rows) if field is None else 0
    checks.append(Check("payloads", payload_bad == 0,
                        f"{payload_bad} of {len(rows):,} sampled payloads differ"))
    return VerifyResult(all(c.ok for c in checks), src.display_url, tgt.display_url, checks)
