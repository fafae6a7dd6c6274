"""The protocol every store connector implements, and the record type that travels between them.

One connector = one small module (``vecbridge/connectors/<store>.py``) with one :class:`Collection` subclass, all
shaped alike. A collection is what a URL names (store + collection/table); it may not exist yet (``create`` makes it).

Resumable scans: ``scan(batch_size, after=cursor)`` yields :class:`VectorBatch` objects whose ``cursor`` is an opaque
JSON-serialisable value; passing the cursor of the last batch that was fully processed to a new ``scan`` continues
with the next record, nothing skipped and nothing repeated (as long as the collection is not modified in between).

Partitioned scans: connectors that scan with a keyset cursor (file, pgvector, Milvus, Qdrant, Qdrant Edge) or an
offset cursor (Chroma) also split a collection into disjoint :class:`KeyRange` slices (:meth:`Collection.key_ranges`),
and ``scan(after=r.after, until=r.until)`` reads exactly one slice: the slices together hold every record once. A
distributed job gives each worker one slice, unless the store is ``single_process`` (:class:`Capabilities`).
"""
from __future__ import annotations

import abc
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ..errors import InputError, NotFound, StoreError, VecbridgeError
from ..records import (  # noqa: F401 (the record types, also read from here by every connector and job)
    CollectionInfo,
    KeyRange,
    StampColumns,
    VectorBatch,
    quantile_positions,
    ranges_from_bounds,
    ranges_from_keys,
)
from ..secrets import redact_text, secrets_in
from ..validation import check_vectors

METRICS = ("cosine", "dot", "l2")
#: seconds to wait before each retry of a call that failed transiently (then one last attempt): the one schedule
#: of every connector, short enough that a dead server fails within seconds, long enough to ride out a restart
RETRY_DELAYS = (0.5, 1.0, 2.0)
#: the most characters of a client's own words that a message quotes
DETAIL_CHARS = 300
#: the most bytes of JSON one stamp may take: well within what every store's collection metadata holds
STAMP_BYTES = 64 * 1024
#: the key a stamp is kept under in a store's metadata (``vecbridge:stamp:NAME`` for a named vector field)
STAMP_KEY = "vecbridge:stamp"
#: the payload keys a record's own stamp is kept under where a store keeps it in the payload (``__NAME`` appended for
#: a named vector field): the stamp's origin alone (so that stores filter on it) and the whole stamp as JSON text
RECORD_ORIGIN_KEY = "vecbridge_origin"
RECORD_STAMP_KEY = "vecbridge_stamp"
#: the most bytes of JSON one record's stamp may take
RECORD_STAMP_BYTES = 2048


@dataclass(frozen=True)
class CollectionIdentity:
    """Which stored collection a URL names, however the URL spells it.

    ``store`` is the engine family, ``location`` where it lives (a resolved absolute path, or a canonical
    ``host:port/database`` for a server) and ``name`` the collection or table in it. The vector field is left out on
    purpose: two URLs that differ only in ``?vector=`` name the same collection, and dropping one drops the other.
    Jobs compare identities, never URL strings, before they write or drop anything.
    """

    store: str
    location: str
    name: str = ""

    def __str__(self) -> str:
        return f"{self.store}:{self.location}" + (f"/{self.name}" if self.name else "")


def first_line(exc: BaseException) -> str:
    """An exception's message as one line (its first line, whitespace collapsed), or its type's name."""
    lines = str(exc).strip().splitlines()
    return " ".join(lines[0].split()) if lines else type(exc).__name__


def first_duplicate(ids: Iterable, seen: set | None = None):
    """The first id that ``ids`` holds twice, or that ``seen`` (ids met before, added to) holds already; None if
    none. An id that cannot be a key (a list, a dict) is refused as bad input."""
    seen = set() if seen is None else seen
    for i in ids:
        try:
            if i in seen:
                return i
            seen.add(i)
        except TypeError:
            raise InputError(f"id {i!r} is not a string or an integer") from None
    return None


def check_metric(metric: str) -> str:
    metric = metric.lower()
    aliases = {"ip": "dot", "inner_product": "dot", "euclid": "l2", "euclidean": "l2", "cos": "cosine"}
    metric = aliases.get(metric, metric)
    if metric not in METRICS:
        raise InputError(f"metric must be one of cosine, dot, l2; got {metric!r}")
    return metric


