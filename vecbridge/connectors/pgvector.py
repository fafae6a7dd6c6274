"""``postgresql://`` / ``postgres://`` store: a PostgreSQL table with a pgvector column.

URL::

    postgresql://user[:password]@host:5432/db?table=items[&vector=embedding][&id=id][&payload=payload][&id_type=text]

``table`` may be schema-qualified (``table=myschema.items``). ``vector`` names the vector column this connection
reads and writes (a table may hold several: see :meth:`PgVectorCollection.add_vector_field`), ``id`` the primary
key column, ``payload`` the ``jsonb`` column holding payloads; ``id_type=bigint`` makes :meth:`create` use an integer
key (the default is ``text``; int ids written to a text key come back as strings). Every other query parameter
(``sslmode``, ``connect_timeout``, ...) goes to libpq unchanged, and so do the password sources libpq knows: the URL,
``PGPASSWORD``, ``~/.pgpass``, ``PGSERVICE``. Messages only ever show the redacted URL.

Layout :meth:`create` makes: ``id text PRIMARY KEY, embedding vector(dim), payload jsonb``, an HNSW index with the
metric's operator class, and the metric in a column comment (``vecbridge:metric=cosine``). The comment is what
:meth:`info` reads first because it survives dropping the index (a usual step around bulk loads) and is also set
for dimensions above HNSW's 2000-dimension limit, where no index is built and search is exact; tables made by other
tools fall back to the metric of an HNSW/IVFFlat index on the column, else cosine. A table with no payload column
(a hand-made ``id, content, embedding`` table) reads its other non-vector columns as the payload, and upserts into
it write only ids and vectors.

Bulk paths: reads are binary ``COPY (SELECT ...) TO STDOUT`` (the text protocol is ~17x slower for vectors), scans
are keyset pages ordered by id (the cursor is the last id: it stays valid while other rows change), and upserts
binary-``COPY`` into a temporary table, then ``INSERT ... ON CONFLICT (id) DO UPDATE`` in one transaction, so a
batch is written whole or not at all and writing it twice changes nothing; a batch none of whose ids exist yet (a
new table being filled) is copied straight into the table, which halves the server's work.

Rows whose vector column is NULL (e.g. a field added after they were written) are not part of that field's
collection; :meth:`with_vector_field` gives the collection of another vector column of the same table. Its upserts
are in-place writes into the application's rows: ``UPDATE ... FROM`` a staged batch sets that column of the rows
that exist and nothing else, so a row the application deleted meanwhile stays deleted and other ``NOT NULL``
columns are never in the way (an insert would need their values); they return how many rows they updated.

Stamps (:meth:`~vecbridge.connectors.base.Collection.write_stamp`) live in a side table of the collection's schema,
``vecbridge_stamps (table_name, field, stamp json)``, one row per table and vector column, made on the first write.
``json`` (not ``jsonb``) keeps the text as written, so a stamp reads back exactly. Dropping the table, or one of its
vector columns, deletes its rows in the same transaction, and so does creating a table of that name (a row left by
a table dropped outside vecbridge is not the new table's).

Record stamps (``VectorBatch.stamps``: how each row's vector was made) live in columns of the table beside the
vector column they describe (:mod:`~vecbridge.connectors.pgvector_stamps`): ``vecbridge_origin`` (text: the origin
alone, indexed, what :meth:`scan_stamps` filters on), ``vecbridge_stamp`` (jsonb: a whole stamp) and typed columns
for the fields an upgrade writes, its shared ones kept once in the side table ``vecbridge_stamp_sets``, for the
default vector column ``embedding``; the same names ending in ``__NAME`` for vector column ``NAME``. :meth:`create`
and :meth:`add_vector_field` add them with the vector column (and drop them with it); a table made before gets them on
its first stamped upsert (nullable, no default: an instant catalog change; the origin index then comes with
:meth:`build_index`, not with a write holding the table's lock). They are written in the same ``COPY`` / ``INSERT ...
ON CONFLICT`` / ``UPDATE`` as the vector, are never part of a payload, and a whole row replaced without a stamp loses
its stamp (a field view's update without one keeps it).

Identity: an unqualified ``table`` is the table PostgreSQL finds for this connection (its ``search_path``), so
``?table=docs`` and ``?table=bob.docs`` are one collection for a role ``bob`` whose own schema comes first.
"""
from __future__ import annotations

import getpass
import hashlib
import json
import os
import re
import struct
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, TypeVar
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from ..errors import InputError, NotFound, StoreError
from . import pgvector_stamps as stamp_cols
from .base import (
    Capabilities,
    Collection,
    CollectionIdentity,
    CollectionInfo,
    KeyRange,
    VectorBatch,
    first_line,
    is_stamp_key,
    ranges_from_keys,
)
from .url import canonical_host, query_params, resolved_path

T = TypeVar("T")

#: our URL parameters; everything else in the query string is a libpq parameter
_OWN_PARAMS = ("table", "vector", "id", "payload", "id_type")
#: the vector column a URL without ``vector=`` names; its record stamps are in the columns without a suffix
_DEFAULT_VECTOR = "embedding"
#: PostgreSQL's longest identifier, in bytes (a longer one is cut, so two could meet)
_MAX_IDENT_BYTES = 63
#: seconds a handle trusts its catalog's word that the table has no stamp columns yet (another writer may add them)
_STAMP_RECHECK_S = 5.0
_OPCLASS = {"cosine": "vector_cosine_ops", "dot": "vector_ip_ops", "l2": "vector_l2_ops"}
_METRIC_OF_OPCLASS = {v: k for k, v in _OPCLASS.items()}
#: pgvector distance operators: cosine distance, negative inner product, Euclidean distance
_OPERATOR = {"cosine": "<=>", "dot": "<#>", "l2": "<->"}
_COMMENT = re.compile(r"vecbridge:metric=(\w+)")
_HNSW_MAX_DIM = 2000
_INT_TYPES = {"smallint", "integer", "bigint"}
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_COPY_TRAILER = struct.pack(">h", -1)
#: bytes per COPY write. Small writes keep the server parsing one chunk while we encode the next: a write larger
#: than the socket buffer blocks until the server has nearly drained it, leaving it idle while we encode again.
#: A one-off measurement (100k x 384 into PostgreSQL 18 on 2 cores, medians of 7, 2026-11-22): 5,000-row (8 MB)
#: writes 49k rows/s, 200-2,000-row writes 72-79k rows/s, psycopg's own ``write_row`` loop 65k rows/s.
_COPY_BYTES_PER_WRITE = 1 << 19
#: the side table (in each collection's schema) holding the stamps of its tables
STAMPS_TABLE = "vecbridge_stamps"
_TRANSIENT_SQLSTATES = {"40001", "40P01"}  # serialization failure, deadlock: retrying the transaction is safe


@dataclass
class _Schema:
    """What the catalog says about the table."""

    id_type: str                              # format_type of the id column, e.g. "text", "bigint", "uuid"
    vector_fields: dict[str, tuple[int, str]]  # vector column -> (dim, metric)
    payload_type: str | None                   # format_type of the payload column; None: the table has none
    other_columns: list[str]                   # non-vector columns besides id (the payload when there is none)
    stamp_columns: frozenset[str] = frozenset()  # the record stamp columns the table has (of any vector column)

    @property
    def int_ids(self) -> bool:
        return self.id_type in _INT_TYPES

    @property
    def has_payload(self) -> bool:
        return self.payload_type is not None

    @property
    def binary_compatible(self) -> bool:
        """Whether rows in our binary COPY layout (text/int8 id, jsonb payload) fit the table's own columns."""
        return self.id_type in ("text", "bigint") and self.payload_type in (None, "jsonb")


