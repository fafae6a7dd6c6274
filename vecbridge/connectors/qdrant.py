"""``qdrant://`` store: a Qdrant collection through ``qdrant-client`` (server, local directory, or in memory).

URL forms::

    qdrant://HOST[:PORT]/COLLECTION           a Qdrant server over REST (port 6333 by default)
    qdrant://HOST:6334/COLLECTION?grpc=1      the same server over gRPC (with ``grpc=1`` the port is the gRPC port)
    qdrant://HOST/COLLECTION?https=1          TLS (``https=0`` forces plain HTTP)
    qdrant:///ABS/DIR/COLLECTION              local mode: ``QdrantClient(path="/ABS/DIR")``
    qdrant://./REL/DIR/COLLECTION             local mode, relative directory (also ``~/...``)
    qdrant://:memory:/COLLECTION              in-memory local mode, shared by every URL of this process

Query options: ``vector=NAME`` (the named vector to read/write; needed only when a collection has several),
``api_key=...`` (default: the ``QDRANT_API_KEY`` environment variable; redacted in every message), ``timeout=S``
(seconds per request, default 60). As in ``qdrant-client``, an API key switches TLS on unless ``https=0``.

Local mode lets one client own a directory, so a process keeps one client per directory (and one for
``:memory:``) and every URL naming it shares that client. Local mode is qdrant-client's Python emulation, fine for
tests and small data; writes in ``path`` mode are slow (about 30 s per 10k points).

Ids: Qdrant accepts only unsigned integers and UUIDs as point ids. Those are used as they are (a string that is a
canonical UUID stays one); any other id (strings, negative ints) is stored under a UUID5 derived from it, with the
original id kept in the payload under ``_vb_id`` and given back on read (the key is stripped from payloads).
The mapping is the same as the ``qdrant-edge://`` connector's, so both stores name the same records alike.

Scans use ``scroll``, which walks points in id order (integer ids, then UUIDs); a batch's cursor is the id of its
last point, so a resumed scan restarts just after it (new points with larger ids written since are included; nothing
is repeated). ``key_ranges`` cuts that order at point ids (exact quantiles, from a walk over the ids alone), and
``scan(after=, until=)`` reads one slice: keyset slices, which stay exact even if points are written meanwhile.

Local mode (a directory, or ``:memory:``) is ``single_process`` (its capabilities): qdrant-client locks the directory
for one client, and the in-memory store lives in this process only, so a job spread over processes needs a server.

Sampling: Qdrant's random ``Sample`` query cannot be seeded, so ``sample`` draws ``n`` positions with a seeded
generator over the exact count, walks the point ids only (no vectors, no payloads) with ``scroll`` to find the ids at
those positions, and fetches just those points: ids are read up to the last position drawn, vectors only for
the sample.

Named vectors: ``add_vector_field`` creates one on an existing collection (``create_vector_name``: Qdrant and
qdrant-client >= 1.18; older servers get a clear "not supported"). In a collection with several vectors, a record is
a point that has the chosen vector, and an upsert keeps the other vectors a point already has (Qdrant's upsert
replaces whole points, so they are read and written back), which lets a migration fill a new field in place.
``with_vector_field(NAME)`` is the collection seen through vector NAME (the URL with ``vector=NAME``) for such a
migration: its upserts set only that vector of the points that exist (``update_vectors``: their payloads and other
vectors stay as they are) and never create a point: one the application deleted meanwhile stays deleted.

Stamps live in the collection's own metadata (Qdrant >= 1.16, and qdrant-client's local mode), as JSON text under
``vecbridge:stamp`` (``vecbridge:stamp:NAME`` for named vector NAME); an update merges keys, so the application's own
metadata keys stay as they are.

Record stamps (each point's own, ``VectorBatch.stamps``) are two payload keys per vector field, written in the same
request as the vector: a whole point's upsert carries them in its payload (keeping those of the other vectors it
keeps), a field view's upsert is one ``batch_update_points`` (the vectors, then each point's stamp keys).
``scan_stamps`` scrolls with a ``MatchAny`` filter on the origin key, without vectors; on a server the first
stamped upsert of a handle indexes that key (keyword), so the filter stays cheap (and allowed in strict mode).

Metrics: Cosine / Dot / Euclid map to cosine / dot / l2 (Manhattan is refused). Qdrant normalises vectors of Cosine
collections on insert, so they read back with unit length. Search scores: cosine similarity, dot product, and the
negated Euclidean distance (higher is always better).

Server calls are retried with backoff on transient failures only (connection errors, 429/502/503/504, gRPC
UNAVAILABLE); a host that cannot be reached at all fails within a few seconds (a TCP probe before the first call).
"""
from __future__ import annotations

