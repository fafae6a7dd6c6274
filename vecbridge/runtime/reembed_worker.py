"""The workers of an upgrade's ``reembed``: each reads the records whose ids it is handed from the source, embeds
their texts with the new model and writes them, with their stamps, into the upgrade's own vectors (here in this
process, or in a Ray actor): the driver hands over ids and gets back what landed, never the records or texts."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..connectors import connect
from ..connectors.base import Collection
from .models import ModelOptions
from .ray_engine import Sealed
from .record_stamps import NativeStamps, RecordStamps


def open_target(source: str, field: str | None, target: str | None) -> Collection:
    """Where an upgrade writes its new vectors: the vector ``field`` of the source, else the collection ``target``
    (the driver and each Ray worker of ``reembed`` open it alike)."""
    if field:
        return connect(source).with_vector_field(field)
    return connect(target)


@dataclass
class Landed:
    """What one batch of ``reembed`` did: the ids written native (with their old and new vectors: the exact pairs
    the continuous refit adds up), the ids without text (stamped ``no-text``, keeping their mapped vector) and the
    ids gone from the source since they were queued."""

    written: list
    old: np.ndarray
    new: np.ndarray
    no_text: list
    gone: list


def embed_and_write(embed, source: Collection, target: Collection, ids: list, text_field: str,
                    stamps: NativeStamps, no_text: dict) -> Landed:
    """One batch of ``reembed``: the records ``ids`` read from the source, the new model run on their texts, the
    records upserted with its vectors and their stamps in one write; a record without text is stamped ``no_text``
    (its vector kept). Every worker runs this."""
    records = source.get(list(ids))
    texts = [(p or {}).get(text_field) for p in records.payloads]
    has = np.asarray([j for j, t in enumerate(texts) if isinstance(t, str) and t], dtype=np.int64)
    gone = sorted(set(ids) - set(records.ids), key=str)
    missing = [records.ids[j] for j in sorted(set(range(len(records))) - set(has.tolist()))]
    if missing:
        RecordStamps(target).restamp(missing, lambda _i, old: {**old, **no_text} if old else no_text)
    if not len(has):
        return Landed([], records.vectors[:0], np.zeros((0, 0), np.float32), missing, gone)
    batch = records.take(has)
    vectors = np.asarray(embed([texts[j] for j in has]), dtype=np.float32)
    target.upsert(batch.with_vectors(vectors, stamps(batch, vectors)))
    return Landed(list(batch.ids), batch.vectors, vectors, missing, gone)


class Reembedder:
    """The factory of ``reembed``'s pool and, in this process, its one worker: the upgrade's own model (loaded on
    first use) and target (an embedded store allows one handle). Sent to a Ray actor it travels as the model's name
    and the state's URLs (:class:`_Remote`): no handle, and no credential in what Ray prints."""

    def __init__(self, up, stamps: NativeStamps | None = None):
        self._up = up   # an upgrade under way (its meta, model, source, target and models)
        self._stamps = stamps or up.native_stamps()
        self._no_text = up.stamper("no-text")(1)[0]

    def __call__(self) -> "Reembedder":
        return self

    def embed_and_write(self, ids: list) -> Landed:
        up = self._up
        return embed_and_write(up.model, up.source, up.target, ids, up.meta["text_field"], self._stamps,
                               self._no_text)

    def __reduce__(self):
        meta = self._up.meta
        target = Sealed(meta["target"]) if meta.get("target") and not meta.get("field") else None
        return _Remote, (meta["model"], Sealed(meta["source"]), meta.get("field"), target, self._up.models,
                         self._stamps, meta["text_field"], self._no_text)


class _Remote:
    """A :class:`Reembedder` in a worker process: called once there, it loads the model and opens the target (a
    failure is one line on the driver), then embeds and writes each batch it is given."""

    def __init__(self, model: str, source: Sealed, field: str | None, target: Sealed | None,
                 models: ModelOptions | None, stamps: NativeStamps, text_field: str, no_text: dict):
        self._spec = (model, source, field, target, models or ModelOptions())
        self._stamps, self._text_field, self._no_text = stamps, text_field, no_text

    def __call__(self) -> "_Remote":
        model, source, field, target, models = self._spec
        self._embed = models.load(model)
        self._source = connect(source.url, read_only=True)
        self._target = open_target(source.url, field, target.url if target is not None else None)
        return self

    def embed_and_write(self, ids: list) -> Landed:
        return embed_and_write(self._embed, self._source, self._target, ids, self._text_field, self._stamps,
                               self._no_text)
