"""The workers of an upgrade's ``reembed``: each embeds the batches handed to it with the new model and writes them,
with their stamps, into the upgrade's own vectors (here in this process, or in a Ray actor)."""
from __future__ import annotations

import numpy as np

from ..connectors import connect
from ..connectors.base import Collection, VectorBatch
from .models import ModelOptions
from .ray_engine import Sealed
from .record_stamps import NativeStamps


def open_target(source: str, field: str | None, target: str | None) -> Collection:
    """Where an upgrade writes its new vectors: the vector ``field`` of the source, else the collection ``target``
    (the driver and each Ray worker of ``reembed`` open it alike)."""
    if field:
        return connect(source).with_vector_field(field)
    return connect(target)


def embed_and_write(embed, target: Collection, batch: VectorBatch, texts: list[str],
                    stamps: NativeStamps) -> np.ndarray:
    """One batch of ``reembed``: the new model run on ``texts`` (one per record of ``batch``), the records upserted
    with its vectors and their stamps in one write. Every worker runs this; it returns the vectors written (with the
    batch's old vectors, the exact pairs the continuous refit adds up)."""
    vectors = np.asarray(embed(texts), dtype=np.float32)
    target.upsert(batch.with_vectors(vectors, stamps(batch, vectors)))
    return vectors


class Reembedder:
    """The factory of ``reembed``'s pool and, in this process, its one worker: the upgrade's own model (loaded on
    first use) and target (an embedded store allows one handle). Sent to a Ray actor it travels as the model's name
    and the state's URLs (:class:`_Remote`): no handle, and no credential in what Ray prints."""

    def __init__(self, up, stamps: NativeStamps | None = None):
        self._up = up   # an upgrade under way (its meta, model, target and models)
        self._stamps = stamps or up.native_stamps()

    def __call__(self) -> "Reembedder":
        return self

    def embed_and_write(self, batch: VectorBatch, texts: list[str]) -> np.ndarray:
        return embed_and_write(self._up.model, self._up.target, batch, texts, self._stamps)

    def __reduce__(self):
        meta = self._up.meta
        target = Sealed(meta["target"]) if meta.get("target") and not meta.get("field") else None
        return _Remote, (meta["model"], Sealed(meta["source"]), meta.get("field"), target, self._up.models,
                         self._stamps)


class _Remote:
    """A :class:`Reembedder` in a worker process: called once there, it loads the model and opens the target (a
    failure is one line on the driver), then embeds and writes each batch it is given."""

    def __init__(self, model: str, source: Sealed, field: str | None, target: Sealed | None,
                 models: ModelOptions | None, stamps: NativeStamps):
        self._spec = (model, source, field, target, models or ModelOptions())
        self._stamps = stamps

    def __call__(self) -> "_Remote":
        model, source, field, target, models = self._spec
        self._embed = models.load(model)
        self._target = open_target(source.url, field, target.url if target is not None else None)
        return self

    def embed_and_write(self, batch: VectorBatch, texts: list[str]) -> np.ndarray:
        return embed_and_write(self._embed, self._target, batch, texts, self._stamps)