import atexit
import os
import socket
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from ..errors import InputError, NotFound, StoreError
from ..fs import require_writable
from .base import (
    Capabilities,
    CollectionIdentity,
    CollectionInfo,
    VectorBatch,
    first_line,
    record_stamp_keys,
    stamps_into_payloads,
)
from .qdrant_points import (
    ID_KEY,
    QdrantPointsCollection,
    json_point_id,
    other_stamp_keys,
    stamp_payloads,
    stored_points,
)
from .qdrant_points import TO_METRIC as _TO_METRIC
from .readonly import readable_path
from .url import canonical_host, known_params, resolved_path

#: the URL query options this store knows (any other is refused)
OPTIONS = ("vector", "api_key", "timeout", "grpc", "https")
_TO_DISTANCE = {"cosine": models.Distance.COSINE, "dot": models.Distance.DOT, "l2": models.Distance.EUCLID}
_TRANSIENT_HTTP = {429, 502, 503, 504}
_TRANSIENT_GRPC = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"}
_AUTH_GRPC = {"UNAUTHENTICATED", "PERMISSION_DENIED"}
_PROBE_TIMEOUT_S = 3.0
_RETRIEVE_CHUNK = 1000  # ids per retrieve request
_REQUEST_BYTES = 8_000_000  # aim for upsert bodies well under the server's 32 MB default limit

_LOCAL_CLIENTS: dict[str, QdrantClient] = {}
_LOCAL_LOCK = threading.Lock()


@atexit.register
def _close_local_clients() -> None:
    """Close local clients before interpreter teardown (their own finaliser fails that late)."""
    with _LOCAL_LOCK:
        for client in _LOCAL_CLIENTS.values():
            client.close()
        _LOCAL_CLIENTS.clear()


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() in ("1", "true", "yes", "on")


def _single_segment(path: str, url_form: str) -> str:
    name = unquote(path.strip("/"))
    if not name or "/" in name:
        raise InputError(f"expected {url_form}")
    return name


def _named(name: str, row: list):
    """A point's vector(s) holding ``row`` as vector ``name`` ("" is the unnamed default vector)."""
    return row if name == "" else {name: row}


