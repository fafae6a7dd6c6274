"""``qdrant-edge://`` store: a Qdrant Edge shard, the real Qdrant engine embedded in this process (``qdrant-edge-py``).

URL forms::

    qdrant-edge:///ABS/DIR/SHARD        the shard directory (``EdgeShard.create`` / ``EdgeShard.load``)
    qdrant-edge://./REL/DIR/SHARD       relative to the working directory (also ``~/...``)

Query option: ``vector=NAME``, the named vector to read/write (needed only when the shard has several).

A shard is owned by one process (its write-ahead log is locked: the connector declares ``single_process``), so this
process keeps one open ``EdgeShard`` per directory, shared by every URL naming it, flushed and closed at exit. Writes
are durable through the WAL. Indexing (HNSW) is left to the application (``EdgeShard.optimize()``); an unoptimised
shard answers searches exactly.

Named vectors: ``add_vector_field`` adds one to the shard (``UpdateOperation.create_dense_vector``); with several
vectors, records are the points that have the chosen one, and an upsert keeps a point's other vectors.
``with_vector_field(NAME)`` is the shard seen through vector NAME (the URL with ``vector=NAME``), as an in-place
migration uses it: its upserts set only that vector of existing points (``UpdateOperation.update_vectors``: payloads
and other vectors stay as they are) and never create a point: one deleted meanwhile stays deleted.

Stamps: a shard has no metadata of its own, so they live in ``vecbridge_stamps.json`` in the shard's directory
(the engine ignores files it does not know), keyed ``vecbridge:stamp`` (``vecbridge:stamp:NAME`` for named vector
NAME), written whole through a temporary file and a rename; dropping the shard removes it with the directory.

Record stamps (each point's own, ``VectorBatch.stamps``) are two payload keys per vector field, written in the same
update operation as the vector: a whole point's upsert carries them in its payload (keeping those of the other
vectors it keeps); a field view's stamped upsert rewrites each existing point whole (its payload with the new stamp
keys, its other vectors as they are) in one ``upsert_points`` with ``UpdateMode.UpdateOnly``, which never creates a
point (an unstamped one sets the vector alone, ``update_vectors``). ``scan_stamps`` scrolls with a ``MatchAny`` filter
on the origin key, without vectors.

The shard's metric and dimension come from its own ``edge_config.json`` (the engine keeps it current, including
vectors added later). Ids, cursors, sampling and scores follow the ``qdrant://`` connector: unsigned ints and UUIDs
are point ids as they are, other ids become UUID5 point ids with the original kept in the payload under ``_vb_id``
(the same mapping, so records keep their point ids between both stores); ``scroll`` walks points in id order and a
batch's cursor is its last point id; ``key_ranges`` cuts that order at point ids for ``scan(after=, until=)``;
``sample`` draws seeded positions over the exact count, walks ids only to find them and fetches just those points
(the engine's random sample cannot be seeded); Euclid scores are negated.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import threading
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import qdrant_edge as qe

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
from .file import _atomic_write
from .qdrant_points import ID_KEY, QdrantPointsCollection, other_stamp_keys, stamp_payloads, stored_points
from .qdrant_points import TO_METRIC as _TO_METRIC
from .qdrant_points import json_point_id as _pid
from .readonly import readable_path
from .url import known_params, resolved_path

#: the URL query options this store knows (any other is refused)
OPTIONS = ("vector",)
CONFIG_FILE = "edge_config.json"
#: the file in the shard's directory holding its stamps
STAMPS_FILE = "vecbridge_stamps.json"

_TO_DISTANCE = {"cosine": qe.Distance.Cosine, "dot": qe.Distance.Dot, "l2": qe.Distance.Euclid}
_WRITE_CHUNK = 2048    # points per update operation

_SHARDS: dict[str, qe.EdgeShard] = {}
_SHARDS_LOCK = threading.Lock()


@atexit.register
def _close_shards() -> None:
    """Flush and close every shard still open at exit; a shard whose directory was already removed (a temporary
    collection) has nothing left to save, so its error is not raised at interpreter exit."""
    with _SHARDS_LOCK:
        for path, shard in _SHARDS.items():
            try:
                shard.flush()
                shard.close()
            except Exception as exc:  # noqa: BLE001 - at exit: say it in one line, never a traceback
                if os.path.isdir(path):
                    print(f"vecbridge: could not flush the Qdrant Edge shard {path}: {exc}", file=sys.stderr)
        _SHARDS.clear()


class QdrantEdgeCollection(QdrantPointsCollection):
    scheme = "qdrant-edge"
    what = "qdrant-edge shard"
    #: named vectors; the shard's write-ahead log is locked by the one process that opens it
    capabilities = Capabilities(key_ranges=True, named_vectors=True, single_process=True,
                                stamp=f"{STAMPS_FILE} in the shard's directory",
                                record_stamps="two keys of each point's payload (vecbridge_origin, vecbridge_stamp; "
                                              "__NAME appended for named vector NAME)")

    def __init__(self, url: str, *, read_only: bool = False):
        super().__init__(url, read_only=read_only)
        self.params = known_params(url, OPTIONS, "qdrant-edge")
        rest = url.split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
        netloc, _, path = rest.partition("/")
        if netloc and netloc not in (".", "..") and not netloc.startswith("~"):
            raise InputError("expected qdrant-edge:///ABS/DIR/SHARD or qdrant-edge://./REL/DIR/SHARD")
        if not path.strip("/"):
            raise InputError("a qdrant-edge URL needs the shard directory, e.g. qdrant-edge:///data/shard")
        self.path = Path((netloc + "/" if netloc else "/") + unquote(path)).expanduser()
        self.vector_name: str | None = self.params.get("vector")
        self._fields_cache: tuple[int, dict[str, tuple[int, str]]] | None = None

    @property
    def identity(self) -> CollectionIdentity:
        return CollectionIdentity("qdrant-edge", resolved_path(self.path))

    @property
    def vector_field(self) -> str | None:
        return self.vector_name

    @property
    def local_path(self) -> str:
        return resolved_path(self.path)

    def check_writable(self) -> None:
        require_writable(self.path, "the shard")

    # --- shard --------------------------------------------------------------------------------------------------------
    @property
    def _key(self) -> str:
        return os.path.realpath(self.path)

    # --- failures (Collection._call maps them; an in-process engine has nothing to retry) ---------------------------
    _messages = {
        "locked": "{url}: the shard is open in another process (a Qdrant Edge shard has one owner at a time)",
        "error": "{url}: Qdrant Edge failed while {what}: {detail}",
    }

    def _classify(self, exc: Exception) -> tuple[str, str]:
        detail = first_line(exc)
        # the engine raises plain Exception: its words are all there is, and "WouldBlock" is the WAL lock of a
        # shard that another process has open (a missing shard is told by its config file, before any call)
        return ("locked" if "WouldBlock" in detail else "error"), detail

    def _shard(self) -> qe.EdgeShard:
        with _SHARDS_LOCK:
            where = readable_path(self.path, read_only=self.read_only, what="the Qdrant Edge shard")
            key = os.path.realpath(where)   # this shard's own key, or its read-only copy's
            shard = _SHARDS.get(key)
            if shard is None:
                if not self.exists():
                    raise NotFound(f"collection not found: {self.display_url} (no {CONFIG_FILE})")
                shard = _SHARDS[key] = self._call("opening the shard", qe.EdgeShard.load, str(where))
            return shard

    def _fields(self) -> dict[str, tuple[int, str]]:
        """Dense vector fields of the shard: name -> (dim, metric as the engine names it, mapped when known)."""
        config_path = self.path / CONFIG_FILE
        try:
            stamp = config_path.stat().st_mtime_ns
        except OSError:
            raise NotFound(f"collection not found: {self.display_url} (no {CONFIG_FILE})") from None
        if self._fields_cache is None or self._fields_cache[0] != stamp:
            try:
                vectors = json.loads(config_path.read_text())["vectors"]
                fields = {name: (int(p["size"]), _TO_METRIC.get(p["distance"], str(p["distance"]).lower()))
                          for name, p in vectors.items() if not p.get("multivector_config")}
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise StoreError(f"{self.display_url}: unreadable {CONFIG_FILE} ({exc})") from None
            self._fields_cache = (stamp, fields)
        return self._fields_cache[1]

    def _field(self) -> tuple[str, int, str]:
        fields = self._fields()
        listed = ", ".join(repr(n) for n in fields) or "none"
        if self.vector_name is not None:
            if self.vector_name not in fields:
                raise StoreError(f"{self.display_url} has no dense vector named {self.vector_name!r} "
                                 f"(it has: {listed})")
            name = self.vector_name
        elif "" in fields or len(fields) == 1:
            name = "" if "" in fields else next(iter(fields))
        else:
            raise StoreError(f"{self.display_url} has several named vectors ({listed}); choose one with ?vector=NAME")
        dim, metric = fields[name]
        if metric not in _TO_METRIC.values():
            raise StoreError(f"{self.display_url}: vector {name!r} uses {metric} distance, which vecbridge does "
                             f"not support (cosine, dot, l2)")
        return name, dim, metric

    def _filter(self) -> qe.Filter | None:
        """In shards with several vectors a point may lack ours: those points are not records here."""
        fields = self._fields()
        name = self._field()[0]
        return qe.Filter(must=[qe.HasVectorCondition(name)]) if len(fields) > 1 else None

    def _with_vector(self) -> bool | list[str]:
        return True if list(self._fields()) == [""] else [self._field()[0]]

    # --- protocol: reading --------------------------------------------------------------------------------------------
    def exists(self) -> bool:
        return (self.path / CONFIG_FILE).is_file()

    def info(self) -> CollectionInfo:
        _, dim, metric = self._field()
        usable = {n: f for n, f in self._fields().items() if f[1] in _TO_METRIC.values()}
        count = self._call("counting points", self._shard().count, qe.CountRequest(exact=True, filter=self._filter()))
        return CollectionInfo(name=self.path.name, dim=dim, metric=metric, count=int(count), vector_fields=usable)

    def _scroll(self, offset, limit: int, *, full: bool):
        request = qe.ScrollRequest(offset=offset, limit=limit, filter=self._filter(), with_payload=full,
                                   with_vector=self._with_vector() if full else False)
        return self._call("scrolling points", self._shard().scroll, request)

    def _retrieve_points(self, pids: list) -> list:
        return self._call("retrieving points", self._shard().retrieve, pids, with_payload=True,
                          with_vector=self._with_vector())

    def _stamp_scroll(self, offset, limit: int, *, origins: list | None = None, pids: list | None = None):
        name = self._field()[0]
        origin_key, stamp_key = record_stamp_keys(name)
        must: list = [qe.HasVectorCondition(name)] if len(self._fields()) > 1 else []
        if pids is not None:
            must.append(qe.HasIdCondition(set(pids)))
        must_not: list = []
        if origins is None:
            must_not.append(qe.IsEmptyCondition(origin_key))
        else:
            must.append(qe.FieldCondition(origin_key, match=qe.MatchAny(origins)))
        request = qe.ScrollRequest(offset=offset, limit=limit, filter=qe.Filter(must=must, must_not=must_not),
                                   with_payload=[ID_KEY, stamp_key], with_vector=False)
        return self._call("scrolling stamps", self._shard().scroll, request)

    def _query(self, queries: np.ndarray, name: str, k: int) -> list[list]:
        flt, using = self._filter(), name or None
        requests = [qe.QueryRequest(limit=k, query=qe.Query.Nearest(q.tolist(), using=using), with_payload=[ID_KEY],
                                    filter=flt) for q in queries]
        return self._call("searching", self._shard().query_batch, qe.QueryBatchRequest(requests))

    # --- protocol: writing --------------------------------------------------------------------------------------------
    def create(self, dim: int, metric: str = "cosine", *, exist_ok: bool = False,
               index: bool = True) -> "QdrantEdgeCollection":
        dim, metric = self._check_create_args(dim, metric)
        if self.exists():
            self._check_existing(dim, metric, *self._field()[1:], exist_ok=exist_ok)
            return self
        if self.path.exists() and (not self.path.is_dir() or any(self.path.iterdir())):
            raise StoreError(f"{self.path} exists and is not an empty directory; refusing to write into it")
        params = qe.EdgeVectorParams(size=int(dim), distance=_TO_DISTANCE[metric])
        config = qe.EdgeConfig(vectors={self.vector_name: params} if self.vector_name else params)
        with _SHARDS_LOCK:
            _SHARDS[self._key] = self._call("creating the shard", qe.EdgeShard.create, str(self.path), config)
        return self

    def upsert(self, batch: VectorBatch) -> int:
        self._writable()
        name, dim, _ = self._field()
        vectors = self._check_batch(batch, dim)
        if len(batch) == 0:
            return 0
        shard = self._shard()
        single = list(self._fields()) == [name]
        every_payload = stamps_into_payloads(batch, name)  # stamps checked, all before anything is written
        written = 0
        for lo in range(0, len(batch), _WRITE_CHUNK):
            pids, payloads = stored_points(batch.ids[lo:lo + _WRITE_CHUNK], every_payload[lo:lo + _WRITE_CHUNK])
            rows = vectors[lo:lo + _WRITE_CHUNK].tolist()
            if self.keep_payloads:  # a field view: existing points get our vector; a missing one stays missing
                stamps = None if batch.stamps is None else stamp_payloads(payloads, name)
                written += len(pids) - len(self._update_existing(shard, name, pids, rows, stamps))
                continue
            others, kept = ({}, {}) if single else self._other_vectors(shard, name, pids)
            points = [qe.Point(pid, row if single and name == "" else {**others.get(pid, {}), name: row},
                               {**payload, **kept.get(pid, {})})
                      for pid, row, payload in zip(pids, rows, payloads)]
            self._call("writing points", shard.update, qe.UpdateOperation.upsert_points(points))
            written += len(points)
        return written

    def _other_vectors(self, shard: qe.EdgeShard, name: str, pids: list) -> tuple[dict, dict]:
        """The other named vectors existing points have, and those vectors' record stamp keys (an upsert replaces a
        whole point, and writing one vector field must not erase the others): two dicts by point id."""
        keys = other_stamp_keys(self._fields(), name)
        existing = self._call("reading points", shard.retrieve, pids, with_payload=keys or False, with_vector=True)
        others, kept = {}, {}
        for rec in existing:
            current = rec.vector if isinstance(rec.vector, dict) else {"": rec.vector}
            others[_pid(rec.id)] = {k: v for k, v in current.items() if k != name and v is not None}
            kept[_pid(rec.id)] = {k: v for k, v in (rec.payload or {}).items() if k in keys}
        return others, kept

    def _update_existing(self, shard: qe.EdgeShard, name: str, pids: list, rows: list, stamps: list | None) -> set:
        """Set vector ``name`` of the points among ``pids`` that exist, leaving their payloads and other vectors as
        they are (``update_vectors``); with ``stamps``, the vector's record stamp keys with it, in the same
        operation (each point rewritten whole, ``UpdateOnly``: a point deleted meanwhile is not made again; its
        stamp keys removed where its stamp is None). Returns the point ids that do not exist yet."""
        found = self._call("reading points", shard.retrieve, pids, with_payload=stamps is not None,
                           with_vector=stamps is not None)
        existing = {_pid(rec.id): rec for rec in found}
        if stamps is None:
            updates = [qe.PointVectors(pid, row if name == "" else {name: row})
                       for pid, row in zip(pids, rows) if pid in existing]
            if updates:
                self._call("writing vectors", shard.update, qe.UpdateOperation.update_vectors(updates))
        else:
            keys = record_stamp_keys(name)
            points = []
            for pid, row, stamp in zip(pids, rows, stamps):
                rec = existing.get(pid)
                if rec is None:
                    continue
                current = rec.vector if isinstance(rec.vector, dict) else {"": rec.vector}
                vector = {**{k: v for k, v in current.items() if v is not None}, name: row}
                payload = {k: v for k, v in (rec.payload or {}).items() if k not in keys}
                points.append(qe.Point(pid, row if list(vector) == [""] else vector, {**payload, **(stamp or {})}))
            if points:
                self._call("writing vectors", shard.update,
                           qe.UpdateOperation.upsert_points(points, update_mode=qe.UpdateMode.UpdateOnly))
        return {pid for pid in pids if pid not in existing}

    def _delete_points(self, pids: list) -> None:
        self._call("deleting points", self._shard().update, qe.UpdateOperation.delete_points(pids))

    def drop(self) -> None:
        self._writable()
        if not self.exists():
            raise NotFound(f"collection not found: {self.display_url}")
        with _SHARDS_LOCK:
            shard = _SHARDS.pop(self._key, None)
            if shard is not None:
                shard.close()
        shutil.rmtree(self.path)

    # --- stamps: a file in the shard's directory --------------------------------------------------------------------
    def _stamps(self) -> dict:
        """Every stamp of the shard, by key ({} when it has none)."""
        try:
            stamps = json.loads((self.path / STAMPS_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise StoreError(f"{self.display_url}: unreadable {STAMPS_FILE} ({first_line(exc)})") from None
        if not isinstance(stamps, dict):
            raise StoreError(f"{self.display_url}: {STAMPS_FILE} is damaged (not a JSON object); write it again")
        return stamps

    def _load_stamp(self) -> str | None:
        if not self.exists():
            return None
        stamp = self._stamps().get(self._stamp_key())
        return None if stamp is None else json.dumps(stamp)

    def _save_stamp(self, text: str) -> None:
        self._field()  # the shard and the vector exist
        try:
            stamps = self._stamps()
        except StoreError:  # a damaged file: writing a stamp again is its repair
            stamps = {}
        stamps[self._stamp_key()] = json.loads(text)
        try:
            _atomic_write(self.path / STAMPS_FILE, lambda fh: fh.write(json.dumps(stamps).encode("utf-8")))
        except OSError as exc:
            raise StoreError(f"{self.display_url}: cannot write {STAMPS_FILE} ({exc.strerror or exc})") from None

    def add_vector_field(self, name: str, dim: int, metric: str = "cosine") -> None:
        dim, metric = self._check_create_args(dim, metric)
        operation = qe.UpdateOperation.create_dense_vector(name, dim, _TO_DISTANCE[metric])
        self._call("adding a vector field", self._shard().update, operation)
