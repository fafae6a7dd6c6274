"""``milvus://`` store: a Milvus collection through pymilvus' ``MilvusClient`` (a server, or a Milvus Lite file).

URL forms::

    milvus://HOST[:PORT]/COLLECTION               a Milvus server over gRPC (port 19530 by default)
    milvus://USER:PASSWORD@HOST:PORT/COLLECTION   with credentials (redacted in every message)
    milvus://HOST:PORT/COLLECTION?db=NAME         a database other than ``default``
    milvus:///ABS/PATH/FILE.db/COLLECTION         Milvus Lite: the path up to the part ending in ``.db``
    milvus://./REL/PATH/FILE.db/COLLECTION        Milvus Lite, relative to the working directory (also ``~/``)
    milvus:///ABS/PATH/FILE.db?collection=NAME    the same, naming the collection as a parameter

Query options: ``vector=FIELD`` (the float-vector field; default ``vector``, or the only one a collection has),
``secure=true`` (TLS), ``timeout=S`` (seconds per request, default 60), and for ``create``: ``id_type=int`` (an
INT64 primary key instead of VARCHAR) and ``index=TYPE`` (default HNSW on a server, FLAT on Lite). Credentials:
``USER:PASSWORD@`` in the URL, else the ``MILVUS_TOKEN`` environment variable (``user:password`` or an API key).

Schema made by ``create``: primary key ``id``, a FLOAT_VECTOR field with an index of metric COSINE / IP / L2 (for
cosine / dot / l2), and a JSON field ``payload``, which keeps nested lists, bools and ints as they are. Collections
made by other tools are read as they are: the payload is the ``payload`` JSON field (if any) merged with every
other scalar and dynamic field, and payload keys that name a scalar field are written to it. Milvus' L2 distance is
squared, so l2 search scores are minus the squared distance (as in ``vecbridge.metrics``).

Ids: string ids are VARCHAR keys. Integer ids written to a VARCHAR key are stored as their decimal string with the
reserved payload key ``_vb_int_id`` (stripped on read), so they come back as ints; in such a collection int 5 and
string "5" name the same record. An INT64 key takes integer ids only.

Consistency: the first request of every read (and every count) is Strong, so it sees every write acknowledged
before it, without a flush; the further requests of the same read (the next pages of a scan) are Bounded, which
does not wait for another time tick: what the first request saw stays visible. Milvus Lite re-reads its whole
in-memory write buffer on every query (2 s per query with 10k x 384 pending), so reads on Lite flush it first.

Scans walk the primary key in order (keyset pages ``id > cursor``, the requests pymilvus' ``query_iterator``
makes): a batch's cursor is its last key. The cursor is data, not a server-side session, so it survives a client
crash, a server restart and a new connection; records written since with larger keys are included and nothing is
repeated. (Offsets shift with every write; iterator sessions expire and die with the server.)

Sampling draws positions with a seeded generator over the sorted primary keys (read without vectors or payloads,
16k keys per request) and fetches only the sampled records: every key is read once, no vector that is not sampled.

Bulk writes: ``upsert`` (idempotent by id) in requests of ~16 MB, well under the server's 64 MB gRPC limit.
Requests are bounded by ``timeout``; idempotent ones are retried with backoff while the server is unavailable
(pymilvus gives up at once when it cannot reconnect), so a dead server fails within seconds with one line.
Stamps are collection properties (``alter_collection_properties``; a server keeps them in its meta store, Lite in
its schema file), JSON text under ``vecbridge:stamp:FIELD`` for the vector field FIELD, dropped with the collection.
Milvus 2.3 cannot add a field to an existing collection, so ``add_vector_field`` is refused as not supported.

Record stamps (each record's own, ``VectorBatch.stamps``) are two keys of the record's payload, ``vecbridge_origin``
and ``vecbridge_stamp`` (``__FIELD`` appended for a vector field not named ``vector``), kept where the payload is:
the JSON ``payload`` field, else dynamic fields (or scalar fields of those names, in a collection made with them);
they are written in the same upsert as the vector and removed from the payloads reads return. A collection with
nowhere to keep them refuses a stamped upsert. ``scan_stamps`` pages through the keys as scans do, with an
expression on the origin key and no vector output.
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import unquote, urlsplit

import grpc
import numpy as np
from pymilvus import DataType, MilvusClient
from pymilvus.exceptions import DataNotMatchException, ErrorCode, MilvusException, ParamError

from ..errors import InputError, NotFound, StoreError
from ..fs import require_writable
from .base import (
    Capabilities,
    Collection,
    CollectionIdentity,
    CollectionInfo,
    KeyRange,
    VectorBatch,
    check_metric,
    parse_record_stamp,
    ranges_from_keys,
    record_stamp_keys,
    stamp_key,
    stamps_from_payloads,
    stamps_into_payloads,
)
from .readonly import readable_path
from .url import canonical_host, known_params, resolved_path

#: the URL query options this store knows (any other is refused)
OPTIONS = ("vector", "secure", "timeout", "db", "collection", "metric", "id_type", "index")
#: payload key marking a record whose original id is an int stored in a VARCHAR primary key
INT_ID_KEY = "_vb_int_id"
PAYLOAD_FIELD = "payload"
DEFAULT_PORT = 19530

_TO_METRIC = {"COSINE": "cosine", "IP": "dot", "L2": "l2"}
_FROM_METRIC = {v: k for k, v in _TO_METRIC.items()}
_HNSW_BUILD = {"M": 16, "efConstruction": 200}
_VARCHAR_MAX = 65_535
_INT64_RANGE = (-(2 ** 63), 2 ** 63 - 1)
_DEFAULT_TIMEOUT_S = 60.0
_CONNECT_TIMEOUT_S = 5.0
_LOAD_TIMEOUT_S = 600.0
_MAX_PAGE = 16_384           # Milvus' limit on rows per query (maxQueryResultWindow)
_PAGE_BYTES = 16_000_000     # aim for responses well under the 64 MB gRPC limit
_REQUEST_BYTES = 16_000_000  # the same for upsert requests
_IDS_PER_GET = 1000          # keys per ``pk in [...]`` expression
_QUERIES_PER_SEARCH = 1000


class _QuietWhileHandled(logging.Filter):
    """Drops pymilvus' log records (a full traceback per failed RPC) while this thread is inside a connector call:
    the connector reports every failure itself, as one line. Other pymilvus use logs as before."""

    def __init__(self):
        super().__init__()
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(self.local, "depth", 0)

    @contextmanager
    def handling(self) -> Iterator[None]:
        """This thread is inside a connector call while the block runs."""
        self.local.depth = getattr(self.local, "depth", 0) + 1
        try:
            yield
        finally:
            self.local.depth -= 1


_QUIET = _QuietWhileHandled()
for _name in ("pymilvus.decorators", "pymilvus.client.connection_manager", "pymilvus.client.grpc_handler",
              "milvus_lite.server_manager"):
    logging.getLogger(_name).addFilter(_QUIET)


def _message(exc: BaseException) -> str:
    """pymilvus' message on one line (its messages span lines)."""
    return " ".join(str(getattr(exc, "message", None) or exc).split())


