"""A drift check's TOML file, its run history (SQLite) and its schedule: what ``vecbridge drift`` keeps on disk.

The file::

    [check]
    name = "prod-upgrade"
    old = "postgresql://app@db/prod?table=docs"   # the old-model collection (read only)
    new = "qdrant://vec:6333/docs_v2"             # collection holding new-model vectors (native or migrated)
    alignment = "align.vb"
    sample = 1000                                  # items sampled per run
    history = "drift.sqlite"                       # default: <config name>.sqlite beside the TOML

    [probe]                                        # optional: retention on a fixed probe set
    queries = "file://probe_queries"               # new-model query vectors; id = the relevant document's id
    k = 10

    [thresholds]                                   # defaults shown
    max_residual_ratio = 1.5    # residual of the alignment on fresh pairs / its in-sample residual at fit time
    min_retention = 0.8         # recall retention@k of the probe queries (mapped old vs native new)
                                # (a native recall below vecbridge.metrics.MIN_NATIVE_RECALL makes the ratio
                                # meaningless: it is recorded as None, "retention_unreliable" says why, and the
                                # run is flagged, never passed on a number like 50x)
    max_centroid_shift = 3.0    # ||mean_now - mean_ref|| in units of its sampling noise (about 1 when stable)
    min_mmd_pvalue = 0.01       # permutation p-value of the RBF-kernel MMD between now and the reference sample
"""
from __future__ import annotations

import datetime as _dt
import json
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..secrets import redact_text, scrub

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_THRESHOLDS = {"max_residual_ratio": 1.5, "min_retention": 0.8, "max_centroid_shift": 3.0,
                      "min_mmd_pvalue": 0.01}


@dataclass
class DriftConfig:
    name: str
    old: str
    new: str
    alignment: Path
    history: Path
    reference: Path
    sample: int = 1000
    probe_queries: str | None = None
    k: int = 10
    thresholds: dict = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))

    @classmethod
    def load(cls, path) -> "DriftConfig":
        path = Path(path)
        if not path.is_file():
            raise InputError(f"drift config not found: {path}")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"{path}: invalid TOML ({exc})") from None
        check = data.get("check", {})
        missing = [k for k in ("old", "new", "alignment") if k not in check]
        if missing:
            raise InputError(f"{path}: [check] needs {', '.join(missing)}")
        unknown = set(data.get("thresholds", {})) - set(DEFAULT_THRESHOLDS)
        if unknown:
            raise InputError(f"{path}: unknown thresholds {', '.join(sorted(unknown))}")
        base = path.parent
        history = base / check.get("history", f"{path.stem}.sqlite")
        probe = data.get("probe", {})
        return cls(name=check.get("name", path.stem), old=check["old"], new=check["new"],
                   alignment=base / check["alignment"], history=history,
                   reference=history.with_suffix(".reference.npz"), sample=int(check.get("sample", 1000)),
                   probe_queries=probe.get("queries"), k=int(probe.get("k", 10)),
                   thresholds={**DEFAULT_THRESHOLDS, **data.get("thresholds", {})})


class History:
    """SQLite log of every run (one row per run, measurements as JSON)."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.execute("CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY, at TEXT, name TEXT, "
                       "measures TEXT, breached INTEGER, reason TEXT)")

    def _db(self):
        return sqlite3.connect(self.path)

    def append(self, name: str, measures: dict, breached: bool, reason: str) -> None:
        with self._db() as db:
            db.execute("INSERT INTO runs (at, name, measures, breached, reason) VALUES (?, ?, ?, ?, ?)",
                       (_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), redact_text(name),
                        json.dumps(scrub(measures)), int(breached), redact_text(reason)))

    def rows(self) -> list[dict]:
        with self._db() as db:
            cur = db.execute("SELECT id, at, name, measures, breached, reason FROM runs ORDER BY id")
            return [{"id": r[0], "at": r[1], "name": r[2], "measures": json.loads(r[3]), "breached": bool(r[4]),
                     "reason": r[5]} for r in cur.fetchall()]


def parse_every(text: str) -> float:
    """'90s', '15m', '1h', '1d' -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = text.strip().lower()
    try:
        if text[-1] in units:
            value = float(text[:-1]) * units[text[-1]]
        else:
            value = float(text)
    except (ValueError, IndexError):
        raise InputError(f"--every takes a duration like 30s, 15m, 1h or 1d; got {text!r}") from None
    if value <= 0:
        raise InputError("--every must be positive")
    return value
