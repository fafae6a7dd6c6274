"""Opening what a job is given: a URL or an open collection, a path or a loaded alignment."""
from __future__ import annotations

from pathlib import Path

from ..align.artifact import Alignment
from ..connectors import connect
from ..connectors.base import Collection


def open_collection(obj, read_only: bool = True) -> Collection:
    """``obj`` itself if it is a collection, else the collection its URL names (read-only unless asked): a URL, or
    anything holding one in ``.url`` (a :class:`~vecbridge.runtime.ray_engine.Sealed` URL, what a Ray task gets)."""
    if isinstance(obj, Collection):
        return obj
    return connect(getattr(obj, "url", obj), read_only=read_only)


def load_alignment(alignment) -> tuple[Alignment, Path | None]:
    """``(alignment, the file it came from)`` for an :class:`Alignment` (no file) or a path to an artifact."""
    if isinstance(alignment, Alignment):
        return alignment, None
    path = Path(alignment)
    return Alignment.load(path), path


def describe(target: str) -> dict:
    """What ``vecbridge info`` shows: an alignment file's summary, or a collection's dimension, metric and count, the
    stamp of the space it is in (its identity, not the fingerprint's vectors) and what its records' own stamps say
    (how many per origin and per space)."""
    if Path(target).is_file() and not target.endswith(".npy"):
        return Alignment.load(target).summary()
    from .provenance import record_stamps_summary, stamp_summary

    coll = connect(target, read_only=True)
    stamp = coll.read_stamp()
    return {**coll.info().as_dict(), "stamp": stamp_summary(stamp) or stamp, "records": record_stamps_summary(coll)}