class _ConnectFailed(Exception):
    """``psycopg.connect`` failed; ``lost``: it was replacing this handle's connection, which had been lost."""

    def __init__(self, exc: psycopg.Error, lost: bool):
        super().__init__(first_line(exc))
        self.lost = lost


class PgVectorCollection(Collection):
    scheme = "postgresql"
    #: extra vector columns, a serving view, an index built after a bulk load; 10,000 rows per upsert: one COPY
    #: stream each, so large batches pay off
    capabilities = Capabilities(key_ranges=True, named_vectors=True, serving_view=True, deferred_index=True,
                                preferred_batch_size=10_000, stamp=f"side table {STAMPS_TABLE} in the table's schema",
                                record_stamps="columns of the table (vecbridge_origin, vecbridge_stamp and "
                                              "vecbridge_stamp_*; with __NAME for vector column NAME), shared "
                                              f"fields in side table {stamp_cols.SETS_TABLE}")

    def __init__(self, url: str, *, read_only: bool = False):
        super().__init__(url, read_only=read_only)
        params = query_params(url)
        self.table = params.get("table", "")
        if not self.table:
            raise InputError(f"{self.display_url}: name the table, e.g. postgresql://user@host:5432/db?table=items")
        self.table_ident = sql.Identifier(*self.table.split(".", 1))
        self.vector_column = params.get("vector", _DEFAULT_VECTOR)
        self.id_column = params.get("id", "id")
        self.payload_column = params.get("payload", "payload")
        self.new_id_type = params.get("id_type", "text").lower()
        if self.new_id_type not in ("text", "bigint"):
            raise InputError(f"id_type must be text or bigint, got {self.new_id_type!r}")
        parts = urlsplit(url)
        libpq = {k: v for k, v in params.items() if k not in _OWN_PARAMS}
        libpq.setdefault("connect_timeout", "5")
        self._conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(libpq), ""))
        self._passwords = [s for s in {parts.password, unquote(parts.password or "")} if s]
        try:   # libpq's own parse, no connection: a misspelled option (?vectr=) is bad input, not a failed connect
            conninfo_to_dict(self._conninfo)
        except psycopg.ProgrammingError as exc:
            raise InputError(f"{self.display_url}: {self._masked(first_line(exc))} (vecbridge's own options: "
                             f"{', '.join(_OWN_PARAMS)}; the others go to libpq)") from None
        #: set on views from with_vector_field: upserts then update the vector of existing rows, never insert
        self.updates_only = False
        self._conn: psycopg.Connection | None = None
        self._schema_cache: _Schema | None = None
        #: when the cached schema was read (see _stamped_schema)
        self._schema_read_at = 0.0
        #: optimistic bulk load: COPY straight into the table until an id conflict shows the rows may exist
        self._rows_are_new = True
        #: the shared stamp fields read or written (set id -> fields): a set never changes
        self._stamp_sets: dict[int, dict] = {}

    @property
    def identity(self) -> CollectionIdentity:
        """Server (host or socket directory, port) and database as libpq resolves them from the URL and its
        defaults, and the schema-qualified table. The schema of an unqualified table is the server's answer for this
        connection (:meth:`_resolved_schema`), so every spelling of one table is one identity whatever the role's
        ``search_path``; a server that cannot be reached is a :class:`StoreError`, never a guess."""
        parts = urlsplit(self.url)
        params = query_params(self.url)
        host = params.get("host") or parts.hostname or os.environ.get("PGHOST") or "localhost"
        try:
            port = params.get("port") or parts.port or os.environ.get("PGPORT") or 5432
        except ValueError:
            port = 5432
        where = resolved_path(host) if host.startswith("/") else canonical_host(host)
        user = unquote(parts.username or "") or os.environ.get("PGUSER") or getpass.getuser()
        database = (unquote(parts.path.strip("/")) or params.get("dbname") or os.environ.get("PGDATABASE")
                    or user)
        schema, _, table = self.table.rpartition(".")
        return CollectionIdentity("postgresql", f"{where}:{port}/{database}",
                                  f"{schema or self._resolved_schema()}.{table}")

    def _resolved_schema(self) -> str:
        """The schema PostgreSQL puts this URL's unqualified table in: that of the table the name finds through the
        connection's ``search_path``, else the one ``CREATE TABLE`` would use (``current_schema()``)."""
        return self._with_conn("look up the table's schema", lambda conn: conn.execute(
            "SELECT coalesce((SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.oid = to_regclass(%s)), current_schema(), 'public')", [self._quoted_table(conn)]).fetchone()[0])

    @property
    def vector_field(self) -> str | None:
        return self.vector_column

    @contextmanager
    def writer_lock(self) -> Iterator[None]:
        """A session advisory lock on the table's identity, held on a connection of its own for the whole job: a
        second writer of the same table, from this machine or any other, is refused (PostgreSQL releases the lock if
        the job's process dies). The holder is named by the ``application_name`` its connection set."""
        key = int.from_bytes(hashlib.sha256(str(self.identity).encode()).digest()[:8], "big", signed=True)
        conn = self._call("connect", self._connect, application_name=f"vecbridge writer pid {os.getpid()}")
        try:
            if not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                row = conn.execute(
                    "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.granted AND "
                    "((l.classid::bigint << 32) | l.objid::bigint) = (%s::bigint & x'FFFFFFFFFFFFFFFF'::bigint)",
                    (key,)).fetchone()
                holder = (row[0].rsplit(" ", 1)[-1] if row and row[0].startswith("vecbridge writer pid ")
                          else "unknown")
                raise StoreError(f"another run is writing this target (pid {holder}): {self.display_url}; wait "
                                 f"for it to finish, or stop it and rerun with --resume")
            yield
        finally:
            conn.close()   # ends the session, which releases the lock

    # --- connection and failures (the retry loop and the mapping are Collection._call's) ---------------------------
    _messages = {
        "connect": "{url}: cannot connect: {detail}",
        "reconnect": "{url}: connection lost while trying to {what}, and reconnecting failed: cannot connect: {detail}",
        "lost": "{url}: connection lost while trying to {what}: {detail}",
        "error": "{url}: cannot {what}: {detail}",
    }

    def _classify(self, exc: Exception) -> tuple[str, str]:
        detail = first_line(exc)
        if isinstance(exc, _ConnectFailed):
            return ("reconnect" if exc.lost else "connect"), detail
        if isinstance(exc, psycopg.errors.UndefinedTable):
            return "missing", detail
        conn = self._conn  # the connection the failed work ran on
        if isinstance(exc, psycopg.Error) and conn is not None and (
                conn.broken or isinstance(exc, psycopg.OperationalError) and conn.closed):
            return "lost", detail
        return ("transient" if getattr(exc, "sqlstate", None) in _TRANSIENT_SQLSTATES else "error"), detail

    def _retried(self, kind: str) -> bool:
        """A connection lost mid-operation (every ``work`` is one statement or one transaction, so repeating it is
        safe: the retry reconnects), or a serialization failure/deadlock. Connecting is not retried, so an
        unreachable host or a wrong password fails at once."""
        return kind in ("lost", "transient")

    def _secrets(self) -> list[str]:
        return self._passwords

    def _connect(self, lost: bool = False, **options) -> psycopg.Connection:
        try:
            return psycopg.connect(self._conninfo, autocommit=True, **options)
        except psycopg.Error as exc:
            raise _ConnectFailed(exc, lost) from None

    def _connection(self) -> psycopg.Connection:
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self._conn = self._connect(lost=self._conn is not None)
        self._ef_search_set = None   # a new session: hnsw.ef_search is back at its default
        self._register_vector_type()
        return self._conn

    def close(self) -> None:
        """Close the connection now (the next call opens a new one)."""
        conn, self._conn = getattr(self, "_conn", None), None
        if conn is not None:
            conn.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter exit psycopg may already be torn down
            pass

    def _register_vector_type(self) -> None:
        """Teach the connection the ``vector`` type (for query parameters), once the extension exists."""
        conn = self._conn
        if conn.execute("SELECT 1 FROM pg_type WHERE typname = 'vector'").fetchone():
            register_vector(conn)

    def _with_conn(self, what: str, work: Callable[[psycopg.Connection], T]) -> T:
        """``work(conn)`` on a live connection, as one :meth:`_call` (a retry after a lost connection reconnects)."""
        return self._call(what, lambda: work(self._connection()))

    # --- catalog ------------------------------------------------------------------------------------------------------
    def _quoted_table(self, conn: psycopg.Connection) -> str:
        return self.table_ident.as_string(conn)

    def exists(self) -> bool:
        return self._with_conn("look up the table", lambda conn: conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL", [self._quoted_table(conn)]).fetchone()[0])

    def _read_schema(self, conn: psycopg.Connection) -> _Schema:
        name = self._quoted_table(conn)
        if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", [name]).fetchone()[0]:
            raise NotFound(f"collection not found: {self.display_url} (no table {self.table})")
        columns = conn.execute(
            "SELECT a.attname, t.typname, a.atttypmod, format_type(a.atttypid, a.atttypmod), "
            "       col_description(a.attrelid, a.attnum) "
            "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            [name]).fetchall()
        index_metric = dict(conn.execute(
            "SELECT a.attname, oc.opcname FROM pg_index i "
            "JOIN pg_opclass oc ON oc.oid = i.indclass[0] "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
            "WHERE i.indrelid = %s::regclass", [name]).fetchall())
        fields, types, others, stamped = {}, {}, [], set()
        for col, typname, typmod, type_text, comment in columns:
            types[col] = type_text
            if typname != "vector":
                if is_stamp_key(col):
                    stamped.add(col)
                elif col != self.id_column:
                    others.append(col)
                continue
            found = _COMMENT.search(comment or "")
            metric = found.group(1) if found else _METRIC_OF_OPCLASS.get(index_metric.get(col, ""), "cosine")
            fields[col] = (int(typmod), metric)
        if self.id_column not in types:
            raise StoreError(f"{self.display_url}: table {self.table} has no id column {self.id_column!r}")
        if self.vector_column not in fields:
            raise StoreError(f"{self.display_url}: table {self.table} has no vector column {self.vector_column!r} "
                             f"(vector columns: {', '.join(fields) or 'none'})")
        if fields[self.vector_column][0] <= 0:
            dim = conn.execute(sql.SQL("SELECT vector_dims({}) FROM {} WHERE {} IS NOT NULL LIMIT 1").format(
                sql.Identifier(self.vector_column), self.table_ident, sql.Identifier(self.vector_column))).fetchone()
            fields[self.vector_column] = (dim[0] if dim else 0, fields[self.vector_column][1])
        return _Schema(types[self.id_column], fields, types.get(self.payload_column), others, frozenset(stamped))

    def _schema(self) -> _Schema:
        if self._schema_cache is None:
            self._schema_cache = self._with_conn("read the table's columns", self._read_schema)
            self._schema_read_at = time.monotonic()
        return self._schema_cache

    def _stamped_schema(self) -> _Schema:
        """The schema for a read of record stamps: read again where the cached one, older than
        :data:`_STAMP_RECHECK_S`, says this field lacks some of its stamp columns (a writer elsewhere may have added
        them since, and a long-lived reader, a serving replica, must see its stamps)."""
        schema = self._schema()
        if (self._lacks_stamp_columns(schema)
                and time.monotonic() - self._schema_read_at > _STAMP_RECHECK_S):
            self._schema_cache = None
            schema = self._schema()
        return schema

    # --- record stamps: columns per vector column (see pgvector_stamps) ---------------------------------------------
    @staticmethod
    def _stamp_columns(column: str) -> dict[str, str]:
        """Role -> name of the record stamp columns of vector column ``column``."""
        return stamp_cols.column_names(None if column == _DEFAULT_VECTOR else column, _MAX_IDENT_BYTES)

    def _has_stamp_columns(self, schema: _Schema, column: str) -> bool:
        """Whether vector column ``column`` has stamps to read: its origin and whole-stamp columns (a table stamped
        before the typed columns has only those)."""
        names = self._stamp_columns(column)
        return {names["origin"], names["stamp"]} <= schema.stamp_columns

    def _lacks_stamp_columns(self, schema: _Schema) -> bool:
        """Whether some stamp column of this handle's vector column is missing (a table made, or stamped, before)."""
        return not set(self._stamp_columns(self.vector_column).values()) <= schema.stamp_columns

    def _stamp_select(self, schema: _Schema) -> list[sql.Composable]:
        """This field's stamp columns in :data:`pgvector_stamps.ROLES` order, NULL for the ones the table lacks."""
        names = self._stamp_columns(self.vector_column)
        return [sql.Identifier(names[role]) if names[role] in schema.stamp_columns else
                sql.SQL("NULL::{}").format(sql.SQL(kind)) for role, kind in stamp_cols.ROLES.items()]

    def _add_stamp_columns(self, conn: psycopg.Connection, column: str) -> None:
        """Add the stamp columns of vector column ``column`` where missing (nullable, no default: no rewrite)."""
        names = self._stamp_columns(column)
        conn.execute(sql.SQL("ALTER TABLE {} {}").format(self.table_ident, sql.SQL(", ").join(
            sql.SQL("ADD COLUMN IF NOT EXISTS {} {}").format(sql.Identifier(names[role]), sql.SQL(kind))
            for role, kind in stamp_cols.ROLES.items())))

    def _create_origin_index(self, conn: psycopg.Connection, column: str) -> None:
        """The btree index on the origin column of vector column ``column``, which :meth:`scan_stamps` filters on."""
        origin = self._stamp_columns(column)["origin"]
        conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
            sql.Identifier("vb_origin_" + hashlib.sha1(f"{self.table}.{origin}".encode()).hexdigest()[:16]),
            self.table_ident, sql.Identifier(origin)))


    def _stamps_from_rows(self, rows: Sequence[Sequence], strict: bool = False) -> list[dict | None]:
        """The stamps of rows read as :meth:`_stamp_select` selects them, reading the shared sets not known yet. A
        row whose set is gone (the side table dropped, or a table restored without it) has no stamp; ``strict``
        (the reads that decide what an upgrade does next) refuses such rows instead of taking them for unstamped."""
        missing = {r[2] for r in rows if r[1] is None and r[2] is not None} - self._stamp_sets.keys()
        if missing:
            table = self._stamps_table(stamp_cols.SETS_TABLE)

            def work(conn: psycopg.Connection) -> list[tuple]:
                if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", [table.as_string(conn)]).fetchone()[0]:
                    return []
                return conn.execute(sql.SQL("SELECT id, shared::text FROM {} WHERE id = ANY(%s)").format(table),
                                    [list(missing)]).fetchall()

            for ident, text in self._with_conn("read shared stamp fields", work):
                shared = stamp_cols.parse_set(text)
                if shared is not None:
                    self._stamp_sets[ident] = shared
            gone = missing - self._stamp_sets.keys()
            lost = sum(r[1] is None and r[2] in gone for r in rows)
            if strict and lost:
                raise StoreError(f"{self.display_url}: {lost:,} records name shared stamp fields that the schema's "
                                 f"{stamp_cols.SETS_TABLE} does not hold, so their stamps cannot be read: restore "
                                 "that table from a backup, or write their stamps again")
        return [stamp_cols.stamp_of(r, self._stamp_sets) for r in rows]

    def _save_stamp_set(self, conn: psycopg.Connection, table: sql.Identifier, ident: int, text: str) -> None:
        """Keep a set of shared stamp fields in side table ``table`` (inside the write's transaction): made once,
        never changed; a set of that id holding other fields (a hash collision) is refused."""
        if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", [table.as_string(conn)]).fetchone()[0]:
            # one creator at a time per schema: two first writes would both try to make the table
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [table.as_string(conn)])
            conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (id int8 PRIMARY KEY, shared json NOT NULL)")
                         .format(table))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s::json) ON CONFLICT (id) DO NOTHING").format(table),
                     [ident, text])
        kept = conn.execute(sql.SQL("SELECT shared::text FROM {} WHERE id = %s").format(table), [ident]).fetchone()
        if kept is None or kept[0] != text:
            raise StoreError(f"{self.display_url}: the shared stamp fields {ident} in {stamp_cols.SETS_TABLE} are not "
                             "the ones this write names")

    def scan_stamps(self, batch_size: int = 1000, origins: Sequence[str] | None = None) -> Iterator[tuple[list, list]]:
        """Keyset pages by id of ``WHERE origin = ANY(origins)`` (``IS NOT NULL`` for any) on this field's origin
        column: the server filters, and neither vectors nor payloads are read."""
        if batch_size <= 0:
            raise InputError("batch_size must be positive")
        origins = None if origins is None else list(dict.fromkeys(origins))
        schema = self._stamped_schema()
        if not self._has_stamp_columns(schema, self.vector_column) or origins == []:
            return
        origin = sql.Identifier(self._stamp_columns(self.vector_column)["origin"])
        ident = sql.Identifier(self.id_column)
        which = sql.SQL("{} IS NOT NULL").format(origin) if origins is None else \
            sql.SQL("{} = ANY(%s::text[])").format(origin)
        base = sql.SQL("SELECT {}, {} FROM {} WHERE {} IS NOT NULL AND {}").format(
            sql.SQL("{}::int8" if schema.int_ids else "{}::text").format(ident),
            sql.SQL(", ").join(self._stamp_select(schema)), self.table_ident, sql.Identifier(self.vector_column),
            which)
        first = sql.SQL("{} ORDER BY {} LIMIT %s").format(base, ident)
        following = sql.SQL("{} AND {} > %s ORDER BY {} LIMIT %s").format(base, ident, ident)
        wanted = [] if origins is None else [origins]
        after = None
        while True:
            query, params = (first, [*wanted, batch_size]) if after is None else \
                (following, [*wanted, after, batch_size])
            rows = self._with_conn("read record stamps", lambda conn: conn.execute(query, params).fetchall())
            found = [(r[0], s) for r, s in zip(rows, self._stamps_from_rows([r[1:] for r in rows], strict=True))
                     if s is not None]
            if found:
                yield [i for i, _ in found], [s for _, s in found]
            if len(rows) < batch_size:
                return
            after = rows[-1][0]

    def stamps_of(self, ids: Sequence) -> dict:
        """This field's stamp columns of the rows with these ids (10,000 per statement), no vectors read."""
        schema = self._stamped_schema()
        keys = list(dict.fromkeys(self._keys(ids, schema)))
        if not keys or not self._has_stamp_columns(schema, self.vector_column):
            return {}
        ident = sql.Identifier(self.id_column)
        origin = sql.Identifier(self._stamp_columns(self.vector_column)["origin"])
        query = sql.SQL("SELECT {}, {} FROM {} WHERE {} = ANY(%s::{}[]) AND {} IS NOT NULL AND {} IS NOT NULL").format(
            sql.SQL("{}::int8" if schema.int_ids else "{}::text").format(ident),
            sql.SQL(", ").join(self._stamp_select(schema)), self.table_ident, ident, sql.SQL(schema.id_type),
            sql.Identifier(self.vector_column), origin)
        found: dict = {}
        for lo in range(0, len(keys), 10_000):
            chunk = keys[lo:lo + 10_000]
            rows = self._with_conn("read record stamps", lambda conn, chunk=chunk: conn.execute(
                query, [chunk]).fetchall())
            found.update((r[0], s) for r, s in zip(rows, self._stamps_from_rows([r[1:] for r in rows], strict=True))
                         if s is not None)
        return found

    def info(self) -> CollectionInfo:
        schema = self._schema()
        dim, metric = schema.vector_fields[self.vector_column]
        count = self._with_conn("count rows", lambda conn: conn.execute(sql.SQL(
            "SELECT count(*) FROM {} WHERE {} IS NOT NULL").format(
            self.table_ident, sql.Identifier(self.vector_column))).fetchone()[0])
        return CollectionInfo(name=self.table, dim=dim, metric=metric, count=int(count),
                              vector_fields=dict(schema.vector_fields))

    # --- reading ------------------------------------------------------------------------------------------------------
    def _select(self, schema: _Schema) -> sql.Composed:
        """``id, vector, payload`` and the stamp columns of this field's rows, in the types the binary COPY decoder
        expects."""
        vec = sql.Identifier(self.vector_column)
        ident = sql.Identifier(self.id_column)
        id_expr = sql.SQL("{}::int8").format(ident) if schema.int_ids else sql.SQL("{}::text").format(ident)
        if schema.has_payload:
            payload = sql.SQL("{}::jsonb").format(sql.Identifier(self.payload_column))
        else:  # the row's other plain columns
            payload = sql.SQL("jsonb_build_object({})").format(sql.SQL(", ").join(
                sql.SQL("{}, {}").format(sql.Literal(c), sql.Identifier(c)) for c in schema.other_columns))
        return sql.SQL("SELECT {}, {}, {}, {} FROM {} WHERE {} IS NOT NULL").format(
            id_expr, vec, payload, sql.SQL(", ").join(self._stamp_select(schema)), self.table_ident, vec)

    def _copy_out(self, query: sql.Composable, params: Sequence, schema: _Schema) -> VectorBatch:
        """Run ``COPY (query) TO STDOUT (FORMAT BINARY)`` and decode it into a batch.

        Vectors are taken as raw bytes (the column is declared ``bytea`` to the decoder) and decoded all at once
        with numpy: pgvector's binary form is ``int16 dim, int16 unused, float4[dim]`` big-endian.
        """
        def work(conn: psycopg.Connection) -> list[tuple]:
            with conn.cursor() as cur:
                with cur.copy(sql.SQL("COPY ({}) TO STDOUT (FORMAT BINARY)").format(query), params) as copy:
                    copy.set_types(["int8" if schema.int_ids else "text", "bytea", "jsonb",
                                    *stamp_cols.ROLES.values()])
                    return list(copy.rows())

        rows = self._with_conn("read vectors", work)
        dim = schema.vector_fields[self.vector_column][0]
        if not rows:
            return VectorBatch([], np.zeros((0, dim), dtype=np.float32), [], stamps=[])
        ids, raw, payloads = zip(*(r[:3] for r in rows))
        blob = np.frombuffer(b"".join(raw), dtype=">f4")
        width = len(raw[0]) // 4
        if blob.size != width * len(raw):
            raise StoreError(f"{self.display_url}: column {self.vector_column} holds vectors of different dimensions")
        vectors = blob.reshape(len(raw), width)[:, 1:].astype(np.float32)
        return VectorBatch(list(ids), vectors, [p if isinstance(p, dict) else {} for p in payloads],
                           stamps=self._stamps_from_rows([r[3:] for r in rows]))

    def sample(self, n: int, seed: int = 0) -> VectorBatch:
        """``n`` rows in the order of a seeded 64-bit hash of their ids (``hashtextextended``), then fetched by id.

        Why not ``TABLESAMPLE``: ``SYSTEM`` draws whole pages (clustered, not uniform), ``BERNOULLI`` returns a
        random *number* of rows, and both depend on the physical layout, so the same seed gives another sample
        after a ``VACUUM FULL`` or a restore. Ranking by a seeded hash is a uniform random permutation of the ids
        that depends only on the ids and the seed. The server reads ids only; just the ``n`` picked rows travel.
        """
        if n <= 0:
            raise InputError("sample size must be positive")
        ident = sql.Identifier(self.id_column)
        query = sql.SQL("SELECT {} FROM {} WHERE {} IS NOT NULL ORDER BY hashtextextended({}::text, %s), {} "
                        "LIMIT %s").format(ident, self.table_ident, sql.Identifier(self.vector_column), ident, ident)
        picked = self._with_conn("sample ids", lambda conn: [r[0] for r in conn.execute(
            query, [int(seed), int(n)]).fetchall()])
        return self.get(picked)

    def scan(self, batch_size: int = 1000, after: Any = None, until: Any = None) -> Iterator[VectorBatch]:
        """Keyset pages in id order (the column's own order: its type's, and its collation for text); each batch's
        cursor is its last id; ``until`` stops after that id."""
        if batch_size <= 0:
            raise InputError("batch_size must be positive")
        schema = self._stamped_schema()
        ident = sql.Identifier(self.id_column)
        for cursor in (after, until):
            if cursor is not None and schema.int_ids and not isinstance(cursor, int):
                raise InputError(f"invalid scan cursor {cursor!r} for a table with integer ids")
        upto = sql.SQL(" AND {} <= %s").format(ident) if until is not None else sql.SQL("")
        extra = [until] if until is not None else []
        first = sql.SQL("{}{} ORDER BY {} LIMIT %s").format(self._select(schema), upto, ident)
        following = sql.SQL("{} AND {} > %s{} ORDER BY {} LIMIT %s").format(self._select(schema), ident, upto, ident)
        while True:
            if after is None:
                batch = self._copy_out(first, [*extra, batch_size], schema)
            else:
                batch = self._copy_out(following, [after, *extra, batch_size], schema)
            if not len(batch):
                return
            after = batch.cursor = batch.ids[-1]
            yield batch
            if len(batch) < batch_size:
                return

    def key_ranges(self, n: int, seed: int = 0) -> list[KeyRange]:
        """Cut at quantiles of a seeded sample of ids (the hash order of :meth:`sample`, about 64 per range), sorted
        by the server in the order :meth:`scan` uses, so that a text id's collation is the scan's."""
        if int(n) <= 0:
            raise InputError(f"number of ranges must be positive, got {n}")
        schema = self._schema()
        ident = sql.Identifier(self.id_column)
        id_expr = sql.SQL("{}::int8" if schema.int_ids else "{}::text").format(ident)
        query = sql.SQL("SELECT {} FROM (SELECT {} FROM {} WHERE {} IS NOT NULL ORDER BY hashtextextended({}::text, "
                        "%s), {} LIMIT %s) s ORDER BY {}").format(
            id_expr, ident, self.table_ident, sql.Identifier(self.vector_column), ident, ident, ident)
        keys = self._with_conn("sample ids", lambda conn: [r[0] for r in conn.execute(
            query, [int(seed), max(64 * int(n), 1000)]).fetchall()])
        return ranges_from_keys(keys, n)

    def get(self, ids: Sequence) -> VectorBatch:
        schema = self._stamped_schema()
        keys = self._keys(ids, schema)
        query = sql.SQL("{} AND {} = ANY(%s::{}[])").format(
            self._select(schema), sql.Identifier(self.id_column), sql.SQL(schema.id_type))
        found = VectorBatch.concat([self._copy_out(query, [keys[lo:lo + 10_000]], schema)
                                    for lo in range(0, len(keys), 10_000)])
        where = {i: r for r, i in enumerate(found.ids)}
        rows = [where[k] for k in dict.fromkeys(keys) if k in where]
        if not rows:
            return VectorBatch([], np.zeros((0, schema.vector_fields[self.vector_column][0]), np.float32), [],
                               stamps=[])
        return found.take(np.asarray(rows, dtype=np.int64))

    def _keys(self, ids: Sequence, schema: _Schema) -> list:
        if not schema.int_ids:
            return [str(i) for i in ids]
        try:
            return [int(i) for i in ids]
        except (TypeError, ValueError):
            raise InputError(f"table {self.table} has integer ids; got a non-integer id") from None

    def search(self, vectors, k: int = 10) -> tuple[list[list], np.ndarray]:
        """Batched k-NN in one statement: a ``LATERAL`` index scan per query vector. The query vectors travel in
        binary (pgvector's text form costs a Python ``str`` per coordinate: a fifth of a service's CPU per search).

        ``hnsw.ef_search`` (the candidate list, 40 by default) is raised to ``2k`` (100 to 1000) so that recall
        does not collapse for larger ``k``; an HNSW scan never returns more than ``ef_search`` rows.
        """
        schema = self._schema()
        dim, metric = schema.vector_fields[self.vector_column]
        queries = np.asarray(vectors, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != dim:
            raise InputError(f"query vectors must have dimension {dim}, got shape {queries.shape}")
        vec = sql.Identifier(self.vector_column)
        distance = sql.SQL("{} {} q.v").format(vec, sql.SQL(_OPERATOR[metric]))
        query = sql.SQL(
            "SELECT q.n, r.id, r.d FROM unnest(%b::vector[]) WITH ORDINALITY AS q(v, n) "
            "CROSS JOIN LATERAL (SELECT {} AS id, {} AS d FROM {} ORDER BY {} LIMIT %s) r "
            "WHERE r.d IS NOT NULL ORDER BY q.n, r.d").format(
            sql.SQL("{}::int8" if schema.int_ids else "{}::text").format(sql.Identifier(self.id_column)),
            distance, self.table_ident, distance)

        def work(conn: psycopg.Connection) -> list[tuple]:
            self._ef_search(conn, min(1000, max(100, 2 * k)))
            return conn.execute(query, [list(queries), int(k)]).fetchall()

        rows = self._with_conn("search", work) if len(queries) else []
        ids: list[list] = [[] for _ in range(len(queries))]
        distances: list[list[float]] = [[] for _ in range(len(queries))]
        for n, i, d in rows:
            ids[n - 1].append(i)
            distances[n - 1].append(d)
        width = max((len(r) for r in ids), default=0)
        scores = np.full((len(queries), width), -np.inf, dtype=np.float32)
        for row, ds in enumerate(distances):
            d = np.asarray(ds, dtype=np.float64)
            # higher is better: cosine similarity, dot product, negative squared L2 (as vecbridge.metrics)
            scores[row, :len(d)] = 1.0 - d if metric == "cosine" else -d if metric == "dot" else -(d * d)
        return ids, scores

    def _ef_search(self, conn: psycopg.Connection, value: int) -> None:
        """``hnsw.ef_search`` for this connection's session, set only when it changes: a search is then one round
        trip, not four (a transaction around ``SET LOCAL``: BEGIN, SET, SELECT, COMMIT)."""
        if getattr(self, "_ef_search_set", None) != value:
            conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(int(value))))
            self._ef_search_set = value

    # --- writing ------------------------------------------------------------------------------------------------------

    def create(self, dim: int, metric: str = "cosine", *, exist_ok: bool = False,
               index: bool = True) -> "PgVectorCollection":
        """Create the table with an HNSW index for the metric (no index above 2000 dimensions: search is exact).

        ``index=False`` leaves the index to :meth:`build_index` after a bulk load (about 5x faster than
        maintaining the HNSW graph row by row while loading)."""
        dim, metric = self._check_create_args(dim, metric)
        if self.exists():
            info = self.info()
            self._check_existing(dim, metric, info.dim, info.metric, exist_ok=exist_ok)
            return self
        stamps = self._stamps_table()

        def work(conn: psycopg.Connection) -> None:
            with conn.transaction():
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                conn.execute(sql.SQL("CREATE TABLE {} ({} {} PRIMARY KEY, {} jsonb)").format(
                    self.table_ident, sql.Identifier(self.id_column), sql.SQL(self.new_id_type),
                    sql.Identifier(self.payload_column)))
                self._add_vector_column(conn, self.vector_column, int(dim), metric, index=index)
                self._forget_stamps(conn, stamps)

        self._with_conn("create the table", work)
        self._register_vector_type()
        self._schema_cache = None
        return self

    def _add_vector_column(self, conn: psycopg.Connection, name: str, dim: int, metric: str,
                           index: bool = True) -> None:
        column = sql.Identifier(name)
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} vector({})").format(
            self.table_ident, column, sql.Literal(dim)))
        conn.execute(sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(
            self.table_ident, column, sql.Literal(f"vecbridge:metric={metric}")))
        # a new vector column's record stamps start empty, whatever columns of those names were left behind
        names = self._stamp_columns(name)
        conn.execute(sql.SQL("ALTER TABLE {} {}").format(self.table_ident, sql.SQL(", ").join(
            sql.SQL("DROP COLUMN IF EXISTS {}").format(sql.Identifier(names[role])) for role in stamp_cols.ROLES)))
        self._add_stamp_columns(conn, name)
        if index:
            self._create_index(conn, name, dim, metric)
            self._create_origin_index(conn, name)

    def _index_name(self, column: str) -> str:
        return "vb_hnsw_" + hashlib.sha1(f"{self.table}.{column}".encode()).hexdigest()[:16]

    def _create_index(self, conn: psycopg.Connection, column: str, dim: int, metric: str) -> None:
        if dim <= _HNSW_MAX_DIM:
            conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw ({} {})").format(
                sql.Identifier(self._index_name(column)), self.table_ident, sql.Identifier(column),
                sql.SQL(_OPCLASS[metric])))

    def build_index(self) -> None:
        """Create the HNSW index of this view's vector column, and that of its record stamps' origin column, where
        missing (after a bulk load)."""
        self._writable()
        self._schema_cache = None   # the stamp columns a writer may have added since
        info = self.info()
        stamped = self._has_stamp_columns(self._schema(), self.vector_column)

        def work(conn: psycopg.Connection) -> None:
            with conn.transaction():
                self._create_index(conn, self.vector_column, info.dim, info.metric)
                if stamped:
                    self._create_origin_index(conn, self.vector_column)

        self._with_conn("build the index", work)

    def serving_view(self, column: str) -> str:
        """Point the view ``<table>_serving`` at vector column ``column`` (exposed under this handle's vector column
        name, so an application that reads the view keeps its query), in one transaction: readers see the old view
        or the new one, never neither. The record stamps of ``column``, where it has them, come under this handle's
        stamp column names likewise. Returns the view's name."""
        self._schema_cache = None   # the columns as they are now (stamp columns a writer added included)
        if column not in self._schema().vector_fields:
            raise StoreError(f"{self.display_url}: no vector column {column!r}")
        schema, _, table = self.table.rpartition(".")
        view = sql.Identifier(*([schema] if schema else []), f"{table}_serving")
        others = [sql.Identifier(c) for c in [self.id_column, *self._schema().other_columns]]
        if self._has_stamp_columns(self._schema(), column):
            aliases = self._stamp_columns(self.vector_column)
            others += [sql.SQL("{} AS {}").format(sql.Identifier(c), sql.Identifier(aliases[role]))
                       for role, c in self._stamp_columns(column).items() if c in self._schema().stamp_columns]

        def work(conn: psycopg.Connection) -> None:
            with conn.transaction():
                conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(view))
                conn.execute(sql.SQL("CREATE VIEW {} AS SELECT {}, {} AS {} FROM {}").format(
                    view, sql.SQL(", ").join(others), sql.Identifier(column), sql.Identifier(self.vector_column),
                    self.table_ident))

        self._with_conn("switch the serving view", work)
        return f"{schema + '.' if schema else ''}{table}_serving"

    def add_vector_field(self, name: str, dim: int, metric: str = "cosine") -> None:
        """``ALTER TABLE ... ADD COLUMN name vector(dim)`` plus its index; open it with ``?vector=name``."""
        dim, metric = self._check_create_args(dim, metric)
        if name in self._schema().vector_fields:
            raise StoreError(f"{self.display_url}: vector column {name!r} already exists")

        def work(conn: psycopg.Connection) -> None:
            with conn.transaction():
                self._add_vector_column(conn, name, dim, metric)

        self._with_conn("add a vector column", work)
        self._schema_cache = None

    def drop_vector_field(self, name: str) -> None:
        """``ALTER TABLE ... DROP COLUMN name`` (with its index and its record stamp columns); the table's last
        vector column stays."""
        self._writable()
        fields = self._schema().vector_fields
        if name not in fields:
            raise StoreError(f"{self.display_url}: no vector column {name!r}")
        if len(fields) == 1:
            raise StoreError(f"{self.display_url}: {name!r} is the table's only vector column")
        stamps = self._stamps_table()

        def work(conn: psycopg.Connection) -> None:
            with conn.transaction():
                conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN {}, {}").format(
                    self.table_ident, sql.Identifier(name), sql.SQL(", ").join(
                        sql.SQL("DROP COLUMN IF EXISTS {}").format(sql.Identifier(c))
                        for c in self._stamp_columns(name).values())))
                self._forget_stamps(conn, stamps, name)

        self._with_conn("drop a vector column", work)
        self._schema_cache = None

    def with_vector_field(self, name: str) -> "PgVectorCollection":
        """The same table seen through vector column ``name`` (the URL with ``vector=name``).

        Its upserts set that column of the rows that exist and touch nothing else (an in-place write: ids without
        a row, e.g. rows the application deleted during the write, are skipped, and no row is ever added).
        """
        parts = urlsplit(self.url)
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "vector"]
        view = PgVectorCollection(urlunsplit(parts._replace(query=urlencode(query + [("vector", name)]))),
                                  read_only=self.read_only)
        view.updates_only = True
        return view

    def upsert(self, batch: VectorBatch) -> int:
        """Insert or replace the batch's rows (see the module's notes on the bulk path), each with its record stamp
        in the same statement where the batch has stamps (without them a replaced row's stamp of this vector column
        is cleared, and a view's update keeps it). On a :meth:`with_vector_field` view: set the vector (and stamp)
        of the rows that exist, and return how many those were."""
        self._writable()
        schema = self._schema()
        dim = schema.vector_fields[self.vector_column][0]
        vectors = self._check_batch(batch, dim or None)  # 0: an empty column declared without a dimension
        if len(batch) == 0:
            return 0
        keys = self._keys(batch.ids, schema)
        if len(set(keys)) != len(keys):
            raise InputError("batch contains duplicate ids")
        # a bad stamp: nothing is written
        stamps = None if batch.stamps is None else stamp_cols.copy_fields(batch.stamps)
        with_payload = schema.has_payload and not self.updates_only
        payloads = batch.payloads if with_payload else None
        vec, ident = sql.Identifier(self.vector_column), sql.Identifier(self.id_column)
        names = self._stamp_columns(self.vector_column)
        fixed, rows = (list(stamps.fixed), list(stamps.rows)) if stamps is not None else ([], [])
        # the row's fields: the vector and the fixed-width stamp fields (laid out together), then the others
        written = [vec, *(sql.Identifier(names[r]) for r in fixed), ident,
                   *([sql.Identifier(self.payload_column)] if with_payload else []),
                   *(sql.Identifier(names[r]) for r in rows)]
        # the staging table's columns: v, id, p and each stamp column under its role's name
        staged = [sql.Identifier(c) for c in ["v", *fixed, "id", *(["p"] if with_payload else []), *rows]]
        columns = sql.SQL(", ").join(written)
        stage = sql.Identifier("_vecbridge_stage")
        shared = stamps.shared if stamps is not None and stamps.shared and \
            stamps.shared[0] not in self._stamp_sets else None
        sets_table = self._stamps_table(stamp_cols.SETS_TABLE) if shared else None

        def cleared(cur: psycopg.Cursor) -> list[sql.Composable]:
            """The stamp columns a write sets to NULL: those it does not write (all of them without stamps), where
            the table has them now (a writer elsewhere may have added them)."""
            unwritten = [names[r] for r in stamp_cols.ROLES if stamps is None or r not in stamps.roles]
            if stamps is None and not set(unwritten) <= schema.stamp_columns:
                unwritten = [r[0] for r in cur.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attname = ANY(%s) AND "
                    "NOT attisdropped", [self._quoted_table(cur.connection), unwritten]).fetchall()]
            return [sql.Identifier(c) for c in unwritten]

        def merge(cur: psycopg.Cursor) -> sql.Composed:
            """``INSERT ... ON CONFLICT`` from the stage; a replaced row's unwritten stamp columns are emptied."""
            sets = [sql.SQL("{} = EXCLUDED.{}").format(c, c) for c in written if c != ident]
            sets += [sql.SQL("{} = NULL").format(c) for c in cleared(cur)]
            return sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) DO UPDATE SET {}").format(
                self.table_ident, columns, sql.SQL(", ").join(
                    sql.SQL("{}::{}").format(c, sql.SQL(schema.id_type)) if c == sql.Identifier("id") else c
                    for c in staged),
                stage, ident, sql.SQL(", ").join(sets))

        def update(cur: psycopg.Cursor) -> sql.Composed:
            """An in-place write: rows that exist get the vector (and stamp), and nothing is inserted (an INSERT ...
            ON CONFLICT would bring back rows deleted meanwhile, and fails on any other NOT NULL column before it
            sees the key). Without stamps, a row's stamp is kept."""
            sets = [sql.SQL("{} = s.{}").format(c, n) for c, n in zip(written, staged) if c != ident]
            sets += [sql.SQL("{} = NULL").format(c) for c in cleared(cur)] if stamps is not None else []
            return sql.SQL("UPDATE {} t SET {} FROM {} s WHERE t.{} = s.id::{}").format(
                self.table_ident, sql.SQL(", ").join(sets), stage, ident, sql.SQL(schema.id_type))

        any_exists = sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {} = ANY(%s::{}[]))").format(
            self.table_ident, ident, sql.SQL(schema.id_type))
        add_columns = stamps is not None and self._lacks_stamp_columns(schema)

        def copy_in(cur: psycopg.Cursor, statement: sql.Composable) -> None:
            """Stream the batch in binary COPY format, encoding (payload JSON included) and formatting each chunk
            while the server parses the last. A payload that is not JSON aborts the transaction: nothing is written."""
            with cur.copy(statement) as cp:
                cp.write(_COPY_HEADER)
                step = max(16, _COPY_BYTES_PER_WRITE // (4 * vectors.shape[1] + 64))
                for lo in range(0, len(keys), step):
                    hi = lo + step
                    fields = [_jsonb_fields(_json_payloads(payloads[lo:hi]))] if payloads is not None else []
                    fields += [stamps.rows[r][lo:hi] for r in rows]
                    cp.write(_copy_rows(vectors[lo:hi], keys[lo:hi], schema.int_ids, *fields,
                                        fixed=[stamps.fixed[r][lo:hi] for r in fixed]))
                cp.write(_COPY_TRAILER)

        def work(conn: psycopg.Connection) -> int:
            with conn.transaction(), conn.cursor() as cur:
                if add_columns:   # a table made before record stamps: its first stamped write adds them
                    self._add_stamp_columns(conn, self.vector_column)
                if shared:
                    self._save_stamp_set(conn, sets_table, *shared)
                # While every batch so far was new (filling a new table, the usual bulk case) COPY straight in and
                # let the primary key catch a repeat; after a conflict, look before writing (one indexed probe).
                direct = schema.binary_compatible and not self.updates_only
                if direct and (self._rows_are_new or not cur.execute(any_exists, [keys]).fetchone()[0]):
                    try:
                        with conn.transaction():
                            copy_in(cur, sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
                                self.table_ident, columns))
                        return len(keys)
                    except psycopg.errors.UniqueViolation:
                        self._rows_are_new = False  # some ids exist (a resumed or repeated write): merge
                cur.execute(sql.SQL("CREATE TEMP TABLE {} (v vector({}), id {}, p jsonb, {}) ON COMMIT DROP").format(
                    stage, sql.Literal(dim), sql.SQL("int8" if schema.int_ids else "text"), sql.SQL(", ").join(
                        sql.SQL("{} {}").format(sql.Identifier(r), sql.SQL(kind))
                        for r, kind in stamp_cols.ROLES.items())))
                copy_in(cur, sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
                    stage, sql.SQL(", ").join(staged)))
                if self.updates_only:
                    return cur.execute(update(cur)).rowcount
                cur.execute(merge(cur))
                return len(keys)

        written_rows = self._with_conn("write vectors", work)
        if shared:   # kept now (a set is remembered only once its transaction committed)
            self._stamp_sets[shared[0]] = stamp_cols.parse_set(shared[1])
        if add_columns:
            self._schema_cache = None
        return written_rows

    def delete(self, ids: Sequence) -> int:
        """``DELETE FROM table WHERE id = ANY(%s::<id type>[])``, 10,000 ids per statement (each its own
        transaction, retried after a lost connection: deleting twice is harmless). Whole rows go, whichever vector
        column this handle reads. Ids are converted as :meth:`get` converts them (a non-integer id for an integer
        key is refused)."""
        wanted = self._ids_to_delete(ids)
        schema = self._schema()
        keys = list(dict.fromkeys(self._keys(wanted, schema)))
        statement = sql.SQL("DELETE FROM {} WHERE {} = ANY(%s::{}[])").format(
            self.table_ident, sql.Identifier(self.id_column), sql.SQL(schema.id_type))
        for lo in range(0, len(keys), 10_000):
            chunk = keys[lo:lo + 10_000]
            self._with_conn("delete rows", lambda conn, chunk=chunk: conn.execute(statement, [chunk]))
        return len(wanted)

    def drop(self) -> None:
        self._writable()
        if not self.exists():
            raise NotFound(f"collection not found: {self.display_url}")
        stamps = self._stamps_table()

        def work(conn: psycopg.Connection) -> None:
            with conn.transaction():
                conn.execute(sql.SQL("DROP TABLE {}").format(self.table_ident))
                self._forget_stamps(conn, stamps)

        self._with_conn("drop the table", work)
        self._schema_cache = None

    # --- stamps: a side table ---------------------------------------------------------------------------------------
    def _stamps_table(self, name: str = STAMPS_TABLE) -> sql.Identifier:
        """The stamps side table (or another side table ``name``) of the schema this table is (or would be created)
        in."""
        schema = self.table.rpartition(".")[0] or self._resolved_schema()
        return sql.Identifier(schema, name)

    def _forget_stamps(self, conn: psycopg.Connection, stamps: sql.Identifier, field: str | None = None) -> None:
        """Delete this table's stamps (one vector column's, with ``field``), where the side table exists."""
        if conn.execute("SELECT to_regclass(%s) IS NOT NULL", [stamps.as_string(conn)]).fetchone()[0]:
            which = sql.SQL(" AND field = %s" if field is not None else "")
            conn.execute(sql.SQL("DELETE FROM {} WHERE table_name = %s{}").format(stamps, which),
                         [self.table.rpartition(".")[2], *([field] if field is not None else [])])

    def _load_stamp(self) -> str | None:
        stamps = self._stamps_table()

        def work(conn: psycopg.Connection) -> str | None:
            if not conn.execute("SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
                                [self._quoted_table(conn), stamps.as_string(conn)]).fetchone()[0]:
                return None
            row = conn.execute(sql.SQL("SELECT stamp::text FROM {} WHERE table_name = %s AND field = %s").format(
                stamps), [self.table.rpartition(".")[2], self.vector_column]).fetchone()
            return row[0] if row else None

        return self._with_conn("read the stamp", work)

    def _save_stamp(self, text: str) -> None:
        self._schema()   # the table and this vector column exist
        stamps = self._stamps_table()

        def work(conn: psycopg.Connection) -> None:
            with conn.transaction():
                if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", [self._quoted_table(conn)]).fetchone()[0]:
                    raise NotFound(f"collection not found: {self.display_url} (no table {self.table})")
                conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (table_name text, field text, stamp json NOT NULL, "
                                     "PRIMARY KEY (table_name, field))").format(stamps))
                conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s::json) ON CONFLICT (table_name, field) "
                                     "DO UPDATE SET stamp = EXCLUDED.stamp").format(stamps),
                             [self.table.rpartition(".")[2], self.vector_column, text])

        self._with_conn("write the stamp", work)