@dataclass(frozen=True)
class Capabilities:
    """What a store can do, declared by its connector (jobs read these; they never probe methods):

    ``key_ranges``: :meth:`Collection.key_ranges` cuts the collection into slices (parallel, resumable scans);
    ``named_vectors``: :meth:`Collection.with_vector_field` / ``add_vector_field`` (several vectors per record);
    ``alias``: :meth:`Collection.point_alias` (an atomic, zero-downtime switch); ``serving_view``: a view a client
    queries whose column can be switched; ``deferred_index``: ``create(..., index=False)`` then
    :meth:`Collection.build_index` loads faster; ``single_process``: one process at a time may open it (a job spread
    over processes refuses it); ``preferred_batch_size``: records per upsert when the user names none; ``stamp``:
    where the store keeps the stamps of :meth:`Collection.write_stamp`, in words for a person ("" where nowhere);
    ``record_stamps``: where it keeps each record's own stamp (``VectorBatch.stamps``), in words ("" where
    nowhere)."""

    key_ranges: bool = False
    named_vectors: bool = False
    alias: bool = False
    serving_view: bool = False
    deferred_index: bool = False
    single_process: bool = False
    preferred_batch_size: int = 1000
    stamp: str = ""
    record_stamps: str = ""


def stamp_key(field: str | None) -> str:
    """The metadata key of the stamp of vector field ``field`` ("" or None: the collection's unnamed vector)."""
    return f"{STAMP_KEY}:{field}" if field else STAMP_KEY


