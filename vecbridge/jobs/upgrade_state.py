"""The state of one model upgrade: a small SQLite file that says where it stands and how each record's new vector
was made.

Tables: ``meta`` (one JSON document: the collections, the models, the stage), ``records`` (one row per record,
with ``made_by``: the alignment's fingerprint or the model's name) and ``events`` (the stage history). A record's
``origin`` is ``mapped`` (the alignment applied to its old vector), ``native`` (the new model run on its text),
``pending`` (the source gained it after the start; no new vector yet) or ``no-text`` (no text to embed: it keeps its
mapped vector). Every write is one transaction, so a run killed at any point leaves a consistent file: a batch is
stamped only after it was written to the store.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Iterable

from ..errors import InputError

ORIGINS = ("mapped", "native", "pending", "no-text")
PRIORITIES = ("random", "residual")


def _key(record_id) -> str:
    """Ids keep their type (int or str) through the file: stored as JSON."""
    return json.dumps(record_id)


def _shuffle(key: str) -> int:
    """A fixed pseudo-random rank per record: the ``random`` priority order, the same in every run."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=7).digest(), "big")


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
        with db:
            db.execute("CREATE TABLE meta (doc TEXT NOT NULL)")
            db.execute("CREATE TABLE records (id TEXT PRIMARY KEY, origin TEXT NOT NULL, made_by TEXT NOT NULL, "
                       "updated REAL NOT NULL, shuffle INTEGER NOT NULL, residual REAL)")
            db.execute("CREATE INDEX records_order ON records (origin, shuffle)")
            db.execute("CREATE TABLE events (at REAL NOT NULL, stage TEXT NOT NULL, detail TEXT NOT NULL)")
            db.execute("INSERT INTO meta VALUES (?)", (json.dumps(meta),))
        return cls(path, db)

    @classmethod
    def open(cls, path) -> "UpgradeState":
        path = Path(path)
        if not path.is_file():
            raise InputError(f"no upgrade state at {path}: start one with `vecbridge upgrade start`")
        try:
            db = sqlite3.connect(path, isolation_level=None)
            db.execute("SELECT doc FROM meta").fetchone()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{path} is not an upgrade state file ({exc})") from None
        return cls(path, db)

    def close(self) -> None:
        self._db.close()

    # --- the upgrade as a whole -------------------------------------------------------------------------------------
    @property
    def meta(self) -> dict:
        return json.loads(self._db.execute("SELECT doc FROM meta").fetchone()[0])

    def update(self, **changes) -> dict:
        meta = {**self.meta, **changes}
        with self._db:
            self._db.execute("UPDATE meta SET doc = ?", (json.dumps(meta),))
        return meta

    def event(self, stage: str, detail: str = "") -> None:
        with self._db:
            self._db.execute("INSERT INTO events VALUES (?, ?, ?)", (time.time(), stage, detail))

    def events(self) -> list[dict]:
        return [{"at": at, "stage": st, "detail": d}
                for at, st, d in self._db.execute("SELECT at, stage, detail FROM events ORDER BY rowid")]

    # --- records ----------------------------------------------------------------------------------------------------
    def stamp(self, ids: Iterable, origin: str, made_by: str, residuals: Iterable[float] | None = None) -> None:
        """Record how the new vectors of ``ids`` were made (called after they were written to the store);
        ``residuals``: how unreliable each mapped vector is expected to be (the ``residual`` priority)."""
        if origin not in ORIGINS:
            raise InputError(f"origin must be one of {', '.join(ORIGINS)}")
        now = time.time()
        keys = list(map(_key, ids))
        res = [None] * len(keys) if residuals is None else [float(r) for r in residuals]
        with self._db:
            self._db.executemany(
                "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET origin = excluded.origin, "
                "made_by = excluded.made_by, updated = excluded.updated, "
                "residual = coalesce(excluded.residual, records.residual)",
                [(k, origin, made_by, now, _shuffle(k), r) for k, r in zip(keys, res)])

    def forget(self, ids: Iterable) -> None:
        """Drop the stamps of records that left the source."""
        with self._db:
            self._db.executemany("DELETE FROM records WHERE id = ?", [(_key(i),) for i in ids])

    def counts(self) -> dict[str, int]:
        got = dict(self._db.execute("SELECT origin, count(*) FROM records GROUP BY origin").fetchall())
        return {o: int(got.get(o, 0)) for o in ORIGINS}

    def stamps(self, ids: Iterable) -> dict:
        """``{id: (origin, made_by)}`` for the ids that have a stamp."""
        keys = {_key(i): i for i in ids}
        out = {}
        items = list(keys)
        for lo in range(0, len(items), 500):
            chunk = items[lo:lo + 500]
            rows = self._db.execute(f"SELECT id, origin, made_by FROM records WHERE id IN "
                                    f"({','.join('?' * len(chunk))})", chunk).fetchall()
            out.update({keys[k]: (o, m) for k, o, m in rows})
        return out

    def to_reembed(self, limit: int, priority: str = "random") -> list:
        """Up to ``limit`` ids still waiting for their native vector: records the source gained first (they have
        no new vector at all), then mapped ones in ``priority`` order: ``random`` (a fixed shuffle, the same in
        every run, so an interrupted run continues where it was) or ``residual`` (the mapped vectors expected to be
        worst first: those whose nearest fit anchors the map fits worst; ties and unscored records in shuffle order)."""
        if priority not in PRIORITIES:
            raise InputError(f"priority must be one of {', '.join(PRIORITIES)}, got {priority!r}")
        order = "shuffle" if priority == "random" else "coalesce(residual, -1) DESC, shuffle"
        rows = self._db.execute("SELECT id FROM records WHERE origin IN ('pending', 'mapped') "
                                f"ORDER BY origin = 'mapped', {order} LIMIT ?", (int(limit),)).fetchall()
        return [json.loads(k) for (k,) in rows]
