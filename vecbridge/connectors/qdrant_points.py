"""What the ``qdrant://`` and ``qdrant-edge://`` connectors share: point ids, scan cursors, and the reads built on
three engine calls (scroll, retrieve, batched query), in :class:`QdrantPointsCollection`: resumable and ranged scans
in point-id order, sampling, lookups by id and search. Nothing here imports a client, so each connector needs only
its own client library.

Qdrant accepts unsigned 64-bit integers and UUIDs as point ids. Any other record id is mapped to a UUID5 in a fixed
namespace and kept in the payload under :data:`ID_KEY`, which is removed again on read, so both connectors give
users back exactly the ids they wrote, and a collection written by one reads the same through the other.

Record stamps (how each point's vector was made) are two payload keys per vector field (``vecbridge_origin``,
``vecbridge_stamp``, with ``__NAME`` for named vector NAME; none for the unnamed one), written in the same request
as the vector and removed from the payloads reads return; :meth:`QdrantPointsCollection.scan_stamps` scrolls with a
filter on the origin key and reads neither vectors nor the rest of the payload.
"""
from __future__ import annotations

import json
import uuid
from typing import Any, Iterator, Sequence
from urllib.parse import quote

import numpy as np

from ..errors import InputError, NotFound
from .base import (
    Collection,
    KeyRange,
    VectorBatch,
    parse_record_stamp,
    quantile_positions,
    ranges_from_bounds,
    record_stamp_keys,
    stamp_key,
    stamps_from_payloads,
)

#: payload key holding an original id that Qdrant cannot take as a point id
ID_KEY = "_vb_id"
#: namespace of the UUID5 point ids derived from other ids
ID_NAMESPACE = uuid.UUID("6f1d3f0e-5c3a-4f38-9a53-7c1b8d0e2a41")
#: ids per scroll page when sampling
ID_PAGE = 10_000
#: queries per batch query request
QUERY_CHUNK = 64
#: point ids per delete request, and per id filter of :meth:`QdrantPointsCollection.stamps_of`
DELETE_CHUNK = 1000
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


def stored_points(ids: Sequence, payloads: Sequence[dict]) -> tuple[list, list[dict]]:
    """Point ids and the payloads to store for records: a copy of each payload, holding the original id under
    :data:`ID_KEY` where the point id is derived from it."""
    pids, stored = [], []
    for record_id, payload in zip(ids, payloads):
        pid, keep = point_id(record_id)
        pids.append(pid)
        stored.append({**payload, ID_KEY: record_id} if keep else dict(payload))
    return pids, stored


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


def point_order(pid: int | str) -> tuple:
    """Where a point id (as :func:`json_point_id` gives it) falls in scroll order: Qdrant orders integer ids before
    UUIDs, and UUIDs by their 128 bits, which is the order of their canonical (lowercase) text."""
    return (0, pid, "") if isinstance(pid, int) else (1, 0, pid)


def records_to_batch(records: Sequence, name: str, dim: int) -> VectorBatch:
    """Scrolled or retrieved points (``id``, ``payload``, ``vector``: a list, or a dict of named vectors) as a batch
    of vector ``name``, original ids restored. Each attribute is read once (Qdrant Edge converts on every read).
    Both engines hand out payloads of their own (Edge converts anew, qdrant-client's local mode deep-copies, a
    server's are parsed from the response), so the id key is popped from them without copying; each record must
    therefore appear once in ``records``."""
    ids, payloads, rows = [], [], []
    for rec in records:
        payload, vector = rec.payload or {}, rec.vector
        ids.append(original_id(rec.id, payload))
        payloads.append(payload)
        rows.append(vector[name] if isinstance(vector, dict) else vector)
    vectors = np.asarray(rows, dtype=np.float32) if rows else np.empty((0, dim), dtype=np.float32)
    payloads, stamps = stamps_from_payloads(payloads, name)
    return VectorBatch(ids, vectors, payloads, stamps=stamps)


def stamp_payloads(payloads: Sequence[dict], name: str) -> list[dict | None]:
    """The record stamp keys of vector ``name`` in each payload :func:`~.base.stamps_into_payloads` made (what a
    field view sets on a point besides its vector); None where the record gets no stamp."""
    keys = record_stamp_keys(name)
    return [{k: p[k] for k in keys} if keys[0] in p else None for p in payloads]


def other_stamp_keys(fields, name: str) -> list[str]:
    """The payload keys of the record stamps of every vector field but ``name``: kept when a point is written whole
    with the other vectors it has."""
    return [k for other in fields if other != name for k in record_stamp_keys(other)]


def url_with_vector(url: str, name: str) -> str:
    """``url`` naming vector ``name`` (its ``vector=`` query parameter replaced; the rest of the URL kept as it is
    written, so a local path or ``:memory:`` is not re-spelt)."""
    base, hash_, fragment = url.partition("#")
    head, _, query = base.partition("?")
    kept = [p for p in query.split("&") if p and p.split("=", 1)[0] != "vector"]
    return f"{head}?{'&'.join(kept + ['vector=' + quote(name, safe='')])}{hash_}{fragment}"