def _grpc_code(exc: BaseException) -> grpc.StatusCode | None:
    """The gRPC status somewhere in an exception's chain. pymilvus re-raises with ``raise e from e``, which makes
    ``__cause__`` point at itself, so both links are followed (each exception once)."""
    todo, seen = [exc], set()
    while todo:
        exc = todo.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        if isinstance(exc, grpc.RpcError) and callable(getattr(exc, "code", None)):
            return exc.code()
        todo += [exc.__cause__, exc.__context__]
    return None


def _lite_access_problem(path: Path) -> str | None:
    """Why the file system keeps a Milvus Lite database at ``path`` from being opened, checked with ``os.access``:
    ``cannot write PLACE: permission denied`` (or ``not a directory`` / ``no such directory``); None when nothing
    there is wrong, and the usual cause of a failed open is another process holding the database's lock.

    Lite opens every database read-write, reads included: it locks a file in it and writes its log. The database is
    a data directory (milvus-lite >= 3: ``LOCK`` inside it) or a single file next to which older versions write."""
    path = Path(os.path.abspath(path))
    if path.exists():
        places = [path, path / "LOCK"] if path.is_dir() else [path, path.parent]
        for place in places:
            if place.exists() and not os.access(place, os.W_OK | (os.X_OK if place.is_dir() else 0)):
                return f"cannot write {place}: permission denied"
        return None
    parent = path.parent
    if parent.is_dir():
        return None if os.access(parent, os.W_OK | os.X_OK) else f"cannot write {parent}: permission denied"
    existing = parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return f"cannot write {existing}: not a directory"
    return f"cannot write {parent}: no such directory"


def _short(id_) -> str:
    """An id as a message shows it: its repr, cut to 80 characters."""
    text = repr(id_)
    return text if len(text) <= 80 else text[:77] + "..."


def _oversized(rows: Sequence[dict], ids: Sequence, message: str) -> str | None:
    """Which record a refused write was refused for, when Milvus said a value "exceeds max length (N)" (a JSON
    payload or a VARCHAR over the collection's limit; the server names neither the record nor, for JSON, its row):
    ``"ID: its field F holds B bytes, the store's limit is N"`` for the first row holding a longer value; None when
    the message is about something else or no row is to blame."""
    m = re.search(r"exceeds max length \((\d+)\)", message)
    if not m:
        return None
    limit = int(m.group(1))
    for id_, row in zip(ids, rows):
        for name, value in row.items():
            if isinstance(value, str):
                size = len(value.encode("utf-8"))
            elif isinstance(value, (dict, list)):
                size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8"))
            else:
                continue
            if size > limit:
                return f"{_short(id_)}: its field {name!r} holds {size:,} bytes, the store's limit is {limit:,}"
    return None


def _levels(strong_first: bool = True) -> Iterator[str]:
    """Consistency levels for the requests of one read: the first is Strong (it waits until every write
    acknowledged before it is visible, ~one time tick), the rest are Bounded: what the first one saw stays visible
    (visibility only grows), so waiting again per page would only add a time tick to each request."""
    if strong_first:
        yield "Strong"
    while True:
        yield "Bounded"


def _literal(key) -> str:
    """A primary-key value as a Milvus expression literal (strings quoted and escaped)."""
    return json.dumps(key, ensure_ascii=False) if isinstance(key, str) else str(int(key))


