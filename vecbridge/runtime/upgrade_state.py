"""The state of one model upgrade: a small SQLite file that says where it stands (the upgrade's document), not how
each record was made: each record's stamp is kept in the store beside its new vector
(:mod:`vecbridge.runtime.record_stamps`).

Tables: ``meta`` (one JSON document: the collections, the models, the stage, the tuned settings, the counts of
records per origin), ``reference`` (new-model query vectors the hub scores are measured against), ``events`` (the
stage history) and ``fit_sample`` (the ids, digests, old and new vectors of the records ``start`` re-embedded to fit
the map: an interrupted start continues with them). ``records`` is where earlier versions kept one row per record:
such a file's rows are carried over into the store the first time the upgrade is opened for a write, then emptied.
Every write is one transaction, so a run killed at any point leaves a consistent file.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..secrets import redact_text
from .guard import run_lock

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
            db.execute("CREATE TABLE events (at REAL NOT NULL, stage TEXT NOT NULL, detail TEXT NOT NULL)")
            db.execute("CREATE TABLE reference (rows INTEGER NOT NULL, dim INTEGER NOT NULL, data BLOB NOT NULL)")
            db.execute(_FIT_SAMPLE_TABLE)
            db.execute("INSERT INTO meta VALUES (?)", (json.dumps(meta),))
        return cls(path, db)

    @staticmethod
    def _complete(db: sqlite3.Connection) -> None:
        """Add what state files written by an earlier version lack (columns, the reference table)."""
        have = {row[1] for row in db.execute("PRAGMA table_info(records)")}
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if (not have or set(_SCORE_COLUMNS) <= have) and {"reference", "fit_sample"} <= tables:
            return   # nothing to add: no write (and no write lock) on open
        with _transaction(db):
            for col in _SCORE_COLUMNS:
                if have and col not in have:
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

    # --- per-record stamps of state files written before they moved into the store -------------------------------
    def legacy_rows(self, batch: int = 5000):
        """The per-record stamps an earlier vecbridge kept in this file (its ``records`` table), in batches of
        ``(id, origin, made_by, residual, hubness, query_hits, digest)``: what :meth:`~vecbridge.jobs.upgrade.base.
        UpgradeBase.carry_over` writes into the store."""
        last = -1
        while True:
            rows = self._db.execute("SELECT rowid, id, origin, made_by, residual, hubness, query_hits, digest FROM "
                                    "records WHERE rowid > ? ORDER BY rowid LIMIT ?", (last, batch)).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [(json.loads(r[1]), *r[2:]) for r in rows]

    def has_legacy_rows(self) -> bool:
        if not self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'records'").fetchone():
            return False
        return self._db.execute("SELECT 1 FROM records LIMIT 1").fetchone() is not None

    def drop_legacy_rows(self) -> None:
        with _transaction(self._db):
            self._db.execute("DELETE FROM records")

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