def _json_payloads(payloads: list) -> list[bytes]:
    try:
        return [json.dumps(p, ensure_ascii=False, separators=(",", ":")).encode() for p in payloads]
    except (TypeError, ValueError) as exc:
        raise InputError(f"payloads must be JSON-serialisable ({exc})") from None


def _jsonb_fields(texts: list[bytes]) -> list[bytes]:
    """JSON texts as ``jsonb`` fields of a binary COPY row."""
    return [stamp_cols.copy_jsonb(t) for t in texts]


def _copy_rows(vectors: np.ndarray, keys: list, int_ids: bool, *columns: list[bytes],
               fixed: Sequence[np.ndarray] = ()) -> bytes:
    """Rows of a binary COPY into ``(v vector, <fixed>, id text|int8, <columns>)``, without the header and trailer;
    ``fixed``: further fields of the same width in every row, one ``(n, width)`` uint8 array each, and ``columns``:
    further fields, one encoded field per row (length and value, see :func:`_jsonb_fields`).

    The fixed-size start of every row (field count, vector length, dim, float4 big-endian values, the fixed fields)
    is laid out by numpy in one go; only the id and the further fields are appended per row.
    """
    n, dim = vectors.shape
    head = struct.pack(">hihh", 2 + len(fixed) + len(columns), 4 + 4 * dim, dim, 0)
    start = len(head) + 4 * dim
    block = np.empty((n, start + sum(f.shape[1] for f in fixed)), dtype=np.uint8)
    block[:, :len(head)] = np.frombuffer(head, dtype=np.uint8)
    block[:, len(head):start] = np.ascontiguousarray(vectors, dtype=">f4").view(np.uint8).reshape(n, 4 * dim)
    for field in fixed:
        block[:, start:start + field.shape[1]] = field
        start += field.shape[1]
    width = block.shape[1]
    flat = memoryview(block.reshape(-1))
    rows = [flat[i * width:(i + 1) * width] for i in range(n)]
    if int_ids:
        id_fields = [struct.pack(">iq", 8, k) for k in keys]
    else:
        encoded = [k.encode() for k in keys]
        id_fields = [stamp_cols.copy_field(b) for b in encoded]
    parts: list = []
    for i in range(n):
        parts += (rows[i], id_fields[i], *(c[i] for c in columns))
    return b"".join(parts)
