"""``chroma://`` store: a Chroma collection, on a server or in a local persistent directory.

URL forms::

    chroma://host:8000/collection            a server (chromadb.HttpClient); ?ssl=true for https
    chroma:///abs/path/to/dir/collection     a persistent directory (chromadb.PersistentClient(path=dir))
    chroma://./relative/dir/collection       the same, relative to the working directory (also ~/...)
    chroma:///abs/path/to/dir?collection=c   the directory exactly as given, the collection named apart

In the path forms the last path segment is the collection and the rest is the directory handed to
``PersistentClient``, the way a server URL ends in the collection. ``?tenant=`` and ``?database=`` select a
non-default tenant/database. A server token is read from ``CHROMA_TOKEN`` (sent as ``Authorization: Bearer``),
never from messages.

How records map onto Chroma:

* metric: collection metadata ``hnsw:space`` (``cosine``, ``ip`` for dot, ``l2``); Chroma returns distances, which
  :meth:`ChromaCollection.search` turns into vecbridge scores: cosine ``1 - d``, dot ``1 - d`` (Chroma's ip distance
  is ``1 - dot``), l2 ``-d`` (Chroma's l2 is already squared, as in :mod:`vecbridge.metrics`);
* the dimension is kept in collection metadata (``vecbridge:dim``) because Chroma only learns it from the first
  record; collections made elsewhere report the dimension of a stored vector;
* a collection's stamp is JSON text in its metadata (``vecbridge:stamp``), beside ``hnsw:space`` and
  ``vecbridge:dim``, which stay as they are;
* each record's own stamp is two keys of its metadata, written in the same upsert as its vector:
  ``vecbridge_origin`` (the origin alone, what :meth:`ChromaCollection.scan_stamps` filters on with ``$in``) and
  ``vecbridge_stamp`` (the whole stamp as JSON text); reads take them out of the payload;
* payload key ``document`` (a string) is Chroma's document; other scalar values are metadata; values Chroma cannot
  hold as metadata (lists, dicts, None) are JSON-encoded together in the reserved key ``_vb_json`` and decoded on
  read; int ids are stored as decimal strings with ``_vb_int_id`` set and come back as ints. Keys starting with
  ``_vb_`` are never shown to users;
* upsert replaces records whole: Chroma's own upsert *merges* metadata and keeps an old document when none is given,
  so keys the new payload lacks are deleted explicitly (set to None) and a record losing its document is deleted
  and written again (between the two it is missing; re-running the batch repairs that).

Scans page with ``get(limit, offset)`` in Chroma's storage order and the cursor is the offset reached. That is
fragile if the collection changes between a crash and the resume (a delete shifts later records back), which is
acceptable for a source collection that is being migrated, not for one being written to meanwhile.

Partitioned scans are offset slices of that same order. Chroma's ``get`` filters ids by equality only (``ids=``;
``where`` compares metadata, and numbers only with ``$gt``/``$lt``) and orders by the internal sequence number each
record got when it was first written (``ORDER BY`` it, then ``OFFSET``/``LIMIT``, in the SQLite metadata segment of
the embedded and single-node engines), so no range of keys can be asked for. Offsets need nothing but the count to
plan, and each slice reads just its own records (the skip walks an index, no vectors), whereas cutting at ids would
have every slice list all ids to find its own. They hold under the same contract as a resumed scan: the collection
is not modified while the job runs.

A persistent directory is ``single_process`` (its capabilities): Chroma takes no lock, but its client is not
process-safe (each process keeps its own vector index in memory and writes it back), so a job spread over processes
needs a server.
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import urlsplit

import chromadb
import httpx
import numpy as np
from chromadb.config import Settings
from chromadb.errors import NotFoundError

from ..errors import InputError, NotFound
from ..fs import require_writable
from .base import (
    Capabilities,
    Collection,
    CollectionIdentity,
    CollectionInfo,
    KeyRange,
    VectorBatch,
    first_line,
    quantile_positions,
    ranges_from_bounds,
    record_stamp_keys,
    stamp_key,
    stamps_from_payloads,
    stamps_into_payloads,
)
from .readonly import readable_path
from .url import canonical_host, known_params, resolved_path

#: the URL query options this store knows (any other is refused)
OPTIONS = ("collection", "tenant", "database", "ssl")
_SPACE_OF_METRIC = {"cosine": "cosine", "dot": "ip", "l2": "l2"}
_METRIC_OF_SPACE = {v: k for k, v in _SPACE_OF_METRIC.items()}
_DIM_KEY = "vecbridge:dim"
_JSON_KEY = "_vb_json"
_INT_ID_KEY = "_vb_int_id"
_RESERVED_PREFIX = "_vb_"
_SCALARS = (str, bool, int, float)
_CONNECT_TIMEOUT = 5.0
_ID_PAGE = 100_000


def _metadata_and_document(payload: dict, int_id: bool) -> tuple[dict, str | None]:
    """Chroma metadata (scalars only) and document for one payload."""
    meta: dict[str, Any] = {}
    nested: dict[str, Any] = {}
    document = None
    for key, value in payload.items():
        if key == "document" and isinstance(value, str):
            document = value
        elif (isinstance(value, _SCALARS) and isinstance(key, str) and key and not key.startswith(("_vb_", "#"))
              and not (isinstance(value, int) and not -2**63 <= value < 2**63)):
            meta[key] = value
        else:
            nested[key] = value
    if nested:
        try:
            meta[_JSON_KEY] = json.dumps(nested, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InputError(f"payloads must be JSON-serialisable ({exc})") from None
    if int_id:
        meta[_INT_ID_KEY] = True
    return meta, document


def _payload(meta: dict | None, document: str | None) -> dict:
    """The user's payload back from Chroma metadata and document."""
    meta = meta or {}
    payload = {k: v for k, v in meta.items() if not k.startswith(_RESERVED_PREFIX)}
    if _JSON_KEY in meta:
        payload.update(json.loads(meta[_JSON_KEY]))
    if document is not None:
        payload["document"] = document
    return payload