def hits_to_results(results: Sequence, metric: str) -> tuple[list[list], np.ndarray]:
    """Per-query scored points as the protocol's ``(ids, scores)``: original ids, higher score = closer (Qdrant
    reports the Euclidean distance for l2, negated here), ``-inf`` where a query found fewer than the widest row."""
    width = max((len(r) for r in results), default=0)
    scores = np.full((len(results), width), -np.inf, dtype=np.float32)
    ids = []
    for row, points in enumerate(results):
        ids.append([original_id(p.id, p.payload) for p in points])
        scores[row, :len(points)] = [p.score for p in points]
    if metric == "l2":
        scores = np.where(np.isneginf(scores), scores, -scores)
    return ids, scores


class QdrantPointsCollection(Collection):
    """Reads common to both Qdrant connectors, on the engine calls each implements: ``_field()`` (our vector's
    name, dim, metric), ``_scroll(offset, limit, full=...)``, ``_retrieve_points(pids)`` and ``_query(chunk, name,
    k)``. ``what`` names the store in cursor errors."""

    what = "qdrant collection"
    #: set on views from :meth:`with_vector_field`: upserts then set only our vector of points that exist, leaving
    #: their payloads and other vectors alone (points that do not exist yet are written whole)
    keep_payloads = False

    def with_vector_field(self, name: str) -> "QdrantPointsCollection":
        """The same collection seen through named vector ``name`` (the URL with ``vector=name``); the field need not
        exist yet (``add_vector_field`` may come after). Its upserts write only that vector of existing points."""
        view = type(self)(url_with_vector(self.url, name), read_only=self.read_only)
        view.keep_payloads = True
        return view

    def _field(self) -> tuple[str, int, str]:
        raise NotImplementedError

    def _stamp_key(self) -> str:
        """The key of this view's stamp: of the vector the URL names (which need not exist yet: reading its stamp
        then finds none), else of the collection's only or unnamed one."""
        return stamp_key(self.vector_field if self.vector_field is not None else self._field()[0])

    def _scroll(self, offset, limit: int, *, full: bool) -> tuple[list, Any]:
        """One scroll page: (points, next offset); ``full`` brings payloads and vectors, else ids only."""
        raise NotImplementedError

    def _retrieve_points(self, pids: list) -> list:
        """The stored points among these distinct point ids, with payloads and our vector, in any order."""
        raise NotImplementedError

    def _query(self, queries: np.ndarray, name: str, k: int) -> list[list]:
        """Scored points of the ``k`` nearest neighbours of each query row on vector ``name``."""
        raise NotImplementedError

    def _delete_points(self, pids: list) -> None:
        """Delete whole points (payload and every vector) by point id; missing ones are ignored."""
        raise NotImplementedError

    def _stamp_scroll(self, offset, limit: int, *, origins: list | None = None, pids: list | None = None):
        """One scroll page of the points that have our vector and a record stamp of it (its origin one of
        ``origins``, where given; among ``pids``, where given), with the id key and that stamp only, no vectors:
        (points, next offset)."""
        raise NotImplementedError

    def _stamped(self, records: Sequence) -> tuple[list, list]:
        """(ids, stamps) of points read by :meth:`_stamp_scroll` (damaged stamps left out)."""
        _, key = record_stamp_keys(self._field()[0])
        ids, stamps = [], []
        for rec in records:
            payload = rec.payload or {}
            stamp = parse_record_stamp(payload.get(key))
            if stamp is not None:
                ids.append(original_id(rec.id, payload))
                stamps.append(stamp)
        return ids, stamps

    def scan_stamps(self, batch_size: int = 1000, origins: Sequence[str] | None = None) -> Iterator[tuple[list, list]]:
        """Scroll pages filtered by the store on the origin key (``MatchAny``; any stamp at all: a non-empty origin),
        reading the stamps alone."""
        if batch_size <= 0:
            raise InputError("batch_size must be positive")
        wanted = None if origins is None else list(dict.fromkeys(origins))
        if wanted is not None and not wanted:
            return
        offset = None
        while True:
            records, offset = self._stamp_scroll(offset, batch_size, origins=wanted)
            ids, stamps = self._stamped(records)
            if ids:
                yield ids, stamps
            if offset is None:
                return

    def stamps_of(self, ids: Sequence) -> dict:
        """A scroll filtered by point id (and stamp) per :data:`DELETE_CHUNK` ids, reading the stamps alone."""
        pids = list(dict.fromkeys(point_id(i)[0] for i in ids))
        found: dict = {}
        for lo in range(0, len(pids), DELETE_CHUNK):
            chunk = pids[lo:lo + DELETE_CHUNK]
            records, _ = self._stamp_scroll(None, len(chunk), pids=chunk)
            found.update(zip(*self._stamped(records)))
        return found

    def delete(self, ids: Sequence) -> int:
        """Delete points by the point ids :func:`point_id` gives (the ids upserts wrote them under), in requests of
        :data:`DELETE_CHUNK`; a view of one vector field deletes whole points too."""
        wanted = self._ids_to_delete(ids)
        if not self.exists():
            raise NotFound(f"collection not found: {self.display_url}")
        pids = list(dict.fromkeys(point_id(i)[0] for i in wanted))
        for lo in range(0, len(pids), DELETE_CHUNK):
            self._delete_points(pids[lo:lo + DELETE_CHUNK])
        return len(wanted)

    def scan(self, batch_size: int = 1000, after: Any = None, until: Any = None) -> Iterator[VectorBatch]:
        """Scroll pages in point-id order; a batch's cursor is its last point id, and ``until`` (a point id) stops
        after that point: the page that crosses it is cut, so a slice reads at most one page past its end."""
        name, dim, _ = self._field()
        if batch_size <= 0:
            raise InputError("batch_size must be positive")
        stop = None if until is None else point_order(decode_cursor(until, self.what))
        offset = None
        if after is not None:
            last = decode_cursor(after, self.what)
            if stop is not None and point_order(last) >= stop:
                return
            probe, _ = self._scroll(last, 2, full=False)  # scroll's offset is inclusive: step past the cursor
            probe = [p for p in probe if json_point_id(p.id) != last]
            if not probe or (stop is not None and point_order(json_point_id(probe[0].id)) > stop):
                return
            offset = probe[0].id
        while True:
            records, offset = self._scroll(offset, batch_size, full=True)
            if stop is not None:
                if records and point_order(json_point_id(records[-1].id)) > stop:
                    records = [r for r in records if point_order(json_point_id(r.id)) <= stop]
                    offset = None
                elif offset is not None and point_order(json_point_id(offset)) > stop:
                    offset = None  # the next page starts past the slice: no request for it
            if records:
                batch = records_to_batch(records, name, dim)
                batch.cursor = json_point_id(records[-1].id)
                yield batch
            if offset is None:
                return

    def key_ranges(self, n: int, seed: int = 0) -> list[KeyRange]:
        """Cut at exact quantiles of the point ids, in scroll order. Qdrant has neither a seeded sample nor a way to
        skip to a rank, so the ids alone are scrolled (pages of :data:`ID_PAGE`, no vectors or payloads, as
        :meth:`sample` does) up to the last cut and the id at each cut kept (``seed`` is accepted for the protocol
        and unused). The ranges hold point ids, the cursors :meth:`scan` takes."""
        if int(n) <= 0:
            raise InputError(f"number of ranges must be positive, got {n}")
        return ranges_from_bounds(self._ids_at(quantile_positions(self.info().count, n)))

    def _ids_at(self, positions) -> list:
        """The point ids at ``positions`` (ascending ranks in scroll order), scrolling ids only, page by page."""
        found: list = []
        seen, offset = 0, None
        while len(found) < len(positions):
            records, offset = self._scroll(offset, ID_PAGE, full=False)
            lo, hi = np.searchsorted(positions, [seen, seen + len(records)])
            found.extend(json_point_id(records[p - seen].id) for p in positions[lo:hi])
            seen += len(records)
            if offset is None:
                break
        return found

    def sample(self, n: int, seed: int = 0) -> VectorBatch:
        """Ids only are scrolled (pages of ``ID_PAGE``), the seeded positions picked on the way, then retrieved."""
        if n <= 0:
            raise InputError("sample size must be positive")
        count = self.info().count
        positions = np.sort(np.random.default_rng(seed).choice(count, size=min(n, count), replace=False))
        return self._retrieve(self._ids_at(positions))

    def _retrieve(self, pids: Sequence) -> VectorBatch:
        """The points with these point ids, in this order, skipping missing ones and ones without our vector."""
        name, dim, _ = self._field()
        unique = list(dict.fromkeys(pids))
        records = self._retrieve_points(unique) if unique else []
        found = {json_point_id(r.id): r for r in records
                 if r.vector is not None and (not isinstance(r.vector, dict) or name in r.vector)}
        kept = [p for p in unique if p in found]
        row = {p: i for i, p in enumerate(kept)}
        # each point converted once (its id key is popped from its payload), then rows repeated in the asked order
        return records_to_batch([found[p] for p in kept], name, dim).take([row[p] for p in pids if p in row])

    def get(self, ids: Sequence) -> VectorBatch:
        return self._retrieve([point_id(i)[0] for i in ids])

    def search(self, vectors, k: int = 10) -> tuple[list[list], np.ndarray]:
        name, dim, metric = self._field()
        queries = np.asarray(vectors, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != dim:
            raise InputError(f"query vectors must have dimension {dim}, got shape {queries.shape}")
        results: list = []
        for lo in range(0, len(queries), QUERY_CHUNK):
            results.extend(self._query(queries[lo:lo + QUERY_CHUNK], name, k))
        return hits_to_results(results, metric)