class QdrantCollection(QdrantPointsCollection):
    scheme = "qdrant"

    def __init__(self, url: str, *, read_only: bool = False):
        super().__init__(url, read_only=read_only)
        self.params = known_params(url, OPTIONS, "qdrant")
        rest = url.split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
        netloc, _, path = rest.partition("/")
        self.vector_name: str | None = self.params.get("vector")
        self._api_key = self.params.get("api_key") or os.environ.get("QDRANT_API_KEY") or None
        try:
            self._timeout = max(1, round(float(self.params.get("timeout", "60"))))
        except ValueError:
            raise InputError(f"timeout must be a number of seconds in {self.display_url}") from None
        self._client_obj: QdrantClient | None = None
        self._schema_cache: tuple[dict[str, tuple[int, str]], str] | None = None
        self._stamps_indexed = False
        if netloc == ":memory:":
            self.mode, self.location = "memory", ":memory:"
            self.name = _single_segment(path, "qdrant://:memory:/COLLECTION")
        elif netloc == "" or netloc in (".", "..") or netloc.startswith("~"):
            directory, _, name = path.rpartition("/")
            if not name or not directory:
                raise InputError("expected qdrant:///DIR/COLLECTION for a local Qdrant directory")
            base = "/" if netloc == "" else netloc + "/"
            self.mode, self.name = "local", unquote(name)
            self.location = str(Path(base + unquote(directory)).expanduser())
        else:
            self.mode, self.location = "server", netloc
            self.name = _single_segment(path, "qdrant://HOST:PORT/COLLECTION")

    @property
    def identity(self) -> CollectionIdentity:
        if self.mode == "server":
            parts = urlsplit(f"//{self.location}")
            try:
                port = parts.port or 6333
            except ValueError:
                port = 6333
            return CollectionIdentity("qdrant", f"{canonical_host(parts.hostname)}:{port}", self.name)
        where = ":memory:" if self.mode == "memory" else resolved_path(self.location)
        return CollectionIdentity("qdrant", where, self.name)

    @property
    def vector_field(self) -> str | None:
        return self.vector_name

    @property
    def capabilities(self) -> Capabilities:
        """Named vectors and aliases; local mode is single-process: the directory is locked by one client, and
        ``:memory:`` is this process's own."""
        return Capabilities(key_ranges=True, named_vectors=True, alias=True, single_process=self.mode != "server",
                            stamp="collection metadata", record_stamps="two keys of each point's payload "
                            "(vecbridge_origin, vecbridge_stamp; __NAME appended for named vector NAME)")

    @property
    def local_path(self) -> str | None:
        """The local mode's directory (every collection of that client lives in it)."""
        return resolved_path(self.location) if self.mode == "local" else None

    def check_writable(self) -> None:
        if self.mode == "local":
            require_writable(self.location, "the Qdrant directory")

    # --- connection ---------------------------------------------------------------------------------------------------
    def _client(self, *, create: bool = False) -> QdrantClient:
        """The client for this URL; for a local directory that does not exist yet, only when ``create`` is set."""
        if self._client_obj is not None:
            return self._client_obj
        if self.mode == "server":
            self._client_obj = self._server_client()
            return self._client_obj
        key = self.location if self.mode == "memory" else os.path.realpath(
            readable_path(self.location, read_only=self.read_only, what="the local Qdrant directory"))
        with _LOCAL_LOCK:
            if key not in _LOCAL_CLIENTS:
                if self.mode == "local" and not create and not os.path.isdir(key):
                    raise NotFound(f"collection not found: {self.display_url} (no directory {self.location})")
                try:
                    _LOCAL_CLIENTS[key] = (QdrantClient(location=":memory:") if self.mode == "memory"
                                           else QdrantClient(path=key))
                except RuntimeError:  # the directory is locked by another process's client
                    raise StoreError(f"{self.display_url}: the local Qdrant directory is in use by another process "
                                     f"(local mode allows one client; use a Qdrant server to share it)") from None
                except (OSError, ValueError) as exc:
                    raise StoreError(f"{self.display_url}: cannot open the local Qdrant directory ({exc})") from None
            self._client_obj = _LOCAL_CLIENTS[key]
        return self._client_obj

    def _server_client(self) -> QdrantClient:
        grpc_mode = bool(_flag(self.params.get("grpc")))
        try:
            parts = urlsplit(f"//{self.location}")
            host, port = parts.hostname or "localhost", parts.port or (6334 if grpc_mode else 6333)
        except ValueError:
            raise InputError(f"invalid host or port in {self.display_url}") from None
        try:  # fail fast and clearly when nothing listens there (the client would wait for its full timeout)
            socket.create_connection((host, port), timeout=min(_PROBE_TIMEOUT_S, self._timeout)).close()
        except OSError as exc:
            raise StoreError(f"cannot reach Qdrant at {self.display_url} "
                             f"({exc.strerror or type(exc).__name__})") from None
        https = _flag(self.params.get("https"))
        options: dict[str, Any] = dict(host=host, api_key=self._api_key, timeout=self._timeout,
                                       check_compatibility=False, prefer_grpc=grpc_mode)
        options["grpc_port" if grpc_mode else "port"] = port
        if https is not None:
            options["https"] = https
        return QdrantClient(**options)

    # --- failures (the retry loop and the mapping are Collection._call's) ---------------------------------------------
    _messages = {
        "auth": "Qdrant refused the credentials for {url} ({detail}); check QDRANT_API_KEY or ?api_key=",
        "transient": "lost the connection to Qdrant at {url} while {what} ({detail})",
        "error": "{url}: Qdrant failed while {what}: {detail}",
    }

    def _retried(self, kind: str) -> bool:
        return kind == "transient" and self.mode == "server"  # local modes have no connection to lose

    def _secrets(self) -> list[str]:
        return [self._api_key] if self._api_key else []

    def _classify(self, exc: Exception) -> tuple[str, str]:
        if isinstance(exc, UnexpectedResponse):
            code = exc.status_code or 0
            try:
                detail = str(exc.structured()["status"]["error"])
            except Exception:  # noqa: BLE001 - a body that is not Qdrant's JSON error
                detail = f"HTTP {code} {exc.reason_phrase}".strip()
            kind = ("auth" if code in (401, 403) else "missing" if code == 404
                    else "transient" if code in _TRANSIENT_HTTP else "error")
            return kind, f"HTTP {code}: {detail}" if kind != "error" else detail
        if isinstance(exc, ResponseHandlingException):
            return "transient", str(exc.source) or type(exc.source).__name__
        if type(exc).__module__.startswith("grpc") and callable(getattr(exc, "code", None)):  # a grpc.RpcError
            code = getattr(exc.code(), "name", "UNKNOWN")
            kind = ("auth" if code in _AUTH_GRPC else "missing" if code == "NOT_FOUND"
                    else "transient" if code in _TRANSIENT_GRPC else "error")
            return kind, f"gRPC {code}: {exc.details() if callable(getattr(exc, 'details', None)) else ''}"
        text = first_line(exc)
        if isinstance(exc, ValueError) and text.startswith("Collection") and text.endswith("not found"):
            # local mode (qdrant-client's Python emulation) raises a plain ValueError: its words are all there is
            return "missing", text
        return "error", text

    # --- schema -------------------------------------------------------------------------------------------------------
    def _schema(self) -> tuple[dict[str, tuple[int, str]], str]:
        """(dense vector fields name -> (dim, metric), the field this URL uses); cached until create/drop."""
        if self._schema_cache is None:
            info = self._call("reading the collection", self._client().get_collection, self.name)
            config = info.config.params.vectors
            if config is None:
                raise StoreError(f"{self.display_url} has no dense vectors")
            raw = {"": config} if isinstance(config, models.VectorParams) else dict(config)
            fields = {n: (int(p.size), _TO_METRIC.get(p.distance.value, p.distance.value.lower()))
                      for n, p in raw.items() if p.multivector_config is None}
            self._schema_cache = (fields, self._pick_field(fields))
        return self._schema_cache

    def _pick_field(self, fields: dict[str, tuple[int, str]]) -> str:
        listed = ", ".join(repr(n) for n in fields) or "none"
        if self.vector_name is not None:
            if self.vector_name not in fields:
                raise StoreError(f"{self.display_url} has no dense vector named {self.vector_name!r} "
                                 f"(it has: {listed})")
            return self.vector_name
        if "" in fields:
            return ""
        if len(fields) == 1:
            return next(iter(fields))
        raise StoreError(f"{self.display_url} has several named vectors ({listed}); choose one with ?vector=NAME")

    def _field(self) -> tuple[str, int, str]:
        fields, name = self._schema()
        dim, metric = fields[name]
        if metric not in _TO_METRIC.values():
            raise StoreError(f"{self.display_url}: vector {name!r} uses {metric} distance, which vecbridge does "
                             f"not support (cosine, dot, l2)")
        return name, dim, metric

    def _has_vector_filter(self) -> models.Filter | None:
        """In collections with several vectors a point may lack ours: those points are not records here."""
        fields, name = self._schema()
        return models.Filter(must=[models.HasVectorCondition(has_vector=name)]) if len(fields) > 1 else None

    def _with_vectors(self) -> bool | list[str]:
        fields, name = self._schema()
        return True if list(fields) == [""] else [name]

    # --- protocol: reading --------------------------------------------------------------------------------------------
    def exists(self) -> bool:
        try:
            return bool(self._call("checking the collection", self._client().collection_exists, self.name))
        except NotFound:  # a local directory that does not exist
            return False

    def info(self) -> CollectionInfo:
        fields, _ = self._schema()
        _, dim, metric = self._field()
        count = self._call("counting points", self._client().count, self.name,
                           count_filter=self._has_vector_filter(), exact=True).count
        usable = {n: f for n, f in fields.items() if f[1] in _TO_METRIC.values()}
        return CollectionInfo(name=self.name, dim=dim, metric=metric, count=int(count), vector_fields=usable)

    def _scroll(self, offset, limit: int, *, full: bool):
        """One scroll page: (records, next offset); ``full`` brings payloads and vectors, else ids only."""
        return self._call("scrolling points", self._client().scroll, self.name,
                          scroll_filter=self._has_vector_filter(), limit=limit, offset=offset,
                          with_payload=full, with_vectors=self._with_vectors() if full else False)

    def _retrieve_points(self, pids: list) -> list:
        found: list = []
        for lo in range(0, len(pids), _RETRIEVE_CHUNK):
            found += self._call("retrieving points", self._client().retrieve, self.name,
                                ids=pids[lo:lo + _RETRIEVE_CHUNK], with_payload=True, with_vectors=self._with_vectors())
        return found

    def _stamp_scroll(self, offset, limit: int, *, origins: list | None = None, pids: list | None = None):
        fields, name = self._schema()
        origin_key, stamp_key = record_stamp_keys(name)
        must: list = [models.HasVectorCondition(has_vector=name)] if len(fields) > 1 else []
        if pids is not None:
            must.append(models.HasIdCondition(has_id=pids))
        must_not: list = []
        if origins is None:
            must_not.append(models.IsEmptyCondition(is_empty=models.PayloadField(key=origin_key)))
        else:
            must.append(models.FieldCondition(key=origin_key, match=models.MatchAny(any=origins)))
        return self._call("scrolling stamps", self._client().scroll, self.name,
                          scroll_filter=models.Filter(must=must or None, must_not=must_not or None), limit=limit,
                          offset=offset, with_payload=[ID_KEY, stamp_key], with_vectors=False)

    def _query(self, queries: np.ndarray, name: str, k: int) -> list[list]:
        requests = [models.QueryRequest(query=q.tolist(), using=name or None, limit=k, with_payload=[ID_KEY],
                                        filter=self._has_vector_filter()) for q in queries]
        return [r.points for r in self._call("searching", self._client().query_batch_points, self.name,
                                             requests=requests)]

    # --- protocol: writing --------------------------------------------------------------------------------------------
    def create(self, dim: int, metric: str = "cosine", *, exist_ok: bool = False,
               index: bool = True) -> "QdrantCollection":
        dim, metric = self._check_create_args(dim, metric)
        client = self._client(create=True)
        if self._call("checking the collection", client.collection_exists, self.name):
            self._check_existing(dim, metric, *self._field()[1:], exist_ok=exist_ok)
            return self
        params = models.VectorParams(size=int(dim), distance=_TO_DISTANCE[metric])
        config = {self.vector_name: params} if self.vector_name else params
        self._call("creating the collection", client.create_collection, self.name, vectors_config=config)
        self._schema_cache = None
        return self

    def upsert(self, batch: VectorBatch) -> int:
        self._writable()
        name, dim, _ = self._field()
        vectors = self._check_batch(batch, dim)
        if len(batch) == 0:
            return 0
        pids, payloads = stored_points(batch.ids, stamps_into_payloads(batch, name))  # stamps checked, all first
        stamps = None if batch.stamps is None else stamp_payloads(payloads, name)
        if stamps is not None:
            self._index_stamps(name)
        fields, _ = self._schema()
        rows = max(1, min(1000, _REQUEST_BYTES // (dim * 20 + 256)))
        written = 0
        for lo in range(0, len(pids), rows):
            chunk = slice(lo, lo + rows)
            if self.keep_payloads:  # a field view: existing points get our vector; a missing one stays missing
                missing = self._update_existing(name, pids[chunk], vectors[chunk],
                                                None if stamps is None else stamps[chunk])
                written += len(pids[chunk]) - len(missing)
                continue
            if len(fields) > 1:
                points = self._merged_points(name, pids[chunk], vectors[chunk], payloads[chunk])
            else:
                points = [models.PointStruct(id=pid, vector=_named(name, vec), payload=payload)
                          for pid, vec, payload in zip(pids[chunk], vectors[chunk].tolist(), payloads[chunk])]
            self._call("writing points", self._client().upsert, self.name, points=points, wait=True)
            written += len(points)
        return written

    def _merged_points(self, name: str, pids: list, vectors: np.ndarray, payloads: list) -> list:
        """Points carrying our vector plus the other named vectors the existing points already have, and those
        vectors' record stamps (an upsert replaces a whole point, and writing one vector field must not erase the
        others)."""
        fields, _ = self._schema()
        keys = other_stamp_keys(fields, name)
        existing = self._call("reading points", self._client().retrieve, self.name, ids=pids,
                              with_payload=keys or False, with_vectors=True)
        others: dict = {}
        kept: dict = {}
        for rec in existing:
            current = rec.vector if isinstance(rec.vector, dict) else {"": rec.vector}
            pid = json_point_id(rec.id)
            others[pid] = {k: v for k, v in current.items() if k != name and v is not None}
            kept[pid] = {k: v for k, v in (rec.payload or {}).items() if k in keys}
        return [models.PointStruct(id=pid, vector={**others.get(pid, {}), name: vec.tolist()},
                                   payload={**payload, **kept.get(pid, {})})
                for pid, vec, payload in zip(pids, vectors, payloads)]

    def _update_existing(self, name: str, pids: list, vectors: np.ndarray, stamps: list | None) -> set:
        """Set vector ``name`` of the points among ``pids`` that exist, leaving their payloads and other vectors as
        they are, and, where ``stamps`` is given, the vector's record stamp keys with it (removed where a stamp is
        None), in one ``batch_update_points`` request; returns the point ids that do not exist yet."""
        found = self._call("reading points", self._client().retrieve, self.name, ids=pids, with_payload=False,
                           with_vectors=False)
        existing = {json_point_id(rec.id) for rec in found}
        keep = [i for i, pid in enumerate(pids) if pid in existing]
        if not keep:
            return set(pids)
        operations: list = [models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(points=[
            models.PointVectors(id=pids[i], vector=_named(name, vectors[i].tolist())) for i in keep]))]
        if stamps is not None:
            operations += [models.SetPayloadOperation(set_payload=models.SetPayload(payload=stamps[i],
                                                                                  points=[pids[i]]))
                           for i in keep if stamps[i] is not None]
            unstamped = [pids[i] for i in keep if stamps[i] is None]
            if unstamped:
                operations.append(models.DeletePayloadOperation(delete_payload=models.DeletePayload(
                    keys=list(record_stamp_keys(name)), points=unstamped)))
        self._call("writing vectors", self._client().batch_update_points, self.name,
                   update_operations=operations, wait=True)
        return {pid for pid in pids if pid not in existing}

    def _index_stamps(self, name: str) -> None:
        """On a server, a keyword index on the origin key of our record stamps (once per handle; creating it again
        changes nothing): what keeps :meth:`scan_stamps`'s filter cheap, and allowed where strict mode refuses
        filters on keys without an index. Local mode has no payload indexes."""
        if self.mode != "server" or self._stamps_indexed:
            return
        self._call("indexing the record stamps", self._client().create_payload_index, self.name,
                   field_name=record_stamp_keys(name)[0], field_schema=models.PayloadSchemaType.KEYWORD, wait=True)
        self._stamps_indexed = True

    def _delete_points(self, pids: list) -> None:
        self._call("deleting points", self._client().delete, self.name,
                   points_selector=models.PointIdsList(points=pids), wait=True)

    def drop(self) -> None:
        self._writable()
        if not self.exists():
            raise NotFound(f"collection not found: {self.display_url}")
        self._call("dropping the collection", self._client().delete_collection, self.name)
        self._schema_cache = None

    def _load_stamp(self) -> str | None:
        try:
            key = self._stamp_key()
            info = self._call("reading the stamp", self._client().get_collection, self.name)
        except NotFound:
            return None
        value = (info.config.metadata or {}).get(key)
        return None if value is None else str(value)

    def _save_stamp(self, text: str) -> None:
        self._field()  # the collection and the vector exist
        self._call("writing the stamp", self._client().update_collection, self.name,
                   metadata={self._stamp_key(): text})

    def point_alias(self, alias: str) -> None:
        """Delete and create ``alias`` in one request: readers see the old collection or the new one, never none."""
        ops = [models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=self.name,
                                                                          alias_name=alias))]
        client = self._client()
        current = self._call("reading aliases", client.get_aliases).aliases
        if any(a.alias_name == alias for a in current):
            ops.insert(0, models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)))
        self._call("switching the alias", client.update_collection_aliases, change_aliases_operations=ops)

    def add_vector_field(self, name: str, dim: int, metric: str = "cosine") -> None:
        """Add a named dense vector (Qdrant >= 1.18 and a qdrant-client that has ``create_vector_name``)."""
        dim, metric = self._check_create_args(dim, metric)
        client = self._client()
        self._schema()  # a clear error if the collection is missing
        if not hasattr(client, "create_vector_name"):
            raise StoreError(f"{self.scheme}: adding a vector field needs qdrant-client >= 1.18")
        config = models.DenseVectorNameConfig(dense=models.DenseVectorConfig(size=dim, distance=_TO_DISTANCE[metric]))
        try:
            self._call("adding a vector field", client.create_vector_name, self.name, vector_name=name,
                       vector_name_config=config)
        except NotFound:  # a 404 after _schema() found the collection: an endpoint this server does not have
            raise StoreError(f"{self.scheme}: adding a vector field is not supported by this Qdrant server "
                             f"(it needs Qdrant >= 1.18)") from None
        self._schema_cache = None