def _user_id(chroma_id: str, meta: dict | None) -> Any:
    return int(chroma_id) if meta and meta.get(_INT_ID_KEY) else chroma_id


class ChromaCollection(Collection):
    scheme = "chroma"

    def __init__(self, url: str, *, read_only: bool = False):
        super().__init__(url, read_only=read_only)
        self.params = known_params(url, OPTIONS, "chroma")
        rest = url.split("://", 1)[1].split("?", 1)[0]
        self.path: Path | None = None
        if rest.startswith(("/", ".", "~")):
            path = Path(rest).expanduser()
            if "collection" in self.params:
                self.path, self.name = path, self.params["collection"]
            else:
                self.path, self.name = path.parent, path.name
        else:
            parts = urlsplit(url)
            try:
                self.host, self.port = parts.hostname or "localhost", parts.port or 8000
            except ValueError:
                raise InputError(f"{self.display_url}: invalid port") from None
            self.name = self.params.get("collection") or parts.path.strip("/")
        if not self.name:
            raise InputError(f"{self.display_url}: name the collection, e.g. chroma://localhost:8000/docs "
                             f"or chroma:///path/to/dir/docs")
        self._client: chromadb.ClientAPI | None = None
        self._handle: Any = None

    @property
    def identity(self) -> CollectionIdentity:
        where = resolved_path(self.path) if self.path is not None else f"{canonical_host(self.host)}:{self.port}"
        tenant = self.params.get("tenant", "default_tenant")
        database = self.params.get("database", "default_database")
        return CollectionIdentity("chroma", f"{where}/{tenant}/{database}", self.name)

    @property
    def capabilities(self) -> Capabilities:
        """Offset ranges; a persistent directory is not process-safe (see the module notes); batches under Chroma's
        default limit of 5461 records per upsert."""
        return Capabilities(key_ranges=True, single_process=self.path is not None, preferred_batch_size=5000,
                            stamp="collection metadata",
                            record_stamps="two keys of each record's metadata (vecbridge_origin, vecbridge_stamp)")

    @property
    def local_path(self) -> str | None:
        """A persistent directory (every collection of that client lives in it)."""
        return resolved_path(self.path) if self.path is not None else None

    def check_writable(self) -> None:
        if self.path is not None:
            require_writable(self.path, "the Chroma directory")

    # --- connection ---------------------------------------------------------------------------------------------------
    def _settings(self) -> Settings:
        token = os.environ.get("CHROMA_TOKEN")
        if token and self.path is None:
            return Settings(anonymized_telemetry=False, chroma_client_auth_credentials=token,
                            chroma_client_auth_provider="chromadb.auth.token_authn.TokenAuthClientProvider")
        return Settings(anonymized_telemetry=False)

    def client(self) -> chromadb.ClientAPI:
        """The Chroma client; a server is first probed with a short TCP connect (Chroma's own has no timeout)."""
        if self._client is not None:
            return self._client
        tenant = self.params.get("tenant", chromadb.DEFAULT_TENANT)
        database = self.params.get("database", chromadb.DEFAULT_DATABASE)
        with self._failures("connect"):  # chromadb raises ValueError, httpx and its own errors here
            if self.path is not None:
                where = readable_path(self.path, read_only=self.read_only, what="the Chroma directory")
                self._client = chromadb.PersistentClient(path=str(where), settings=self._settings(),
                                                         tenant=tenant, database=database)
            else:
                with socket.create_connection((self.host, self.port), timeout=_CONNECT_TIMEOUT):
                    pass
                self._client = chromadb.HttpClient(
                    host=self.host, port=self.port, ssl=self.params.get("ssl", "").lower() in ("1", "true", "yes"),
                    settings=self._settings(), tenant=tenant, database=database)
        return self._client

    # --- failures (the retry loop and the mapping are Collection._call's) ---------------------------------------------
    _messages = {"transient": "{url}: cannot {what} (server unreachable after {attempts}): {detail}",
                 "error": "{url}: cannot {what}: {detail}"}

    def _classify(self, exc: Exception) -> tuple[str, str]:
        """chromadb's errors share no base class across its Python and Rust layers: ``NotFoundError`` is a missing
        collection, and httpx errors (raised by a server's HTTP client only) failed in transit, so are retried."""
        if isinstance(exc, NotFoundError):
            self._handle = None  # the cached handle names a collection that is gone
            return "missing", first_line(exc)
        return ("transient" if isinstance(exc, httpx.TransportError) else "error"), first_line(exc)

    def _collection(self) -> Any:
        if self._handle is None:
            if self.path is not None and not self.path.is_dir():  # do not let a read create the directory
                raise NotFound(f"collection not found: {self.display_url} (no directory {self.path})")
            self._handle = self._call("open the collection", self.client().get_collection, self.name,
                                      embedding_function=None)
        return self._handle

    # --- reading ------------------------------------------------------------------------------------------------------
    def exists(self) -> bool:
        try:
            self._collection()
            return True
        except NotFound:
            return False

    def _metric(self, coll: Any) -> str:
        config = getattr(coll, "configuration", None) or {}
        for index in ("hnsw", "spann"):
            space = (config.get(index) or {}).get("space")
            if space:
                return _METRIC_OF_SPACE[space]
        return _METRIC_OF_SPACE[(coll.metadata or {}).get("hnsw:space", "l2")]  # Chroma's default space is l2

    def _dim(self, coll: Any) -> int:
        dim = (coll.metadata or {}).get(_DIM_KEY)
        if dim is None:
            first = self._call("read a vector", coll.get, limit=1, include=["embeddings"])
            embeddings = first["embeddings"]
            dim = len(embeddings[0]) if embeddings is not None and len(embeddings) else 0
        return int(dim)

    def info(self) -> CollectionInfo:
        coll = self._collection()
        dim, metric = self._dim(coll), self._metric(coll)
        count = self._call("count records", coll.count)
        return CollectionInfo(name=self.name, dim=dim, metric=metric, count=int(count),
                              vector_fields={"": (dim, metric)})

    def _batch(self, result: dict, dim: int) -> VectorBatch:
        """A VectorBatch from a ``get`` result (ids, embeddings, metadatas, documents)."""
        ids = result["ids"]
        if not ids:
            return VectorBatch([], np.zeros((0, dim), dtype=np.float32), [], stamps=[])
        metas = result.get("metadatas") or [None] * len(ids)
        docs = result.get("documents") or [None] * len(ids)
        payloads, stamps = stamps_from_payloads([_payload(m, d) for m, d in zip(metas, docs)])
        return VectorBatch([_user_id(i, m) for i, m in zip(ids, metas)],
                           np.asarray(result["embeddings"], dtype=np.float32), payloads, stamps=stamps)

    def _get_by_ids(self, coll: Any, keys: list[str]) -> dict[str, list]:
        """Full records for Chroma ids, fetched in chunks of the server's batch limit, as a merged result."""
        merged: dict[str, list] = {"ids": [], "embeddings": [], "metadatas": [], "documents": []}
        step = self._max_batch()
        for lo in range(0, len(keys), step):
            part = self._call("read records", coll.get, ids=keys[lo:lo + step],
                              include=["embeddings", "metadatas", "documents"])
            if part["ids"]:
                for key in merged:
                    merged[key].extend(part[key] if part[key] is not None else [None] * len(part["ids"]))
        return merged

    def _max_batch(self) -> int:
        return int(self._call("ask the batch limit", self.client().get_max_batch_size))

    def get(self, ids: Sequence) -> VectorBatch:
        coll = self._collection()
        dim = self._dim(coll)
        keys = list(dict.fromkeys(str(i) for i in ids))
        found = self._get_by_ids(coll, keys)
        batch = self._batch(found, dim)
        where = {i: r for r, i in enumerate(found["ids"])}  # Chroma answers in storage order, not in ours
        return batch.take(np.asarray([where[k] for k in keys if k in where], dtype=np.int64))

    def sample(self, n: int, seed: int = 0) -> VectorBatch:
        """Ids only are listed (pages of 100k), ``n`` of them drawn with a seeded generator, then fetched.

        Chroma has no random access by rank, so drawing offsets would cost one request per record; listing ids
        moves a few bytes per record and no vectors.
        """
        if n <= 0:
            raise InputError("sample size must be positive")
        coll = self._collection()
        dim = self._dim(coll)
        all_ids: list[str] = []
        while True:
            page = self._call("list ids", coll.get, limit=_ID_PAGE, offset=len(all_ids), include=[])
            all_ids.extend(page["ids"])
            if len(page["ids"]) < _ID_PAGE:
                break
        if not all_ids:
            return VectorBatch([], np.zeros((0, dim), dtype=np.float32), [])
        rng = np.random.default_rng(seed)
        picked = [all_ids[i] for i in rng.choice(len(all_ids), size=min(n, len(all_ids)), replace=False)]
        found = self._get_by_ids(coll, picked)
        where = {i: r for r, i in enumerate(found["ids"])}
        return self._batch(found, dim).take(np.asarray([where[k] for k in picked if k in where], dtype=np.int64))

    def scan(self, batch_size: int = 1000, after: Any = None, until: Any = None) -> Iterator[VectorBatch]:
        """Pages of ``get(limit, offset)``; each batch's cursor is the offset after it, and ``until`` (such an
        offset) stops there (see the module notes)."""
        if batch_size <= 0:
            raise InputError("batch_size must be positive")
        offset = 0 if after is None else self._offset(after)
        stop = None if until is None else self._offset(until)
        coll = self._collection()
        dim = self._dim(coll)
        while stop is None or offset < stop:
            limit = batch_size if stop is None else min(batch_size, stop - offset)
            result = self._call("read records", coll.get, limit=limit, offset=offset,
                                include=["embeddings", "metadatas", "documents"])
            batch = self._batch(result, dim)
            if not len(batch):
                return
            offset += len(batch)
            batch.cursor = offset
            yield batch
            if len(batch) < limit:
                return

    def _offset(self, cursor: Any) -> int:
        if not isinstance(cursor, bool):
            try:
                if int(cursor) >= 0:
                    return int(cursor)
            except (TypeError, ValueError):
                pass
        raise InputError(f"invalid scan cursor {cursor!r} for a chroma collection")

    def key_ranges(self, n: int, seed: int = 0) -> list[KeyRange]:
        """Offset slices of the storage order, cut at exact quantiles of the count (see the module notes for why
        offsets, not ids; ``seed`` is accepted for the protocol and unused)."""
        if int(n) <= 0:
            raise InputError(f"number of ranges must be positive, got {n}")
        count = self._call("count records", self._collection().count)
        return ranges_from_bounds([p + 1 for p in quantile_positions(int(count), n)])

    def search(self, vectors, k: int = 10) -> tuple[list[list], np.ndarray]:
        coll = self._collection()
        dim, metric = self._dim(coll), self._metric(coll)
        queries = np.asarray(vectors, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != dim:
            raise InputError(f"query vectors must have dimension {dim}, got shape {queries.shape}")
        ids: list[list] = []
        rows: list[np.ndarray] = []
        step = self._max_batch()
        for lo in range(0, len(queries), step):
            chunk = queries[lo:lo + step]
            result = self._call("search", coll.query, query_embeddings=chunk, n_results=k,
                                include=["distances", "metadatas"])
            for found, metas, dist in zip(result["ids"], result["metadatas"], result["distances"]):
                ids.append([_user_id(i, m) for i, m in zip(found, metas)])
                d = np.asarray(dist, dtype=np.float64)
                rows.append(-d if metric == "l2" else 1.0 - d)
        width = max((len(r) for r in rows), default=0)
        scores = np.full((len(queries), width), -np.inf, dtype=np.float32)
        for r, row in enumerate(rows):
            scores[r, :len(row)] = row
        return ids, scores

    # --- writing ------------------------------------------------------------------------------------------------------
    def create(self, dim: int, metric: str = "cosine", *, exist_ok: bool = False,
               index: bool = True) -> "ChromaCollection":
        dim, metric = self._check_create_args(dim, metric)
        if self.exists():
            info = self.info()
            self._check_existing(dim, metric, info.dim, info.metric, exist_ok=exist_ok)
            return self
        metadata = {"hnsw:space": _SPACE_OF_METRIC[metric], _DIM_KEY: int(dim)}
        self._handle = self._call("create the collection", self.client().create_collection, self.name,
                                  metadata=metadata, embedding_function=None)
        return self

    def upsert(self, batch: VectorBatch) -> int:
        """Write in chunks of the client's ``get_max_batch_size()``, replacing records whole (see module notes)."""
        self._writable()
        coll = self._collection()
        vectors = self._check_batch(batch, self._dim(coll) or None)  # None: an empty collection made elsewhere
        if len(batch) == 0:
            return 0
        keys = [str(i) for i in batch.ids]
        if len(set(keys)) != len(keys):
            raise InputError("batch contains ids that are equal as strings")
        # a record replaced without a stamp has none: its payload's stamp keys go (and the old ones with them)
        payloads = stamps_into_payloads(batch.with_stamps(batch.stamps or [None] * len(batch)))
        records = [_metadata_and_document(p, isinstance(i, int) and not isinstance(i, bool))
                   for i, p in zip(batch.ids, payloads)]
        step = self._max_batch()
        for lo in range(0, len(keys), step):
            self._upsert_chunk(coll, keys[lo:lo + step], vectors[lo:lo + step], records[lo:lo + step])
        return len(batch)

    def _upsert_chunk(self, coll: Any, keys: list[str], vectors: np.ndarray,
                      records: list[tuple[dict, str | None]]) -> None:
        old = self._call("read records", coll.get, ids=keys, include=["metadatas", "documents"])
        old_docs = dict(zip(old["ids"], old["documents"] or [None] * len(old["ids"])))
        old_keys = {i: set(m or {}) for i, m in zip(old["ids"], old["metadatas"] or [None] * len(old["ids"]))}
        metadatas: list[dict | None] = []
        documents: list[str | None] = []
        lose_document = []
        for key, (meta, document) in zip(keys, records):
            meta = dict(meta, **{k: None for k in old_keys.get(key, set()) - set(meta)})  # None deletes a key
            metadatas.append(meta or None)
            documents.append(document)
            if document is None and old_docs.get(key) is not None:
                lose_document.append(key)
        if lose_document:
            self._call("delete records", coll.delete, ids=lose_document)
        self._call("write records", coll.upsert, ids=keys, embeddings=vectors, metadatas=metadatas,
                   documents=documents if any(d is not None for d in documents) else None)

    # --- record stamps: two metadata keys, read without vectors -------------------------------------------------------
    def scan_stamps(self, batch_size: int = 1000, origins: Sequence[str] | None = None) -> Iterator[tuple[list, list]]:
        """Pages of ``get(where={origin: {"$in": origins}}, include=["metadatas"])`` (every record's metadata where
        ``origins`` is None: Chroma cannot ask whether a key exists), no vectors read."""
        if batch_size <= 0:
            raise InputError("batch_size must be positive")
        origins = None if origins is None else list(dict.fromkeys(origins))
        if origins is not None and not origins:
            return
        coll = self._collection()
        where = None if origins is None else {record_stamp_keys(None)[0]: {"$in": origins}}
        offset = 0
        while True:
            page = self._call("read record stamps", coll.get, where=where, limit=batch_size, offset=offset,
                              include=["metadatas"])
            ids, metas = page["ids"], page["metadatas"] or [None] * len(page["ids"])
            offset += len(ids)
            found = self._stamps(ids, metas)
            if found:
                yield list(found), list(found.values())
            if len(ids) < batch_size:
                return

    def stamps_of(self, ids: Sequence) -> dict:
        """The metadata of these records only (no vectors, no documents), in chunks of the server's batch limit."""
        coll = self._collection()
        keys = list(dict.fromkeys(str(i) for i in ids))
        found: dict = {}
        step = self._max_batch()
        for lo in range(0, len(keys), step):
            page = self._call("read record stamps", coll.get, ids=keys[lo:lo + step], include=["metadatas"])
            found.update(self._stamps(page["ids"], page["metadatas"] or [None] * len(page["ids"])))
        return found

    @staticmethod
    def _stamps(ids: list, metas: list) -> dict:
        """``{user id: stamp}`` of the records among these that have one."""
        _, stamps = stamps_from_payloads([m or {} for m in metas])
        return {_user_id(i, m): s for i, m, s in zip(ids, metas, stamps) if s is not None}

    def delete(self, ids: Sequence) -> int:
        """``collection.delete(ids=...)`` with the ids as Chroma stores them (decimal strings for ints, so int 5 and
        "5" name the same record), in chunks of the client's ``get_max_batch_size()``."""
        wanted = self._ids_to_delete(ids)
        coll = self._collection()
        keys = list(dict.fromkeys(str(i) for i in wanted))
        if keys:
            step = self._max_batch()
            for lo in range(0, len(keys), step):
                self._call("delete records", coll.delete, ids=keys[lo:lo + step])
        return len(wanted)

    def _fresh_collection(self) -> Any:
        """The collection as the store has it now (its metadata too), not as this handle first saw it."""
        self._handle = None
        return self._collection()

    def _load_stamp(self) -> str | None:
        try:
            coll = self._fresh_collection()
        except NotFound:
            return None
        value = (coll.metadata or {}).get(stamp_key(None))
        return None if value is None else str(value)

    def _save_stamp(self, text: str) -> None:
        coll = self._fresh_collection()
        metadata = {**(coll.metadata or {}), stamp_key(None): text}
        if "hnsw:space" in metadata:
            # Chroma replaces a collection's metadata whole, and Collection.modify refuses any that names
            # hnsw:space, even unchanged; the client call behind it takes the whole metadata, the space kept
            self._call("write the stamp", coll._client._modify, id=coll.id, new_metadata=metadata,
                       tenant=coll.tenant, database=coll.database)
        else:
            self._call("write the stamp", coll.modify, metadata=metadata)
        self._handle = None

    def drop(self) -> None:
        self._writable()
        self._collection()  # a clear "not found" first
        self._call("drop the collection", self.client().delete_collection, self.name)
        self._handle = None