class MilvusCollection(Collection):
    scheme = "milvus"

    def __init__(self, url: str, *, read_only: bool = False):
        super().__init__(url, read_only=read_only)
        self.params = known_params(url, OPTIONS, "milvus")
        parts = urlsplit(url)
        self.lite_path: Path | None = None
        if parts.netloc in ("", ".", "..", "~") or re.search(r"\.db(/|$)", parts.path):
            self._parse_lite(parts)
        else:
            self._parse_server(parts)
        if not self.name:
            raise InputError(f"{self.display_url}: no collection named (milvus://HOST:PORT/COLLECTION or "
                             f"milvus:///PATH/FILE.db/COLLECTION)")
        self.vector_name = self.params.get("vector")
        try:
            self.timeout = float(self.params.get("timeout", _DEFAULT_TIMEOUT_S))
        except ValueError:
            raise InputError(f"{self.display_url}: timeout must be a number of seconds") from None
        self._client_obj: MilvusClient | None = None
        self._schema: dict | None = None
        self._loaded = False

    @property
    def identity(self) -> CollectionIdentity:
        if self.lite_path is not None:
            return CollectionIdentity("milvus", resolved_path(self.lite_path), self.name)
        parts = urlsplit(self.address)
        database = self.params.get("db") or "default"
        return CollectionIdentity("milvus", f"{canonical_host(parts.hostname)}:{parts.port}/{database}", self.name)

    @property
    def vector_field(self) -> str | None:
        return self.vector_name

    @property
    def capabilities(self) -> Capabilities:
        """Aliases; a Milvus Lite database is locked by the one process that opens it."""
        return Capabilities(key_ranges=True, alias=True, single_process=self.lite_path is not None,
                            stamp="collection properties", record_stamps="two keys of each record's payload (its "
                            "JSON payload field, else dynamic fields): vecbridge_origin, vecbridge_stamp")

    @property
    def local_path(self) -> str | None:
        """A Lite database (every collection of it lives there)."""
        return resolved_path(self.lite_path) if self.lite_path is not None else None

    def check_writable(self) -> None:
        if self.lite_path is not None:
            require_writable(self.lite_path.parent, "the Milvus Lite file")

    def _parse_lite(self, parts) -> None:
        raw = unquote(parts.netloc + parts.path)
        m = re.match(r"^(.*?\.db)(?:/([^/]*))?/?$", raw)
        if not m:
            raise InputError(f"{self.display_url}: a Milvus Lite URL names a file ending in .db, "
                             f"e.g. milvus:///data/vectors.db/COLLECTION")
        self.lite_path = Path(m.group(1)).expanduser()
        self.name = m.group(2) or self.params.get("collection", "")

    def _parse_server(self, parts) -> None:
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError:
            raise InputError(f"{self.display_url}: invalid port") from None
        host = parts.hostname or "localhost"
        host = f"[{host}]" if ":" in host else host  # IPv6
        tls = self.params.get("secure", "").lower() in ("1", "true", "yes")
        self.address = f"{'https' if tls else 'http'}://{host}:{port}"
        self.name = unquote(parts.path.strip("/"))
        if parts.username is not None and parts.password is not None:
            self._token = f"{unquote(parts.username)}:{unquote(parts.password)}"
        else:   # no user, or a user without a password (as a saved URL keeps it): MILVUS_TOKEN
            self._token = os.environ.get("MILVUS_TOKEN", "")

    # --- connection and failures (the retry loop and the mapping are Collection._call's) -------------------------
    _messages = {
        "input": "{url}: {what}: {detail}",
        "auth": "{url}: authentication failed (check USER:PASSWORD in the URL or MILVUS_TOKEN)",
        "transient": "{url}: {what} failed: server unavailable ({detail})",
        "timeout": "{url}: {what} failed: server unavailable ({detail})",
        "error": "{url}: {what} failed: {detail}",
    }

    def _classify(self, exc: Exception) -> tuple[str, str]:
        """By exception type, pymilvus' error code and the gRPC status. Only UNAVAILABLE is "transient" (retried):
        a request that ran out of its time is not sent again."""
        detail = _message(exc)
        if isinstance(exc, (ParamError, DataNotMatchException)):
            return "input", detail
        if isinstance(exc, MilvusException) and exc.code == ErrorCode.COLLECTION_NOT_FOUND:
            return "missing", detail
        code = _grpc_code(exc)
        kinds = {grpc.StatusCode.UNAUTHENTICATED: "auth", grpc.StatusCode.UNAVAILABLE: "transient",
                 grpc.StatusCode.DEADLINE_EXCEEDED: "timeout"}
        return kinds.get(code, "error"), detail

    def _secrets(self) -> list[str]:
        if self.lite_path is not None:
            return []
        return [s for s in (self._token, self._token.partition(":")[2]) if len(s) >= 3]

    def _call(self, what: str, fn, *args, **kwargs):
        """As :meth:`Collection._call`, with pymilvus' failure logs silenced: the failure is reported as one line."""
        with _QUIET.handling():
            return super()._call(what, fn, *args, **kwargs)

    @contextmanager
    def _failures(self, what: str) -> Iterator[None]:
        """As :meth:`Collection._failures`, with pymilvus' failure logs silenced."""
        with _QUIET.handling(), super()._failures(what):
            yield

    @property
    def _client(self) -> MilvusClient:
        if self._client_obj is None:
            with self._failures("connecting"):
                try:
                    if self.lite_path is not None:
                        self._client_obj = MilvusClient(readable_path(
                            self.lite_path, read_only=self.read_only, what="the Milvus Lite database"))
                    else:
                        options = {"db_name": self.params["db"]} if self.params.get("db") else {}
                        self._client_obj = MilvusClient(uri=self.address, token=self._token,
                                                        timeout=min(_CONNECT_TIMEOUT_S, self.timeout), **options)
                except MilvusException as exc:
                    if _grpc_code(exc) == grpc.StatusCode.UNAUTHENTICATED:
                        raise
                    problem = _lite_access_problem(self.lite_path) if self.lite_path is not None else None
                    if problem:  # Lite's own error says only "failed": name the real cause before guessing a lock
                        raise StoreError(f"{problem} (opening the Milvus Lite database {self.lite_path})") from None
                    if self.lite_path is not None:
                        raise StoreError(f"cannot open the Milvus Lite database {self.lite_path} (a Lite database "
                                         f"can be open in only one process at a time: is another one using it?): "
                                         f"{self._masked(_message(exc))}") from None
                    raise StoreError(f"cannot connect to {self.display_url}: server unreachable or not a Milvus "
                                     f"gRPC port ({self._masked(_message(exc))})") from None
        return self._client_obj

    def _request(self, doing: str, method: str, *args, **kwargs):
        """One idempotent request of the client's ``method``, bounded by the URL's timeout, as one :meth:`_call`:
        retried while the server is unavailable (pymilvus itself gives up at once when it cannot reconnect, e.g.
        during a restart)."""
        kwargs.setdefault("timeout", self.timeout)
        return self._call(doing, lambda: getattr(self._client, method)(*args, **kwargs))

    # --- schema ------------------------------------------------------------------------------------------------
    def exists(self) -> bool:
        if self.lite_path is not None and not self.lite_path.exists():
            return False
        return bool(self._request("checking the collection", "has_collection", self.name))

    def _describe(self) -> dict:
        """Field roles of the collection, cached: pk name/type, the vector field, payload and other scalar fields."""
        if self._schema is not None:
            return self._schema
        if not self.exists():
            raise NotFound(f"collection not found: {self.display_url}")
        desc = self._request("describing the collection", "describe_collection", self.name)
        fields = desc["fields"]
        pk = next(f for f in fields if f.get("is_primary"))
        vectors = {f["name"]: int(f["params"]["dim"]) for f in fields if f["type"] == DataType.FLOAT_VECTOR}
        if not vectors:
            raise StoreError(f"{self.display_url}: the collection has no FLOAT_VECTOR field")
        vector = self.vector_name or ("vector" if "vector" in vectors or len(vectors) != 1 else next(iter(vectors)))
        if vector not in vectors:
            raise StoreError(f"{self.display_url}: no float vector field {vector!r} "
                             f"(fields: {', '.join(sorted(vectors))}; choose one with ?vector=NAME)")
        skip_types = {DataType.FLOAT_VECTOR, DataType.BINARY_VECTOR}
        scalars = [f["name"] for f in fields if f["type"] not in skip_types and f["name"] != pk["name"]]
        has_payload = any(f["name"] == PAYLOAD_FIELD and f["type"] == DataType.JSON for f in fields)
        indexes = {name: self._index_of(name) for name in vectors}
        self._schema = {
            "pk": pk["name"], "pk_str": pk["type"] == DataType.VARCHAR, "vector": vector, "dim": vectors[vector],
            "pk_max": int((pk.get("params") or {}).get("max_length") or _VARCHAR_MAX),
            "vectors": vectors, "payload": PAYLOAD_FIELD if has_payload else None,
            "scalars": [s for s in scalars if s != PAYLOAD_FIELD or not has_payload],
            "dynamic": bool(desc.get("enable_dynamic_field")),
            "metrics": {name: metric for name, (metric, _) in indexes.items()}, "index_type": indexes[vector][1],
        }
        return self._schema

    def _index_of(self, field: str) -> tuple[str, str]:
        """(metric, index type) of a vector field's index; without an index the metric is ``?metric=`` or cosine."""
        names = self._request("describing the index", "list_indexes", self.name, field_name=field)
        if not names:
            return check_metric(self.params.get("metric", "cosine")), ""
        index = self._request("describing the index", "describe_index", self.name, names[0])
        metric = str(index.get("metric_type", "")).upper()
        if metric not in _TO_METRIC:
            raise StoreError(f"{self.display_url}: unsupported metric {metric!r} on field {field!r}")
        return _TO_METRIC[metric], str(index.get("index_type", "")).upper()

    def _ensure_loaded(self) -> dict:
        """Milvus serves queries only from loaded collections: load once (a no-op when already loaded).

        Milvus Lite re-reads its whole in-memory write buffer for every query (2 s per query with 10k x 384
        pending), so on Lite every read first flushes pending writes to a segment (a no-op when none are pending).
        """
        schema = self._describe()
        if self.lite_path is not None:
            self._request("flushing", "flush", self.name)
        if not self._loaded:
            self._request("loading the collection", "load_collection", self.name,
                       timeout=max(self.timeout, _LOAD_TIMEOUT_S))
            self._loaded = True
        return schema

    # --- protocol: reading ---------------------------------------------------------------------------------------
    def info(self) -> CollectionInfo:
        schema = self._ensure_loaded()
        rows = self._request("counting", "query", self.name, filter="", output_fields=["count(*)"],
                          consistency_level="Strong")
        metrics = schema["metrics"]
        return CollectionInfo(name=self.name, dim=schema["dim"], metric=metrics[schema["vector"]],
                              count=int(rows[0]["count(*)"]),
                              vector_fields={k: (d, metrics[k]) for k, d in schema["vectors"].items()})

    def _output_fields(self, schema: dict) -> list[str]:
        fields = [schema["pk"], schema["vector"], *schema["scalars"]]
        if schema["payload"]:
            fields.append(schema["payload"])
        if schema["dynamic"]:
            fields.append("*")
        return fields

    def _page_rows(self, schema: dict, batch_size: int) -> int:
        return max(1, min(batch_size, _MAX_PAGE, _PAGE_BYTES // (schema["dim"] * 4 + 512)))

    def _to_batch(self, rows: Sequence[dict], schema: dict) -> VectorBatch:
        """Rows as records: the payload is the JSON payload field merged with any other scalar / dynamic fields,
        less the record stamps, which are the batch's stamps (of this handle's vector field)."""
        ids, payloads = self._ids_and_payloads(rows, schema)
        vec = schema["vector"]
        vectors = (np.asarray([row[vec] for row in rows], dtype=np.float32) if rows
                   else np.zeros((0, schema["dim"]), dtype=np.float32))
        payloads, stamps = stamps_from_payloads(payloads, self._stamp_field(schema))
        return VectorBatch(ids, vectors, payloads, stamps=stamps)

    def _ids_and_payloads(self, rows: Sequence[dict], schema: dict) -> tuple[list, list[dict]]:
        """The record ids of rows (int ids restored) and their payloads (the JSON payload field merged with any other
        scalar / dynamic fields the rows hold)."""
        pk, payload_field = schema["pk"], schema["payload"]
        other_fields = bool(schema["scalars"]) or schema["dynamic"] or not payload_field
        skip = {pk, payload_field, *schema["vectors"]}
        ids, payloads = [], []
        for row in rows:
            payload = dict(row.get(payload_field) or {}) if payload_field else {}  # a copy: rows may be shared
            if other_fields:
                payload = {**{k: v for k, v in row.items() if k not in skip}, **payload}
            key = row[pk]
            if payload.pop(INT_ID_KEY, False) and schema["pk_str"]:
                key = int(key)
            ids.append(key)
            payloads.append(payload)
        return ids, payloads

    # --- record stamps: two payload keys ---------------------------------------------------------------------
    def _stamp_field(self, schema: dict) -> str | None:
        """The vector field whose record stamp keys this handle uses: none (the plain keys) for ``vector``, the
        field ``create`` makes and reads choose by default; the field's own name otherwise."""
        return None if schema["vector"] == "vector" else schema["vector"]

    def _stamp_ref(self, schema: dict, key: str) -> str | None:
        """How a filter expression names payload key ``key`` where :meth:`_rows` writes it: a scalar field of that
        name, a key of the JSON payload field, or a dynamic field; None where the collection has nowhere for it."""
        if key in schema["scalars"] or (schema["dynamic"] and not schema["payload"]):
            return key
        return f"{schema['payload']}[{_literal(key)}]" if schema["payload"] else None

    def _stamp_read(self, schema: dict, where: str, rows_per_page: int) -> Iterator[tuple]:
        """``(ids, stamps)`` of the stamped records the expression ``where`` selects, page by page in key order,
        reading the key and the fields that hold the stamp (no vectors); nothing where the collection holds none."""
        origin_key, stamp_key_ = record_stamp_keys(self._stamp_field(schema))
        origin = self._stamp_ref(schema, origin_key)
        if origin is None:
            return
        fields = [schema["pk"]]
        if schema["payload"]:
            fields.append(schema["payload"])
        fields += [k for k in (stamp_key_, INT_ID_KEY)
                   if k in schema["scalars"] or (schema["dynamic"] and not schema["payload"])]
        selected = f"{origin} like \"%\"" + (f" and ({where})" if where else "")
        for rows in self._keyset(schema, list(dict.fromkeys(fields)), rows_per_page, None, where=selected):
            ids, payloads = self._ids_and_payloads(rows, schema)
            stamps = [parse_record_stamp(p.get(stamp_key_)) for p in payloads]
            kept = [(i, s) for i, s in zip(ids, stamps) if s is not None]
            if kept:
                yield [i for i, _ in kept], [s for _, s in kept]

    def scan_stamps(self, batch_size: int = 1000, origins: Sequence[str] | None = None) -> Iterator[tuple[list, list]]:
        """Keyset pages of the records whose origin key is set (and one of ``origins``), reading no vectors. Milvus
        Lite takes no ``in`` on a JSON key, so the origins are compared one by one."""
        if batch_size <= 0:
            raise InputError("batch_size must be positive")
        schema = self._ensure_loaded()
        where = ""
        if origins is not None:
            wanted = list(dict.fromkeys(origins))
            if not wanted:
                return
            if not all(isinstance(o, str) for o in wanted):
                raise InputError("origins must be strings")
            origin = self._stamp_ref(schema, record_stamp_keys(self._stamp_field(schema))[0])
            where = " or ".join(f"{origin} == {_literal(o)}" for o in wanted)
        yield from self._stamp_read(schema, where, min(batch_size, _MAX_PAGE))

    def stamps_of(self, ids: Sequence) -> dict:
        """``pk in [...]`` queries of :data:`_IDS_PER_GET` keys, on stamped records, reading no vectors."""
        schema = self._ensure_loaded()
        keys = list(dict.fromkeys(k for k in (self._store_key(i, schema) for i in ids) if k is not None))
        found: dict = {}
        for lo in range(0, len(keys), _IDS_PER_GET):
            where = f"{schema['pk']} in [{', '.join(_literal(k) for k in keys[lo:lo + _IDS_PER_GET])}]"
            for got_ids, stamps in self._stamp_read(schema, where, _MAX_PAGE):
                found.update(zip(got_ids, stamps))
        return found

    def _check_cursor(self, after: Any, schema: dict):
        ok = isinstance(after, str) if schema["pk_str"] else isinstance(after, int) and not isinstance(after, bool)
        if not ok:
            raise InputError(f"invalid scan cursor {after!r} for {self.display_url} "
                             f"(expected the {'string' if schema['pk_str'] else 'integer'} key of a record)")
        return after

    def _keyset(self, schema: dict, fields: list[str], page: int, after: Any,
                until: Any = None, where: str = "") -> Iterator[list[dict]]:
        """Pages of rows in primary-key order, starting after the key ``after`` (None: from the start), of the rows
        the expression ``where`` selects (all where empty).

        The same requests as pymilvus' ``query_iterator`` (``iterator``/``reduce_stop_for_best`` make the server
        return the smallest keys in order), but with the key quoted safely: the iterator pastes string keys into
        its filter unescaped, which breaks on keys holding quotes or backslashes. A short page does not mean the
        end (the server may stop early to keep the order exact); an empty page does.
        """
        pk, levels = schema["pk"], _levels()
        upto = f"{pk} <= {_literal(until)}" if until is not None else ""
        selected = f"({where})" if where else ""
        while True:
            expr = " and ".join(e for e in (f"{pk} > {_literal(after)}" if after is not None else "", upto,
                                            selected) if e)
            rows = self._request("scanning", "query", self.name, filter=expr, output_fields=fields,
                              limit=page, consistency_level=next(levels), iterator="True", reduce_stop_for_best="True")
            if not rows:
                return
            yield rows
            after = rows[-1][pk]

    def scan(self, batch_size: int = 1000, after: Any = None, until: Any = None) -> Iterator[VectorBatch]:
        """Pages in primary-key order (the server's: numbers, or strings byte by byte); a cursor is the key of a
        batch's last record; ``until`` stops after that key."""
        if batch_size <= 0:
            raise InputError("batch_size must be positive")
        schema = self._ensure_loaded()
        for cursor in (after, until):
            if cursor is not None:
                self._check_cursor(cursor, schema)
        page = self._page_rows(schema, batch_size)
        for rows in self._keyset(schema, self._output_fields(schema), page, after, until):
            batch = self._to_batch(rows, schema)
            batch.cursor = rows[-1][schema["pk"]]
            yield batch

    def key_ranges(self, n: int, seed: int = 0) -> list[KeyRange]:
        """Cut at quantiles of the primary keys. Milvus has no server-side sample, so this reads the keys alone (as
        :meth:`sample` does) and cuts at exact quantiles (``seed`` is accepted for the protocol and unused).
        Python orders ints as Milvus does, and str (code points) as Milvus orders VARCHAR (UTF-8 bytes)."""
        if int(n) <= 0:
            raise InputError(f"number of ranges must be positive, got {n}")
        schema = self._ensure_loaded()
        keys = [row[schema["pk"]] for rows in self._keyset(schema, [schema["pk"]], _MAX_PAGE, None) for row in rows]
        keys.sort()
        return ranges_from_keys(keys, n)

    def _fetch(self, keys: Sequence, schema: dict, levels: Iterator[str]) -> dict:
        """Rows by store key (one ``pk in [...]`` query per chunk), as a dict key -> row."""
        found: dict = {}
        fields = self._output_fields(schema)
        for lo in range(0, len(keys), _IDS_PER_GET):
            chunk = keys[lo:lo + _IDS_PER_GET]
            expr = f"{schema['pk']} in [{', '.join(_literal(k) for k in chunk)}]"
            rows = self._request("reading records", "query", self.name, filter=expr, output_fields=fields,
                              consistency_level=next(levels))
            found.update((row[schema["pk"]], row) for row in rows)
        return found

    def _store_key(self, id_, schema: dict):
        """The primary-key value a user id is stored under (None when it cannot be a key of this collection)."""
        if isinstance(id_, (bool, np.bool_)):
            return None
        if isinstance(id_, (int, np.integer)):
            return str(int(id_)) if schema["pk_str"] else int(id_)
        return id_ if schema["pk_str"] and isinstance(id_, str) else None

    def get(self, ids: Sequence) -> VectorBatch:
        schema = self._ensure_loaded()
        keys = [self._store_key(i, schema) for i in ids]
        found = self._fetch(list(dict.fromkeys(k for k in keys if k is not None)), schema, _levels())
        return self._to_batch([found[k] for k in keys if k in found], schema)

    def sample(self, n: int, seed: int = 0) -> VectorBatch:
        if n <= 0:
            raise InputError("sample size must be positive")
        schema = self._ensure_loaded()
        keys = [row[schema["pk"]] for rows in self._keyset(schema, [schema["pk"]], _MAX_PAGE, None) for row in rows]
        keys.sort()
        if not keys:
            return self._to_batch([], schema)
        pick = np.sort(np.random.default_rng(seed).choice(len(keys), size=min(n, len(keys)), replace=False))
        chosen = [keys[i] for i in pick]
        found = self._fetch(chosen, schema, _levels(strong_first=False))  # the key scan has waited already
        return self._to_batch([found[k] for k in chosen if k in found], schema)

    def search(self, vectors, k: int = 10) -> tuple[list[list], np.ndarray]:
        schema = self._ensure_loaded()
        Q = np.asarray(vectors, dtype=np.float32)
        if Q.ndim != 2 or Q.shape[1] != schema["dim"]:
            raise InputError(f"query vectors must have dimension {schema['dim']}, got shape {Q.shape}")
        if k <= 0:
            raise InputError("k must be positive")
        metric = schema["metrics"][schema["vector"]]
        index_type = schema["index_type"]
        params = {"ef": max(k, 128)} if index_type == "HNSW" else {"nprobe": 64} if index_type.startswith("IVF") else {}
        # the payload tells which VARCHAR keys were int ids
        output = [schema["payload"]] if schema["pk_str"] and schema["payload"] else []
        hits_per_query: list = []
        levels = _levels()
        for lo in range(0, len(Q), _QUERIES_PER_SEARCH):
            hits_per_query.extend(self._request(
                "searching", "search", self.name, data=list(Q[lo:lo + _QUERIES_PER_SEARCH]), limit=k,
                anns_field=schema["vector"], output_fields=output, consistency_level=next(levels),
                search_params={"metric_type": _FROM_METRIC[metric], "params": params}))
        width = max((len(h) for h in hits_per_query), default=0)
        scores = np.full((len(Q), width), -np.inf, dtype=np.float32)
        ids: list[list] = []
        for row, hits in enumerate(hits_per_query):
            row_ids = []
            for col, hit in enumerate(hits):
                payload = (hit.get("entity") or {}).get(schema["payload"] or "") or {}
                row_ids.append(int(hit["id"]) if payload.get(INT_ID_KEY) else hit["id"])
                distance = float(hit["distance"])
                scores[row, col] = -distance if metric == "l2" else distance  # Milvus L2 is the squared distance
            ids.append(row_ids)
        return ids, scores

    # --- protocol: writing ---------------------------------------------------------------------------------------
    def create(self, dim: int, metric: str = "cosine", *, exist_ok: bool = False,
               index: bool = True) -> "MilvusCollection":
        dim, metric = self._check_create_args(dim, metric)
        if self.exists():
            schema = self._describe()
            self._check_existing(dim, metric, schema["dim"], schema["metrics"][schema["vector"]], exist_ok)
            return self
        id_type = self.params.get("id_type", "str").lower()
        if id_type not in ("str", "int"):
            raise InputError(f"{self.display_url}: id_type must be str or int, got {id_type!r}")
        vector = self.vector_name or "vector"
        index_type = self.params.get("index", "FLAT" if self.lite_path is not None else "HNSW").upper()
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False,
                                            description="created by vecbridge")
        if id_type == "int":
            schema.add_field("id", DataType.INT64, is_primary=True)
        else:
            schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=_VARCHAR_MAX)
        schema.add_field(vector, DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field(PAYLOAD_FIELD, DataType.JSON)
        with self._failures("creating the collection"):
            index_params = self._client.prepare_index_params()
            index_params.add_index(field_name=vector, index_type=index_type, metric_type=_FROM_METRIC[metric],
                                   params=dict(_HNSW_BUILD) if index_type == "HNSW" else {})
            self._client.create_collection(self.name, schema=schema, index_params=index_params,
                                           consistency_level="Strong", timeout=max(self.timeout, _LOAD_TIMEOUT_S))
        self._schema, self._loaded = None, False
        return self

    def _rows(self, batch: VectorBatch, vectors: np.ndarray, schema: dict) -> list[dict]:
        """Milvus rows for a batch: known scalar fields by name, the rest into the payload JSON (or dynamic)."""
        pk, vec, payload_field, pk_str = schema["pk"], schema["vector"], schema["payload"], schema["pk_str"]
        scalars = set(schema["scalars"])
        rows = []
        for id_, vector, payload in zip(batch.ids, vectors, batch.payloads):
            key = self._store_key(id_, schema)
            if key is None or (not pk_str and not _INT64_RANGE[0] <= key <= _INT64_RANGE[1]):
                kind = "strings or integers" if pk_str else "64-bit integers"
                raise InputError(f"{self.display_url}: ids must be {kind} for this collection, got {id_!r}")
            if pk_str and len(key.encode("utf-8")) > schema["pk_max"]:
                raise InputError(f"{self.display_url}: record {_short(id_)} is too large for the store: its id has "
                                 f"{len(key.encode('utf-8')):,} bytes, the key field holds at most "
                                 f"{schema['pk_max']:,}")
            if not isinstance(payload, dict):
                raise InputError(f"payloads must be dicts, got {type(payload).__name__}")
            row = {pk: key, vec: vector}
            rest = payload
            if scalars:
                row.update((k, v) for k, v in payload.items() if k in scalars)
                rest = {k: v for k, v in payload.items() if k not in scalars}
            if pk_str and not isinstance(id_, str):
                rest = {**rest, INT_ID_KEY: True}
            if payload_field:
                row[payload_field] = rest
            elif schema["dynamic"]:
                row.update(rest)
            elif rest:
                raise InputError(f"{self.display_url}: payload keys {sorted(rest)[:5]} are not fields of the "
                                 f"collection and it has no JSON payload field or dynamic fields")
            rows.append(row)
        return rows

    def _rows_per_request(self, batch: VectorBatch, schema: dict) -> int:
        """Rows per upsert request for ~16 MB requests, from the vector size and a sample of payload sizes (twice
        the sample's mean, leaving the 64 MB limit far away for batches whose payloads vary)."""
        sample = batch.payloads[::max(1, len(batch) // 64)]
        mean_payload = sum(len(json.dumps(p, ensure_ascii=False, default=str)) for p in sample) / len(sample)
        return max(1, int(_REQUEST_BYTES // (schema["dim"] * 4 + 2 * mean_payload + 256)))

    def upsert(self, batch: VectorBatch) -> int:
        self._writable()
        schema = self._describe()
        vectors = self._check_batch(batch, schema["dim"])
        if len(batch) == 0:
            return 0
        stamp_field = self._stamp_field(schema)
        payloads = stamps_into_payloads(batch, stamp_field)  # every stamp checked before anything is written
        if (batch.stamps is not None and any(s is not None for s in batch.stamps)
                and self._stamp_ref(schema, record_stamp_keys(stamp_field)[0]) is None):
            raise StoreError(f"{self.display_url}: cannot keep record stamps: the collection has no JSON payload "
                             f"field or dynamic fields (nothing of this batch was written)")
        stamped = VectorBatch(batch.ids, vectors, payloads)
        rows = self._rows(stamped, vectors, schema)
        step = self._rows_per_request(stamped, schema)
        for lo in range(0, len(rows), step):
            try:
                self._request("writing records", "upsert", self.name, rows[lo:lo + step])
            except (InputError, StoreError) as exc:
                culprit = _oversized(rows[lo:lo + step], batch.ids[lo:lo + step], str(exc))
                if culprit is None:
                    raise
                raise InputError(f"{self.display_url}: record {culprit} is too large for the store "
                                 f"(nothing of this batch was written): remove or shorten it") from None
        return len(batch)

    def delete(self, ids: Sequence) -> int:
        """``delete(filter="pk in [...]")`` with the keys quoted as literals (as reads quote them), 1,000 keys per
        request; ids that cannot be keys of this collection (a string for an INT64 key) cannot exist and are
        skipped, as :meth:`get` skips them. Reads after it see the delete (their first request is Strong)."""
        wanted = self._ids_to_delete(ids)
        schema = self._describe()
        keys = [self._store_key(i, schema) for i in wanted]
        keys = list(dict.fromkeys(k for k in keys if k is not None and (
            schema["pk_str"] or _INT64_RANGE[0] <= k <= _INT64_RANGE[1])))
        for lo in range(0, len(keys), _IDS_PER_GET):
            expr = f"{schema['pk']} in [{', '.join(_literal(k) for k in keys[lo:lo + _IDS_PER_GET])}]"
            self._request("deleting records", "delete", self.name, filter=expr)
        return len(wanted)

    def _load_stamp(self) -> str | None:
        try:
            key = stamp_key(self.vector_name or self._describe()["vector"])
            desc = self._request("reading the stamp", "describe_collection", self.name)
        except NotFound:
            return None
        value = (desc.get("properties") or {}).get(key)
        return None if value is None else str(value)

    def _save_stamp(self, text: str) -> None:
        key = stamp_key(self._describe()["vector"])
        self._request("writing the stamp", "alter_collection_properties", self.name, properties={key: text})

    def point_alias(self, alias: str) -> None:
        """``alter_alias`` moves an existing alias in one step; a new one is created."""
        try:
            self._request("reading the alias", "describe_alias", alias)
            known = True
        except StoreError:   # no such alias yet
            known = False
        self._request("switching the alias", "alter_alias" if known else "create_alias", self.name, alias)

    def drop(self) -> None:
        self._writable()
        if not self.exists():
            raise NotFound(f"collection not found: {self.display_url}")
        with self._failures("dropping the collection"):
            self._client.drop_collection(self.name, timeout=self.timeout)
        self._schema, self._loaded = None, False