def stamp_text(stamp) -> str:
    """A stamp as the JSON text a store keeps: a JSON object of at most :data:`STAMP_BYTES`, else bad input."""
    if not isinstance(stamp, dict):
        raise InputError(f"a stamp must be a dict, got {type(stamp).__name__}")
    try:
        text = json.dumps(stamp, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InputError(f"a stamp must be JSON-serialisable ({first_line(exc)})") from None
    size = len(text.encode("utf-8"))
    if size > STAMP_BYTES:
        raise InputError(f"a stamp may take at most {STAMP_BYTES // 1024} KB of JSON; this one takes {size:,} bytes")
    return text


def record_stamp_keys(field: str | None) -> tuple[str, str]:
    """The payload keys of the record stamps of vector field ``field``: (origin, whole stamp)."""
    suffix = f"__{field}" if field else ""
    return RECORD_ORIGIN_KEY + suffix, RECORD_STAMP_KEY + suffix


def _stamp_encoder() -> Callable[[Any], str]:
    """One reusable compact JSON encoder for record stamps: ``json.dumps`` with options builds a new encoder for
    every call, which cost more than the encoding itself at one stamp per record. The C encoder where this Python
    has it (checked to write what ``json.dumps`` writes), else the pure-Python one."""
    options = {"ensure_ascii": False, "allow_nan": False, "separators": (",", ":")}
    slow = json.JSONEncoder(**options).encode
    make = getattr(json.encoder, "c_make_encoder", None)
    try:
        fast = make(None, slow.__self__.default, json.encoder.encode_basestring, None, ":", ",", False, False, False)

        def encode(obj, _fast=fast) -> str:
            return _fast(obj, 0)[0]
        probe = {"origin": "mapped", "d": 384, "r": 0.1, "é": [None, True, "\"\n"]}
        if encode(probe) == json.dumps(probe, **options):
            return encode
    except Exception:  # noqa: BLE001 (no C encoder, or another signature: the documented way below)
        pass
    return slow


_encode_stamp = _stamp_encoder()
#: a string as a JSON string, as the stamp encoder writes it (ensure_ascii off)
_encode_string = json.encoder.encode_basestring
#: what every record stamp key starts with (:func:`is_stamp_key`)
_STAMP_KEY_PREFIXES = (RECORD_ORIGIN_KEY, RECORD_STAMP_KEY)


def record_stamp_text(stamp) -> str:
    """One record's stamp as the JSON text a store keeps: a JSON object with a string ``origin`` (how its vector
    was made: ``mapped``, ``native``, ...) of at most :data:`RECORD_STAMP_BYTES`, else bad input."""
    if not isinstance(stamp, dict) or not isinstance(stamp.get("origin"), str):
        raise InputError("a record's stamp must be a dict with a string 'origin'")
    try:
        text = _encode_stamp(stamp)
    except (TypeError, ValueError) as exc:
        raise InputError(f"a record's stamp must be JSON-serialisable ({first_line(exc)})") from None
    except RecursionError:   # the shared encoder keeps no circular-reference markers
        raise InputError("a record's stamp must be JSON-serialisable (it contains itself, or nests too deeply)"
                         ) from None
    # an ASCII text takes one byte a character: only other texts need encoding to be measured
    if len(text) > RECORD_STAMP_BYTES or (not text.isascii() and len(text.encode("utf-8")) > RECORD_STAMP_BYTES):
        raise InputError(f"a record's stamp may take at most {RECORD_STAMP_BYTES:,} bytes of JSON")
    return text


def stamp_column_kind(values) -> str:
    """How a stamp column is kept: ``str`` (texts), ``float`` (finite floats; a float64 array, NaN for none) or
    ``json`` (anything else)."""
    if isinstance(values, np.ndarray):
        return "float"
    kinds = set(map(type, values)) - {type(None)}
    if kinds <= {str}:
        return "str"
    if kinds == {float}:
        return "float"
    return "json"


def record_stamp_columns(stamps) -> tuple[StampColumns | None, np.ndarray | None, dict]:
    """A batch's record stamps checked as :func:`record_stamp_text` checks each one, as columns (what a store keeping
    stamps in columns writes), with which records have one (None: every record). Columns made by
    :class:`~vecbridge.runtime.record_stamps.Stamper` are checked by column, in a few passes at C speed; others
    stamp by stamp. The third item: each column's :func:`stamp_column_kind`. ``(None, mask, {})`` where no record
    has a stamp."""
    if not isinstance(stamps, StampColumns):
        stamps = list(stamps)
        has = np.fromiter((s is not None for s in stamps), bool, len(stamps))
        present = [s for s in stamps if s is not None]
        for stamp in present:
            record_stamp_text(stamp)
        cols = StampColumns.of(present) if present else None
        kinds = {} if cols is None else {k: stamp_column_kind(v) for k, v in cols.columns.items()}
        return cols, (None if has.all() else has), kinds
    cols, kinds = stamps, {}
    origins = cols.columns.get("origin")
    if origins is None:
        record_stamp_text(cols.shared)
    elif set(map(type, origins)) != {str}:
        raise InputError("a record's stamp must be a dict with a string 'origin'")
    widest = len(_encode_stamp(cols.shared).encode("utf-8"))
    for name, values in cols.columns.items():
        kind = kinds[name] = stamp_column_kind(values)
        if kind == "float" and not isinstance(values, np.ndarray) and not np.isfinite(
                np.asarray(values, dtype=np.float64)[[v is not None for v in values]]).all():
            raise InputError("a record's stamp must be JSON-serialisable (Out of range float values are not JSON "
                             "compliant)")
        if kind == "str":
            longest = max(map(len, values if None not in values else (v for v in values if v is not None)),
                          default=0) * 6 + 2
        else:
            longest = 32 if kind == "float" else RECORD_STAMP_BYTES
        widest += len(_encode_stamp(name).encode("utf-8")) + 2 + longest
    if widest > RECORD_STAMP_BYTES:   # the bound says nothing: measure every stamp
        for stamp in cols:
            record_stamp_text(stamp)
    return cols, None, kinds


def record_stamp_texts(stamps) -> tuple[list, list]:
    """Each record's ``(origin, stamp JSON text)`` (None, None where it has none), checked and written as
    :func:`record_stamp_text` writes one. For stamps in columns (a :class:`Stamper`'s) the texts are put together
    from the shared fields, encoded once, and each column's values encoded by kind, with no dict made per record:
    the stamps of a write into PostgreSQL cost as much as the write itself, one dict and one encoding at a time."""
    if not isinstance(stamps, StampColumns) or set(stamps.shared) & set(stamps.columns):
        texts = [None if st is None else record_stamp_text(st) for st in stamps]
        return [None if st is None else st["origin"] for st in stamps], texts
    cols, _, kinds = record_stamp_columns(stamps)
    head = _encode_stamp(cols.shared)
    prefix, comma = head[:-1], "," if cols.shared else ""
    parts = []
    for name, values in cols.columns.items():
        key, kind = _encode_string(name) + ":", kinds[name]
        if isinstance(values, np.ndarray):
            values = [None if v != v else v for v in values.tolist()]
        encode = _encode_string if kind == "str" else float.__repr__ if kind == "float" else _encode_stamp
        parts.append([None if v is None else key + encode(v) for v in values])
    texts = [prefix + ((comma + body) if body else "") + "}"
             for body in (",".join(x for x in row if x is not None) for row in zip(*parts))] if parts \
        else [head] * len(cols)
    if max(map(len, texts), default=0) > RECORD_STAMP_BYTES // 6:   # long, or many multi-byte characters: measure
        for text in texts:
            if len(text.encode("utf-8")) > RECORD_STAMP_BYTES:
                raise InputError(f"a record's stamp may take at most {RECORD_STAMP_BYTES:,} bytes of JSON")
    origins = [cols.shared["origin"]] * len(cols) if "origin" in cols.shared else list(cols.columns["origin"])
    return origins, texts


def is_stamp_key(key) -> bool:
    """Whether a payload key is one of vecbridge's record stamp keys (of any vector field)."""
    return isinstance(key, str) and key.startswith(_STAMP_KEY_PREFIXES)


def _without_stamp_keys(payload) -> dict:
    """A copy of ``payload`` (None: empty) without record stamp keys; the copy alone where it has none (most)."""
    if not payload:
        return {}
    if any(map(is_stamp_key, payload)):
        return {k: v for k, v in payload.items() if not is_stamp_key(k)}
    return dict(payload)


def stamps_into_payloads(batch: VectorBatch, field: str | None = None) -> list[dict]:
    """The payloads to write for ``batch`` in a store that keeps record stamps in the payload: each payload (without
    stamp keys it may carry from elsewhere) plus its stamp's two keys; unchanged where the batch has no stamps."""
    if batch.stamps is None:
        return batch.payloads
    origin_key, stamp_key = record_stamp_keys(field)
    out = []
    for payload, origin, text in zip(batch.payloads, *record_stamp_texts(batch.stamps)):
        clean = _without_stamp_keys(payload)
        if text is not None:
            clean[origin_key], clean[stamp_key] = origin, text
        out.append(clean)
    return out


def stamps_from_payloads(payloads: list, field: str | None = None) -> tuple[list[dict], list[dict | None]]:
    """Split what a store read into the user's payloads (every stamp key removed) and the record stamps of vector
    field ``field`` (None where a record has none, or a damaged one)."""
    _, stamp_key = record_stamp_keys(field)
    clean, stamps = [], []
    for payload in payloads:
        payload = payload or {}
        if not any(is_stamp_key(k) for k in payload):
            clean.append(payload)
            stamps.append(None)
            continue
        stamps.append(parse_record_stamp(payload.get(stamp_key)))
        clean.append({k: v for k, v in payload.items() if not is_stamp_key(k)})
    return clean, stamps


def parse_record_stamp(text) -> dict | None:
    """A record stamp from the JSON text a store kept (a dict as it is); None for none or a damaged one."""
    if isinstance(text, dict):
        return text if isinstance(text.get("origin"), str) else None
    if not isinstance(text, str):
        return None
    try:
        stamp = json.loads(text)
    except ValueError:
        return None
    return stamp if isinstance(stamp, dict) and isinstance(stamp.get("origin"), str) else None


class Collection(abc.ABC):
    """One collection in one store. Connectors override the abstract methods; the rest has shared behaviour."""

    #: URL scheme(s) this connector serves, for messages
    scheme: str = ""
    #: what this collection's store can do (see :class:`Capabilities`): every connector declares its own, as a class
    #: attribute or, where it depends on the URL (an embedded store or a server), as a property
    capabilities: Capabilities = Capabilities()

    @property
    def preferred_batch_size(self) -> int:
        """Kept for one release: read ``capabilities.preferred_batch_size``."""
        return self.capabilities.preferred_batch_size

    @property
    def single_process(self) -> bool:
        """Kept for one release: read ``capabilities.single_process``."""
        return self.capabilities.single_process

    @property
    def supports_deferred_index(self) -> bool:
        """Kept for one release: read ``capabilities.deferred_index``."""
        return self.capabilities.deferred_index

    def __init__(self, url: str, *, read_only: bool = False):
        self.url = url
        self.read_only = read_only

    # --- reading --------------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def exists(self) -> bool:
        """Whether the collection exists (a missing collection is not an error until it is read)."""

    @abc.abstractmethod
    def info(self) -> CollectionInfo:
        """Dimension, metric, count; raises :class:`StoreError` if the collection does not exist."""

    @abc.abstractmethod
    def sample(self, n: int, seed: int = 0) -> VectorBatch:
        """A uniform random sample of ``min(n, count)`` records, deterministic for a seed."""

    @abc.abstractmethod
    def scan(self, batch_size: int = 1000, after: Any = None) -> Iterator[VectorBatch]:
        """Every record exactly once, in batches, each carrying the cursor to resume after it.

        Connectors that implement :meth:`key_ranges` also take ``until`` (a cursor in the same order): the scan
        then stops after that record, inclusive."""

    def key_ranges(self, n: int, seed: int = 0) -> list[KeyRange]:
        """At most ``n`` disjoint :class:`KeyRange` slices that together cover every record, in scan order, cut at
        quantiles of sampled primary keys (deterministic for a seed), or of positions where the store has no key
        order to range over (Chroma); each is read with ``scan(after=r.after, until=r.until)``. Connectors without a
        ranged scan refuse (and do not declare ``capabilities.key_ranges``)."""
        raise StoreError(f"{self.scheme or 'store'}: ranges not supported yet")

    @abc.abstractmethod
    def get(self, ids: Sequence) -> VectorBatch:
        """The records with these ids, in the order asked; ids that do not exist are left out."""

    @abc.abstractmethod
    def search(self, vectors, k: int = 10) -> tuple[list[list], np.ndarray]:
        """Batched nearest neighbours: (ids per query, scores n_queries x k; higher is better)."""

    @property
    def identity(self) -> CollectionIdentity:
        """The collection's canonical identity (see :class:`CollectionIdentity`).

        Connectors override this; the fallback, for third-party connectors, is the URL without its query, which
        is only as good as the spelling is consistent."""
        return CollectionIdentity(self.scheme or "store", self.display_url.split("?", 1)[0].rstrip("/"))

    #: name of the vector field this handle reads and writes (None: the collection's only or default one)
    vector_field: str | None = None

    @property
    def local_path(self) -> str | None:
        """The file or directory on this machine that holds the collection's data (an embedded store's directory or
        database file, a file store's folder), where nothing else may be written; None for a server."""
        return None

    def check_writable(self) -> None:
        """Raise :class:`StoreError` now if a write would fail for lack of permission (called before a job creates
        anything, so that a refused write never leaves an empty target behind). Server stores check on first use."""

    def writer_lock(self) -> contextlib.AbstractContextManager:
        """The store's own lock that makes this run the collection's only writer, where the store has one (held for
        the whole job; raise :class:`StoreError` naming the holder when another run has it)."""
        return contextlib.nullcontext()

    # --- writing --------------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def create(self, dim: int, metric: str = "cosine", *, exist_ok: bool = False,
               index: bool = True) -> "Collection":
        """Create the collection the URL names (``exist_ok``: one that exists with this dim and metric is fine).

        ``index=False`` leaves the vector index to :meth:`build_index` after a bulk load, where
        ``capabilities.deferred_index`` says that is faster; stores that index as they go ignore it."""

    @abc.abstractmethod
    def upsert(self, batch: VectorBatch) -> int:
        """Insert or replace records by id (idempotent: writing the same batch twice changes nothing)."""

    def delete(self, ids: Sequence) -> int:
        """Remove the records with these ids, each whole (its payload and every vector field, also through a
        :meth:`with_vector_field` view); ids that do not exist are ignored, and so is an id given twice.

        Returns the number of distinct ids asked to be deleted, not how many of them existed (most stores do not
        tell, and asking first would cost a read per call). A read-only handle refuses, as :meth:`upsert` does; a
        missing collection raises :class:`NotFound`. Long lists are sent in chunks, each its own request, so a
        failure part way through leaves the earlier chunks deleted: deleting the same ids again finishes the job."""
        raise StoreError(f"{self.scheme}: deleting records is not supported by this store")

    def drop(self) -> None:
        """Delete the whole collection (used by tests and by ``--overwrite``)."""
        raise StoreError(f"{self.scheme}: dropping a collection is not supported by this store")

    def add_vector_field(self, name: str, dim: int, metric: str = "cosine") -> None:
        """Add a second vector field / column to an existing collection."""
        raise StoreError(f"{self.scheme}: adding a vector field is not supported by this store")

    def drop_vector_field(self, name: str) -> None:
        """Remove a vector field / column and its values (what ``upgrade finalize --drop-old`` asks for)."""
        raise StoreError(f"{self.scheme}: removing a vector field is not supported by this store")

    def build_index(self) -> None:
        """Build the search index after a bulk load (no-op for stores that maintain it as they go)."""

    def point_alias(self, alias: str) -> None:
        """Make ``alias`` name this collection, moving it atomically if it named another (Qdrant, Milvus): what a
        zero-downtime cutover switches. Stores without aliases refuse."""
        raise StoreError(f"{self.scheme}: collection aliases are not supported by this store")

    def with_vector_field(self, name: str) -> "Collection":
        """A view of this collection whose vectors are the named field (reads and upserts touch only that field)."""
        raise StoreError(f"{self.scheme}: named vector fields are not supported by this store")

    # --- stamps: which space the vectors are in, kept in the store itself ---------------------------------------------
    def read_stamp(self) -> dict | None:
        """The stamp vecbridge left on this collection (on this vector field, for a :meth:`with_vector_field` view):
        what a later command checks before applying a map. None when there is none, or no collection."""
        text = self._load_stamp()
        if text is None:
            return None
        try:
            stamp = json.loads(text)
        except ValueError:
            stamp = None
        if not isinstance(stamp, dict):
            raise StoreError(f"{self.display_url}: its stamp is damaged (not a JSON object); write it again")
        return stamp

    def write_stamp(self, stamp: dict) -> None:
        """Replace this collection's (this vector field's) stamp: a JSON object of at most :data:`STAMP_BYTES`, kept
        where ``capabilities.stamp`` says, unseen by scans, counts and searches, and dropped with the collection."""
        self._writable()
        self._save_stamp(stamp_text(stamp))

    def _load_stamp(self) -> str | None:
        """The stamp's JSON text as the store holds it, None when there is none. Connectors override this and
        :meth:`_save_stamp`; one that does not holds no stamps."""
        return None

    def _save_stamp(self, text: str) -> None:
        """Keep ``text`` (checked JSON) as the stamp of this vector field, replacing any stamp it had."""
        raise StoreError(f"{self.scheme or 'store'}: this store cannot hold a stamp")

    # --- record stamps: how each record's vector was made, written in the same upsert ---------------------------------
    def scan_stamps(self, batch_size: int = 1000, origins: Sequence[str] | None = None) -> Iterator[tuple[list, list]]:
        """``(ids, stamps)`` of every record of this vector field that has a stamp, in batches, where the stamp's
        origin is one of ``origins`` (None: any): "which records are still mapped" is this scan. Connectors whose
        store filters and reads payloads without vectors override it; this one reads the records."""
        wanted = None if origins is None else set(origins)
        for batch in self.scan(batch_size=batch_size):
            stamps = batch.stamps or [None] * len(batch)
            keep = [(i, s) for i, s in zip(batch.ids, stamps)
                    if s is not None and (wanted is None or s["origin"] in wanted)]
            if keep:
                yield [i for i, _ in keep], [s for _, s in keep]

    def stamps_of(self, ids: Sequence) -> dict:
        """``{id: stamp}`` of the records with these ids that have one (the others are left out)."""
        got = self.get(list(ids))
        return {i: s for i, s in zip(got.ids, got.stamps or []) if s is not None}

    # --- shared helpers ---------------------------------------------------------------------------------------------
    def _writable(self):
        if self.read_only:
            raise StoreError(f"{self.display_url} is opened read-only")

    def _ids_to_delete(self, ids: Sequence) -> list:
        """The preamble of :meth:`delete`: a writable handle, and the ids each once, in the order first given."""
        self._writable()
        if isinstance(ids, (str, bytes)):
            raise InputError("delete takes a sequence of ids, not a single string")
        try:
            return list(dict.fromkeys(ids))
        except TypeError:
            raise InputError("ids must be strings or integers") from None

    def _check_create_args(self, dim, metric: str) -> tuple[int, str]:
        """The shared preamble of ``create`` and ``add_vector_field``: writable handle, known metric, positive
        dimension."""
        self._writable()
        metric = check_metric(metric)
        if int(dim) <= 0:
            raise InputError(f"dimension must be positive, got {dim}")
        return int(dim), metric

    def _check_existing(self, dim: int, metric: str, have_dim: int, have_metric: str, exist_ok: bool) -> None:
        """``create`` on a collection that exists: fine only with ``exist_ok`` and the same schema."""
        if not exist_ok:
            raise StoreError(f"collection already exists: {self.display_url}")
        if (int(have_dim), have_metric) != (dim, metric):
            raise StoreError(f"{self.display_url} exists with dim {have_dim} / {have_metric}, not {dim} / {metric}")

    def _check_batch(self, batch: VectorBatch, dim: int) -> np.ndarray:
        """Refuse a wrong-dimension or non-finite batch before anything is written."""
        if len(batch) == 0:
            return batch.vectors
        dup = first_duplicate(batch.ids)
        if dup is not None:
            raise InputError(f"duplicate id {dup!r} in one batch of records (in a migration: in the source)")
        return check_vectors(batch.vectors, "vectors", dim=dim, allow_zero_rows=True, dtype=np.float32)

    # --- client calls: one retry schedule, one mapping of failures to one-line errors ---------------------------
    #: the message of each failure kind :meth:`_classify` returns, formatted with ``url`` (redacted), ``what`` (the
    #: operation), ``detail`` (the client's words, secrets masked) and ``attempts`` ("4 attempts"); kinds not listed
    #: use "error", and "missing" is always ``collection not found: URL`` (:class:`NotFound`)
    _messages: dict[str, str] = {"error": "{url}: {what}: {detail}"}

    def _classify(self, exc: Exception) -> tuple[str, str]:
        """(kind, detail) of a client failure: "transient" (worth retrying), "missing" (no such collection), "input"
        (a bad request: :class:`InputError`), "auth", "error", or another kind of ``_messages``. Connectors
        tell by exception type or status code; by message text only where the client gives nothing else."""
        return "error", first_line(exc)

    def _retried(self, kind: str) -> bool:
        """Whether a failure of this kind is retried (only where repeating the call is safe)."""
        return kind == "transient"

    def _secrets(self) -> list[str]:
        """Strings a client may echo that no message may show (passwords, tokens)."""
        return []

    def _masked(self, detail: str) -> str:
        """A client's words fit for a message, cut to :data:`DETAIL_CHARS`: the connection's secrets (and those its
        URL carries), URLs and ``key=value`` secrets masked by the one filter, :func:`vecbridge.secrets.redact_text`."""
        return redact_text(detail, [*self._secrets(), *secrets_in(getattr(self, "url", ""))])[:DETAIL_CHARS]

    def _failure(self, what: str, kind: str, detail: str, attempts: int = 1) -> VecbridgeError:
        """The one-line error for a classified failure: it names the redacted URL and never a secret."""
        if kind == "missing":
            return NotFound(f"collection not found: {self.display_url}")
        template = self._messages.get(kind, self._messages["error"])
        message = template.format(url=self.display_url, what=what, detail=self._masked(detail),
                                  attempts=f"{attempts} attempt{'s' if attempts > 1 else ''}")
        return (InputError if kind == "input" else StoreError)(message)

    def _call(self, what: str, fn: Callable, *args, **kwargs):
        """``fn(*args, **kwargs)``, one client call: retried after each of :data:`RETRY_DELAYS` while it fails in a
        way :meth:`_retried` allows; its failure raised as a one-line error (vecbridge's own errors pass as is)."""
        for attempt, delay in enumerate((*RETRY_DELAYS, None), 1):
            try:
                return fn(*args, **kwargs)
            except VecbridgeError:
                raise
            except Exception as exc:  # noqa: BLE001 - clients raise many types; _classify sorts them
                kind, detail = self._classify(exc)
                if delay is None or not self._retried(kind):
                    raise self._failure(what, kind, detail, attempt) from None
            time.sleep(delay)

    @contextlib.contextmanager
    def _failures(self, what: str) -> Iterator[None]:
        """The failure mapping of :meth:`_call` for a block of client calls that is not to be retried."""
        try:
            yield
        except VecbridgeError:
            raise
        except Exception as exc:  # noqa: BLE001 - as in _call
            raise self._failure(what, *self._classify(exc)) from None

    @property
    def display_url(self) -> str:
        from .url import redact

        return redact(self.url)

    def __len__(self) -> int:
        return self.info().count

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.display_url!r})"
