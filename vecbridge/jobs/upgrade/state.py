"""The state of one model upgrade: a small SQLite file that says where it stands and how each record's new vector
was made.

Tables: ``meta`` (one JSON document: the collections, the models, the stage), ``records`` (one row per record,
with ``made_by``: the alignment's fingerprint or the model's name, and ``digest``: a hash of the old vector and the
text the new vector was made from), ``reference`` (new-model query vectors the hub scores are measured against),
``events`` (the stage history) and ``fit_sample`` (the ids, digests, old and new vectors of the records ``start``
re-embedded to fit the map: an interrupted start continues with them). A record's ``origin`` is ``mapped`` (the
alignment applied to its old vector), ``native`` (the new model run on its text), ``pending`` (added or changed
in the source since its new vector was made: it holds the map of its current old vector and is re-embedded first)
or ``no-text`` (no text to embed: it keeps its mapped vector). Every write is one transaction (a whole batch of
stamps commits at once: one disk sync per batch, not per record), so a run killed at any point leaves a consistent
file: a batch is stamped only after it was written to the store.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Iterable

import numpy as np

from ...errors import InputError
from ...runtime.guard import run_lock
from ...secrets import redact_text

ORIGINS = ("mapped", "native", "pending", "no-text")
#: re-embedding orders (after the pending records): column that scores a record, higher first
PRIORITIES = {"random": None, "residual": "residual", "hubs": "hubness", "queries": "query_hits"}
#: per-record columns added since the first state files (added on open)
_SCORE_COLUMNS = ("residual", "hubness", "query_hits", "digest")


#: what every state's document holds: key -> accepted types (checked on open: a damaged file is refused in one line)
_META_TYPES = {"source": (str,), "stage": (str,), "serving": (str,), "model": (str,), "text_field": (str,),
               "alignment": (str,), "field": (str, type(None)), "target": (str, type(None))}

_FIT_SAMPLE_TABLE = ("CREATE TABLE fit_sample (ids TEXT NOT NULL, digests TEXT NOT NULL, old BLOB NOT NULL, "
                     "old_dim INTEGER NOT NULL, new BLOB NOT NULL, new_dim INTEGER NOT NULL)")


def exclusive(path) -> contextlib.AbstractContextManager:
    """Make this run the only one working on the upgrade whose state file is ``path`` (held for the whole command;
    :func:`vecbridge.runtime.guard.run_lock` on the state's resolved path, released by the kernel when the process
    dies): a second run is refused at once (:class:`StoreError`, one line naming the holder's pid)."""
    return run_lock(f"upgrade:{Path(path).resolve()}", lambda pid: (
        f"another run is working on this upgrade (pid {pid}, state {path}): wait for it to finish, or stop it and "
        f"run the command again"))


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE"):
    """One transaction around a group of writes. The connection is in autocommit mode (``isolation_level=None``),
    where ``with db:`` begins nothing and each row of an ``executemany`` commits (and syncs the disk) on its own:
    2,000 stamps took seconds. Here they commit together, or not at all. (``begin="BEGIN"``: writes to temporary
    tables only, which a read-only state file allows.)"""
    db.execute(begin)
    try:
        yield db
    except BaseException:
        if db.in_transaction:   # SQLite may have rolled back already (a full disk, an I/O error)
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _document(path, row) -> dict:
    """The state's document from its ``meta`` row, refused in one line (naming the file) unless it is a JSON object
    holding every key the upgrade reads, each of the right type."""
    def damaged(why: str) -> InputError:
        return InputError(f"{path} is not a usable upgrade state file ({why}): restore it from a backup, or start "
                          f"the upgrade again with another --state")
    if row is None:
        raise damaged("its meta row is missing")
    try:
        doc = json.loads(row[0])
    except (TypeError, ValueError) as exc:
        raise damaged(f"its meta row is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise damaged(f"its meta row is a JSON {type(doc).__name__}, not an object")
    missing = [k for k in _META_TYPES if k not in doc and k not in ("field", "target")]
    if missing:
        raise damaged(f"its meta document lacks {', '.join(missing)}")
    wrong = [k for k, types in _META_TYPES.items() if k in doc and not isinstance(doc[k], types)]
    if wrong:
        raise damaged(f"its meta document holds a value of the wrong type in {', '.join(wrong)}")
    if not (doc.get("field") or doc.get("target")):
        raise damaged("its meta document names neither a vector field nor a collection for the new vectors")
    return doc


def _key(record_id) -> str:
    """Ids keep their type (int or str) through the file: stored as JSON."""
    return json.dumps(record_id)


def _shuffle(key: str) -> int:
    """A fixed pseudo-random rank per record: the ``random`` priority order, the same in every run."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=7).digest(), "big")


def record_digest(vector, text) -> str:
    """What a record's new vector was made from: its old vector (bit for bit) and its text. A different digest at
    the next sync means the application changed the record, so its new vector is stale."""
    h = hashlib.blake2b(np.ascontiguousarray(vector, dtype=np.float32).tobytes(), digest_size=12)
    h.update(text.encode() if isinstance(text, str) else b"\x00")
    return h.hexdigest()


class UpgradeState:
    """Open an existing state file (:meth:`open`) or make a new one (:meth:`create`)."""

    def __init__(self, path, db: sqlite3.Connection):
        self.path = Path(path)
        self._db = db

    @classmethod
    def create(cls, path, meta: dict) -> "UpgradeState":
        path = Path(path)
        if path.exists():
            raise InputError(f"an upgrade is already under way with the state file {path}: see `vecbridge upgrade "
                             f"status`, or choose another --state")
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, isolation_level=None)
        with _transaction(db):
            db.execute("CREATE TABLE meta (doc TEXT NOT NULL)")
            db.execute("CREATE TABLE records (id TEXT PRIMARY KEY, origin TEXT NOT NULL, made_by TEXT NOT NULL, "
                       "updated REAL NOT NULL, shuffle INTEGER NOT NULL, residual REAL, hubness REAL, "
                       "query_hits REAL, digest TEXT)")
            db.execute("CREATE INDEX records_order ON records (origin, shuffle)")
            db.execute("CREATE TABLE events (at REAL NOT NULL, stage TEXT NOT NULL, detail TEXT NOT NULL)")
            db.execute("CREATE TABLE reference (rows INTEGER NOT NULL, dim INTEGER NOT NULL, data BLOB NOT NULL)")
            db.execute(_FIT_SAMPLE_TABLE)
            db.execute("INSERT INTO meta VALUES (?)", (json.dumps(meta),))
        return cls(path, db)

    @staticmethod
    def _complete(db: sqlite3.Connection) -> None:
        """Add what state files written by an earlier version lack (columns, the reference table)."""
        have = {row[1] for row in db.execute("PRAGMA table_info(records)")}
        if set(_SCORE_COLUMNS) <= have and {"reference", "fit_sample"} <= {
                name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}:
            return   # nothing to add: no write (and no write lock) on open
        with _transaction(db):
            for col in _SCORE_COLUMNS:
                if col not in have:
                    db.execute(f"ALTER TABLE records ADD COLUMN {col} {'TEXT' if col == 'digest' else 'REAL'}")
            db.execute("CREATE TABLE IF NOT EXISTS reference (rows INTEGER NOT NULL, dim INTEGER NOT NULL, "
                       "data BLOB NOT NULL)")
            db.execute(_FIT_SAMPLE_TABLE.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))

    @classmethod
    def open(cls, path) -> "UpgradeState":
        path = Path(path)
        if not path.is_file():
            raise InputError(f"no upgrade state at {path}: start one with `vecbridge upgrade start`")
        try:
            db = sqlite3.connect(path, isolation_level=None)
            row = db.execute("SELECT doc FROM meta").fetchone()
            cls._complete(db)
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{path} is not an upgrade state file ({exc})") from None
        try:
            _document(path, row)
        except InputError:
            db.close()
            raise
        return cls(path, db)

    def close(self) -> None:
        self._db.close()

    # --- the upgrade as a whole -------------------------------------------------------------------------------------
    @property
    def meta(self) -> dict:
        return _document(self.path, self._db.execute("SELECT doc FROM meta").fetchone())

    def update(self, **changes) -> dict:
        meta = {**self.meta, **changes}
        with _transaction(self._db):
            self._db.execute("UPDATE meta SET doc = ?", (json.dumps(meta),))
        return meta

    def event(self, stage: str, detail: str = "") -> None:
        with _transaction(self._db):
            self._db.execute("INSERT INTO events VALUES (?, ?, ?)", (time.time(), stage, redact_text(detail)))

    def events(self) -> list[dict]:
        return [{"at": at, "stage": st, "detail": d}
                for at, st, d in self._db.execute("SELECT at, stage, detail FROM events ORDER BY rowid")]

    # --- records ----------------------------------------------------------------------------------------------------
    def stamp(self, ids: Iterable, origin: str, made_by: str, residuals: Iterable[float] | None = None, *,
              digests: Iterable[str] | None = None, hubness: Iterable[float] | None = None) -> None:
        """Record how the new vectors of ``ids`` were made (called after they were written to the store);
        ``residuals``: how unreliable each mapped vector is expected to be (the ``residual`` priority);
        ``digests``: :func:`record_digest` of what each was made from; ``hubness``: its hub score against the
        reference queries (the ``hubs`` priority and the hub penalty). Scores not given keep their value."""
        if origin not in ORIGINS:
            raise InputError(f"origin must be one of {', '.join(ORIGINS)}")
        now = time.time()
        keys = list(map(_key, ids))

        def column(values, cast):
            return [None] * len(keys) if values is None else [cast(v) for v in values]

        rows = zip(keys, column(residuals, float), column(hubness, float), column(digests, str))
        with _transaction(self._db):
            self._db.executemany(
                "INSERT INTO records (id, origin, made_by, updated, shuffle, residual, hubness, digest) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET origin = excluded.origin, "
                "made_by = excluded.made_by, updated = excluded.updated, "
                "residual = coalesce(excluded.residual, records.residual), "
                "hubness = coalesce(excluded.hubness, records.hubness), "
                "digest = coalesce(excluded.digest, records.digest)",
                [(k, origin, made_by, now, _shuffle(k), r, h, d) for k, r, h, d in rows])

    def score(self, column: str, ids: Iterable, values: Iterable[float], *, reset: bool = False) -> None:
        """Set one score column (``hubness`` or ``query_hits``) of records that have a stamp; ``reset`` first sets
        it to 0 for every record."""
        if column not in ("hubness", "query_hits"):
            raise InputError(f"no score column {column!r}")
        with _transaction(self._db):
            if reset:
                self._db.execute(f"UPDATE records SET {column} = 0")
            self._db.executemany(f"UPDATE records SET {column} = ? WHERE id = ?",
                                 [(float(v), _key(i)) for i, v in zip(ids, values)])

    def scores_of(self, ids: Iterable) -> dict:
        """``{id: hub score or None}`` for the ids that have a stamp (the others are not the upgrade's)."""
        return {i: h for i, (h,) in self._lookup(ids, "hubness").items()}

    @contextlib.contextmanager
    def seen(self):
        """Collect the ids a scan of the source sees (``seen(ids)``); ``seen.missing()`` lists the stamped ids it
        did not see: records deleted from the source."""
        with _transaction(self._db, "BEGIN"):
            self._db.execute("CREATE TEMP TABLE IF NOT EXISTS seen_ids (id TEXT PRIMARY KEY)")
            self._db.execute("DELETE FROM seen_ids")

        def add(ids):
            with _transaction(self._db, "BEGIN"):
                self._db.executemany("INSERT OR IGNORE INTO seen_ids VALUES (?)", [(_key(i),) for i in ids])

        add.missing = lambda: [json.loads(k) for (k,) in self._db.execute(
            "SELECT id FROM records WHERE id NOT IN (SELECT id FROM seen_ids)")]
        try:
            yield add
        finally:
            with _transaction(self._db, "BEGIN"):
                self._db.execute("DROP TABLE IF EXISTS seen_ids")

    # --- the reference queries of the hub scores --------------------------------------------------------------------
    def set_reference(self, vectors) -> None:
        """Keep new-model query vectors (a log sample, or the re-embedded fit sample) as raw float32: hub scores of
        records re-embedded later are measured against the same queries."""
        V = np.ascontiguousarray(vectors, dtype=np.float32)
        if V.ndim != 2 or not len(V):
            raise InputError("the hub reference needs a non-empty 2-D array of query vectors")
        with _transaction(self._db):
            self._db.execute("DELETE FROM reference")
            self._db.execute("INSERT INTO reference VALUES (?, ?, ?)", (V.shape[0], V.shape[1], V.tobytes()))

    def set_fit_sample(self, ids: list, digests: list[str], old, new) -> None:
        """Keep the records ``start`` re-embedded to fit the map (their ids, :func:`record_digest` of what was
        embedded, old and new vectors): a start interrupted after the fit continues with them instead of
        re-embedding, and they become native vectors, priority scores and the hub reference as in one run."""
        before, after = (np.ascontiguousarray(v, dtype=np.float32) for v in (old, new))
        with _transaction(self._db):
            self._db.execute("DELETE FROM fit_sample")
            self._db.execute("INSERT INTO fit_sample VALUES (?, ?, ?, ?, ?, ?)",
                             (json.dumps(list(ids)), json.dumps(list(digests)), before.tobytes(), before.shape[1],
                              after.tobytes(), after.shape[1]))

    def fit_sample(self) -> tuple[list, list[str], np.ndarray, np.ndarray] | None:
        """``(ids, digests, old vectors, new vectors)`` of :meth:`set_fit_sample`, or None."""
        row = self._db.execute("SELECT ids, digests, old, old_dim, new, new_dim FROM fit_sample").fetchone()
        if row is None:
            return None
        ids, digests, old, old_dim, new, new_dim = row
        return (json.loads(ids), json.loads(digests), np.frombuffer(old, dtype=np.float32).reshape(-1, old_dim).copy(),
                np.frombuffer(new, dtype=np.float32).reshape(-1, new_dim).copy())

    def reference(self) -> np.ndarray | None:
        row = self._db.execute("SELECT rows, dim, data FROM reference").fetchone()
        return None if row is None else np.frombuffer(row[2], dtype=np.float32).reshape(row[0], row[1]).copy()

    def forget(self, ids: Iterable) -> None:
        """Drop the stamps of records that left the source."""
        with _transaction(self._db):
            self._db.executemany("DELETE FROM records WHERE id = ?", [(_key(i),) for i in ids])

    def counts(self) -> dict[str, int]:
        got = dict(self._db.execute("SELECT origin, count(*) FROM records GROUP BY origin").fetchall())
        return {o: int(got.get(o, 0)) for o in ORIGINS}

    def _lookup(self, ids: Iterable, columns: str) -> dict:
        """``{id: row of columns}`` for the ids that have a stamp."""
        keys = {_key(i): i for i in ids}
        out = {}
        items = list(keys)
        for lo in range(0, len(items), 500):
            chunk = items[lo:lo + 500]
            rows = self._db.execute(f"SELECT id, {columns} FROM records WHERE id IN "
                                    f"({','.join('?' * len(chunk))})", chunk).fetchall()
            out.update({keys[r[0]]: tuple(r[1:]) for r in rows})
        return out

    def stamps(self, ids: Iterable) -> dict:
        """``{id: (origin, made_by)}`` for the ids that have a stamp."""
        return self._lookup(ids, "origin, made_by")

    def digests(self, ids: Iterable) -> dict:
        """``{id: digest or None}`` for the ids that have a stamp."""
        return {i: d for i, (d,) in self._lookup(ids, "digest").items()}

    def to_reembed(self, limit: int, priority: str = "random") -> list:
        """Up to ``limit`` ids still waiting for their native vector: records the source gained or changed first,
        then mapped ones in ``priority`` order: ``random`` (a fixed shuffle, the same in every run, so an
        interrupted run continues where it was), ``residual`` (the mapped vectors expected to be worst first: those
        whose nearest fit anchors the map fits worst), ``hubs`` (mapped vectors that attract the most queries
        first) or ``queries`` (the records a query log retrieves most often first); ties and unscored records in
        shuffle order."""
        if priority not in PRIORITIES:
            raise InputError(f"priority must be one of {', '.join(PRIORITIES)}, got {priority!r}")
        col = PRIORITIES[priority]
        order = "shuffle" if col is None else f"coalesce({col}, -1e300) DESC, shuffle"
        rows = self._db.execute("SELECT id FROM records WHERE origin IN ('pending', 'mapped') "
                                f"ORDER BY origin = 'mapped', {order} LIMIT ?", (int(limit),)).fetchall()
        return [json.loads(k) for (k,) in rows]
