"""Point ids and scan cursors shared by the ``qdrant://`` and ``qdrant-edge://`` connectors (no client import, so
each connector needs only its own client library).

Qdrant accepts unsigned 64-bit integers and UUIDs as point ids. Any other record id is mapped to a UUID5 in a fixed
namespace and kept in the payload under :data:`ID_KEY`, which is removed again on read, so both connectors give
users back exactly the ids they wrote, and a collection written by one reads the same through the other.
"""
from __future__ import annotations

import json
import uuid
from typing import Any

import numpy as np

from ..errors import InputError

#: payload key holding an original id that Qdrant cannot take as a point id
ID_KEY = "_vb_id"
#: namespace of the UUID5 point ids derived from other ids
ID_NAMESPACE = uuid.UUID("6f1d3f0e-5c3a-4f38-9a53-7c1b8d0e2a41")
#: Qdrant distance names -> vecbridge metric vocabulary
TO_METRIC = {"Cosine": "cosine", "Dot": "dot", "Euclid": "l2"}


def point_id(record_id: Any) -> tuple[int | str, bool]:
    """The Qdrant point id for a record id, and whether the original must be kept in the payload."""
    if isinstance(record_id, (int, np.integer)) and not isinstance(record_id, (bool, np.bool_)):
        value = int(record_id)
        if 0 <= value < 2 ** 64:
            return value, False
        if value < -2 ** 63:  # the payload keeps 64-bit integers only
            raise InputError(f"integer ids must fit in 64 bits, got {value}")
        return str(uuid.uuid5(ID_NAMESPACE, json.dumps(value))), True
    if isinstance(record_id, str):
        try:
            if str(uuid.UUID(record_id)) == record_id:
                return record_id, False
        except ValueError:
            pass
        return str(uuid.uuid5(ID_NAMESPACE, json.dumps(record_id))), True
    raise InputError(f"ids must be strings or integers, got {type(record_id).__name__}")


def json_point_id(engine_id: Any) -> int | str:
    """A point id as the engine returns it (int or UUID object) as a JSON value."""
    return engine_id if isinstance(engine_id, int) else str(engine_id)


def original_id(engine_id: Any, payload: dict | None) -> Any:
    """The record id of a point (removing the reserved key from ``payload``)."""
    if payload and ID_KEY in payload:
        return payload.pop(ID_KEY)
    return json_point_id(engine_id)


def decode_cursor(cursor: Any, what: str) -> int | str:
    """A scan cursor (the last point id of a batch) checked and normalised."""
    if isinstance(cursor, int) and not isinstance(cursor, bool) and cursor >= 0:
        return cursor
    if isinstance(cursor, str):
        try:
            return str(uuid.UUID(cursor))
        except ValueError:
            pass
    raise InputError(f"invalid scan cursor {cursor!r} for a {what}")
