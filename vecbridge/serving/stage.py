"""Where a model upgrade stands (its stage, which model's vectors it serves, its map and model), read from its state
file without opening the upgrade: cheap enough to ask before every embedding, read-only, and never stale.

The state file (:mod:`vecbridge.runtime.upgrade_state`, a SQLite file in rollback-journal mode) is read again only
when it changed: SQLite counts every committed write in the file's header (the "file change counter", bytes 24-27),
so a stage moved by another process (``vecbridge upgrade cutover``) is seen on the next call, while an unchanged
file costs one ``stat`` and a 100-byte read.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

#: what the upgrade serves: the old model's vectors (its old index) or the new model's
SERVES = ("old", "new")


@dataclass(frozen=True)
class UpgradeStage:
    """The parts of an upgrade's state document an application embedding in process needs."""

    stage: str
    serving: str
    model: str
    alignment: str


def _changed_key(path: Path) -> tuple:
    """What changes whenever the file's content does: its identity and size, its mtime, and SQLite's own count of
    committed writes (the mtime alone may not move between two commits in the same clock tick)."""
    st = os.stat(path)
    with open(path, "rb") as fh:
        header = fh.read(28)
    return st.st_ino, st.st_size, st.st_mtime_ns, header[24:28]


class StageWatch:
    """The stage of the upgrade whose state file is ``path``, re-read when the file changed (thread-safe)."""

    def __init__(self, path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._key = None
        self._now: UpgradeStage | None = None
        self.read()

    def _unusable(self, why: str) -> InputError:
        return InputError(f"{self.path} is not a usable upgrade state file ({why})")

    def read(self) -> UpgradeStage:
        """The upgrade's stage now (the key is taken before the document is read: a write that lands in between
        changes the key again, so it is read on the next call)."""
        try:
            key = _changed_key(self.path)
        except FileNotFoundError:
            raise InputError(f"no upgrade state at {self.path}: start one with `vecbridge upgrade start`") from None
        except OSError as exc:
            raise InputError(f"cannot read the upgrade state {self.path} ({exc.strerror or exc})") from None
        with self._lock:
            if key != self._key:
                self._now, self._key = self._load(), key
            return self._now

    def _load(self) -> UpgradeStage:
        try:
            db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
            try:
                row = db.execute("SELECT doc FROM meta").fetchone()
            finally:
                db.close()
        except sqlite3.Error as exc:
            raise self._unusable(str(exc)) from None
        try:
            doc = json.loads(row[0]) if row else None
        except (TypeError, ValueError):
            doc = None
        if not isinstance(doc, dict):
            raise self._unusable("its meta row is missing or not a JSON object")
        wrong = [k for k in ("stage", "serving", "model", "alignment") if not isinstance(doc.get(k), str)]
        if wrong or doc["serving"] not in SERVES:
            raise self._unusable(f"its meta document lacks a usable {', '.join(wrong) or 'serving'}")
        return UpgradeStage(doc["stage"], doc["serving"], doc["model"], doc["alignment"])
