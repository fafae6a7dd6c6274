"""Anchors from re-embedding: the usual production path, and the reference-corpus fallback (the Vector Linking
paper (2026), sec. 5.4).

* :func:`reembed_pairs`: the old collection stores its texts (a payload field); embed a sample of them with the new
  model and pair each new vector with the stored old vector of the same record. A few thousand calls to the new
  model instead of millions.
* :func:`reference_pairs`: when the two sides share nothing, a small public text file embedded by *both* models
  supplies out-of-domain anchors (the Vector Linking paper shows OOD seeds still work because the map is global).

Models are loaded by :func:`load_model`: a sentence-transformers name or local directory, or a user's
``module:function`` (any callable from a list of texts to an (n, d) array), so any model a team runs can be plugged in.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..connectors.base import Collection, VectorBatch
from ..errors import InputError
from ..runtime.models import Embedder


def _texts(batch: VectorBatch, field: str) -> tuple[np.ndarray, list[str]]:
    keep, texts = [], []
    for j, p in enumerate(batch.payloads):
        t = (p or {}).get(field)
        if isinstance(t, str) and t.strip():
            keep.append(j)
            texts.append(t)
    return np.asarray(keep, dtype=np.int64), texts


def _chunk(batch_size: int | None, *embedders) -> int:
    """Texts per call to the models: ``batch_size``, else at least a full batch of the model (a GPU's 256) and 64."""
    return batch_size or max([64] + [getattr(e, "batch_size", None) or 0 for e in embedders])


def reembed_pairs(source: Collection, embed: Embedder, *, text_field: str = "text", n: int = 2000, seed: int = 0,
                  batch_size: int | None = None, on_progress: Callable[[int], None] | None = None
                  ) -> tuple[VectorBatch, np.ndarray]:
    """Sample ``n`` records of ``source`` that hold text in ``text_field`` and embed those texts with the new model
    (``batch_size`` texts per call: :func:`_chunk`).

    Returns ``(old_records, new_vectors)``: row i of ``new_vectors`` is the new model's embedding of the text of
    ``old_records.ids[i]``.
    """
    sample = source.sample(n, seed=seed)
    keep, texts = _texts(sample, text_field)
    if not texts:
        raise InputError(f"no sampled record of {source.display_url} has text in payload field {text_field!r}")
    old = sample.take(keep)
    parts, batch_size = [], _chunk(batch_size, embed)
    for lo in range(0, len(texts), batch_size):
        parts.append(np.asarray(embed(texts[lo:lo + batch_size]), dtype=np.float32))
        if on_progress:
            on_progress(len(parts[-1]))
    new = np.concatenate(parts)
    if new.shape[0] != len(old):
        raise InputError(f"the model returned {new.shape[0]} vectors for {len(old)} texts")
    return old, new


def read_texts(path, limit: int | None = None) -> list[str]:
    """One text per non-empty line (a reference corpus file)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"reference corpus not found: {path}")
    texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not texts:
        raise InputError(f"{path}: no texts")
    return texts[:limit] if limit else texts


def reference_pairs(texts: Sequence[str], embed_old: Embedder, embed_new: Embedder, *, batch_size: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The same public texts through both models: (old-space vectors, new-space vectors), row-aligned."""
    olds, news, batch_size = [], [], _chunk(batch_size, embed_old, embed_new)
    for lo in range(0, len(texts), batch_size):
        chunk = list(texts[lo:lo + batch_size])
        olds.append(np.asarray(embed_old(chunk), dtype=np.float32))
        news.append(np.asarray(embed_new(chunk), dtype=np.float32))
    return np.concatenate(olds), np.concatenate(news)
