"""How PostgreSQL keeps each record's stamp: typed columns beside the vector column they describe, and the fields all
records of a write share kept once, in a side table.

An upgrade stamps every record it writes with the same origin, map or model and space, plus a digest and two scores
of the record's own. Written as one ``jsonb`` document a row, the server parsed each of them: a bulk load took a
quarter longer than the same load without stamps. As fixed-width fields the server copies a few bytes a row, and the
client lays them out with numpy, not record by record.

Per vector column (the default column's names below; ``__NAME`` appended for vector column NAME):

- ``vecbridge_origin`` (text, indexed): the origin alone, what a filtered scan of the stamps reads;
- ``vecbridge_stamp`` (jsonb): the whole stamp, where a write's stamps do not fit the columns below (other fields,
  or fields of other types);
- ``vecbridge_stamp_set`` (int8): the id of the fields the record shares with the others of its write, kept once in
  the schema's ``vecbridge_stamp_sets (id int8 PRIMARY KEY, shared json)``; the id is a hash of their JSON text, so
  every writer (a Ray worker, a replica) names the same fields the same way and a set is never rewritten;
- ``vecbridge_stamp_digest`` (text), ``vecbridge_stamp_residual`` and ``vecbridge_stamp_hubness`` (float8): the
  record's own fields, NULL where it has none.

A row's stamp is the whole one where it has one, else its set's fields, its origin and its own fields. A row whose
set is gone (the side table dropped, or the table restored without it) reads unstamped with its vector, and the reads
of stamps alone (which records are still mapped) refuse it rather than take it for unstamped. Sets are never
deleted (another table of the schema may name one; each is a few hundred bytes, one per origin, map or model and
space).
"""
from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass

import numpy as np

from ..records import StampColumns
from .base import parse_record_stamp, record_stamp_columns, record_stamp_keys, record_stamp_text, record_stamp_texts

#: each column's role -> its SQL type, in the order reads select them
ROLES = {"origin": "text", "stamp": "jsonb", "set": "int8", "digest": "text", "residual": "float8",
         "hubness": "float8"}
#: the per-record fields kept in columns of their own, with the kind of value they hold (see stamp_column_kind)
TYPED = {"digest": "str", "residual": "float", "hubness": "float"}
#: the side table (in each collection's schema) of the fields records share
SETS_TABLE = "vecbridge_stamp_sets"
#: a NULL field of a binary COPY row
NULL = struct.pack(">i", -1)


def copy_field(raw: bytes) -> bytes:
    """A field of a binary COPY row: its length, then its bytes."""
    return struct.pack(">i", len(raw)) + raw


def copy_jsonb(raw: bytes) -> bytes:
    """A ``jsonb`` field of a binary COPY row: its length, format version 1, then the JSON text."""
    return struct.pack(">ib", len(raw) + 1, 1) + raw


def column_names(field: str | None, max_bytes: int) -> dict[str, str]:
    """Role -> column name for the stamps of vector field ``field`` (None: the default one). A name longer than
    PostgreSQL keeps (``max_bytes``) ends in a hash of the whole, so two long vector columns never share columns."""
    origin, stamp = record_stamp_keys(None)
    suffix = record_stamp_keys(field)[0][len(origin):]
    names = {"origin": origin + suffix, "stamp": stamp + suffix,
             **{role: f"{stamp}_{role}{suffix}" for role in ("set", *TYPED)}}
    return {role: n if len(n.encode()) <= max_bytes else
            n.encode()[:max_bytes - 17].decode(errors="ignore") + "_" + hashlib.sha1(n.encode()).hexdigest()[:16]
            for role, n in names.items()}


@dataclass
class CopyFields:
    """A batch's stamps as binary COPY fields by role: ``fixed`` as one ``(n, width)`` uint8 array each (the same
    width in every row: laid next to the vector in one go), ``rows`` as one encoded field per row. ``shared``: the
    (id, JSON text) of the set the rows name, None for whole stamps."""

    fixed: dict
    rows: dict
    shared: tuple[int, str] | None

    @property
    def roles(self) -> list[str]:
        return [*self.fixed, *self.rows]


def set_id(text: str) -> int:
    """The id of a set of shared fields: a 64-bit hash of their JSON text."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


def copy_fields(stamps) -> CopyFields:
    """The COPY fields of a batch's stamps, checked first (a bad stamp is bad input before anything is written):
    columns of the typed fields and a shared set where the stamps are a :class:`StampColumns` whose own fields are
    the typed ones and whose origin is shared (as a :class:`~vecbridge.runtime.record_stamps.Stamper` makes them),
    else each stamp whole."""
    if isinstance(stamps, StampColumns):
        cols, _, kinds = record_stamp_columns(stamps)
        if "origin" in cols.shared and all(TYPED.get(name) == kind for name, kind in kinds.items()):
            return _typed(cols)
    origins, texts = record_stamp_texts(stamps)
    known: dict = {None: NULL}   # an origin's field, made once (most writes share one)
    for origin in origins:
        if origin not in known:
            known[origin] = copy_field(origin.encode())
    return CopyFields({}, {"origin": [known[o] for o in origins],
                           "stamp": [NULL if t is None else copy_jsonb(t.encode()) for t in texts]}, None)


def _typed(cols: StampColumns) -> CopyFields:
    n = len(cols)
    shared = record_stamp_text(cols.shared)
    ident = set_id(shared)
    fixed = {"origin": _repeat(copy_field(cols.shared["origin"].encode()), n),
             "set": _repeat(struct.pack(">iq", 8, ident), n)}
    rows = {}
    for name, values in cols.columns.items():
        if TYPED[name] == "float":
            values = np.asarray(values if isinstance(values, np.ndarray) else
                                [np.nan if v is None else v for v in values], dtype=np.float64)
            if np.isnan(values).any():
                rows[name] = [NULL if v != v else struct.pack(">id", 8, v) for v in values.tolist()]
            else:
                out = np.empty(n, dtype=[("len", ">i4"), ("value", ">f8")])
                out["len"], out["value"] = 8, values
                fixed[name] = out.view(np.uint8).reshape(n, 12)
            continue
        texts = [None if v is None else v.encode() for v in values]
        widths = {len(t) for t in texts if t is not None}
        if None not in texts and len(widths) == 1:
            width = widths.pop()
            out = np.empty((n, 4 + width), dtype=np.uint8)
            out[:, :4] = np.frombuffer(struct.pack(">i", width), dtype=np.uint8)
            out[:, 4:] = np.frombuffer(b"".join(texts), dtype=np.uint8).reshape(n, width)
            fixed[name] = out
        else:
            rows[name] = [NULL if t is None else copy_field(t) for t in texts]
    return CopyFields(fixed, rows, (ident, shared))


def _repeat(field: bytes, n: int) -> np.ndarray:
    return np.broadcast_to(np.frombuffer(field, dtype=np.uint8), (n, len(field)))


def stamp_of(row, sets: dict) -> dict | None:
    """One row's stamp from its columns in :data:`ROLES` order and the shared sets read so far (id -> fields);
    None where it has none, or its set is gone."""
    origin, whole, ident = row[0], row[1], row[2]
    if whole is not None:
        return parse_record_stamp(whole)
    shared = sets.get(ident)
    if origin is None or shared is None:
        return None
    out = dict(shared)
    out["origin"] = origin
    for name, value in zip(TYPED, row[3:]):
        if value is not None:
            out[name] = value
    return out


def parse_set(text) -> dict | None:
    """A set's fields from the JSON text kept; None for a damaged one."""
    try:
        shared = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None
    return shared if isinstance(shared, dict) else None
