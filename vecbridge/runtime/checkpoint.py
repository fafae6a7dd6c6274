"""Checkpoints that make every write path resumable.

A checkpoint is a small JSON file, by default beside the alignment artifact
(``align.vb.<target-name>.migrate.json``), rewritten atomically after every committed batch. It records what the
job is (kind, redacted source and target URLs, the alignment's fingerprint, the source's dimension and count) and,
per phase, the source cursor of the last batch written and how many records were read and written, and the batch
size, which a resume keeps (a float32 matrix product can differ in the last bit between batch sizes, so only the
same batching makes a resumed run bit-exact). The file is removed when the job finishes.

Crash semantics: a batch is upserted first and the checkpoint advanced second, so after a crash the resumed job
re-writes at most the one batch that was in flight; upserts are idempotent by id, so nothing is duplicated and
nothing is skipped. A resume whose source, target or alignment differs from the checkpoint's is refused.
"""
from __future__ import annotations

import datetime as _dt
import glob
import json
import os
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..faultpoint import fault_point
from ..secrets import scrub

VERSION = 1
#: no checkpoint is larger (a distributed job's plan of key ranges included): a larger file is someone else's
_MAX_BYTES = 64 << 20


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's process
        return True
    return True


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Checkpoint:
    def __init__(self, path, identity: dict[str, Any]):
        self.path = Path(path)
        self.identity = scrub(identity)   # what the file keeps, and what a resume compares it with
        self.state: dict[str, Any] = {"version": VERSION, "identity": identity, "phases": {}, "status": "new"}

    # --- lifecycle ---------------------------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.path.is_file()

    @staticmethod
    def holds_one(path) -> bool:
        """Whether the file at ``path`` is a vecbridge checkpoint (of any job): a JSON object with a version, the
        job's identity and its phases. A job replaces and removes only such a file, never another one."""
        try:
            with open(path, "rb") as fh:
                raw = fh.read(_MAX_BYTES + 1)
            state = json.loads(raw.decode("utf-8")) if len(raw) <= _MAX_BYTES else None
        except (OSError, ValueError):
            return False
        return (isinstance(state, dict) and isinstance(state.get("identity"), dict)
                and isinstance(state.get("phases"), dict) and "version" in state)

    def load(self) -> "Checkpoint":
        self._sweep()
        try:
            state = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"checkpoint {self.path} is unreadable ({exc}); remove it to start over") from None
        if not isinstance(state, dict) or state.get("version") != VERSION:
            raise InputError(f"checkpoint {self.path} has an unknown version; remove it to start over")
        differs = [k for k, v in self.identity.items() if state.get("identity", {}).get(k) != v]
        if differs:
            raise InputError(f"refusing to resume: the checkpoint {self.path} was written for a different "
                             f"{', '.join(differs)}; use the original command, or remove the checkpoint and the "
                             f"target to start over")
        self.state = state
        return self

    def _tmp(self, pid: int) -> Path:
        return self.path.with_name(f".{self.path.name}.tmp-{pid}")

    def _sweep(self) -> None:
        """Remove what a killed save left (its temporary file, named after its process): a process that no longer
        runs will never finish the rename."""
        for tmp in self.path.parent.glob(f".{glob.escape(self.path.name)}.tmp-*"):
            pid = tmp.name.rsplit("-", 1)[-1]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                tmp.unlink(missing_ok=True)

    def save(self) -> None:
        self.state["updated_at"] = _now()
        tmp = self._tmp(os.getpid())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as fh:
            json.dump(self.state, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        fault_point("checkpoint.before-replace")
        os.replace(tmp, self.path)

    def mark_creating(self) -> None:
        """Saved just before the job creates its target: a run stopped while the target was being made (Ctrl-C,
        ``kill -9``) leaves this mark, and ``--resume`` then knows that what exists of the target is the run's own
        (it drops it and creates it again) instead of refusing it as a target that already exists."""
        self.state["status"] = "creating"
        self.save()

    @property
    def creating(self) -> bool:
        """Whether the run that wrote this checkpoint stopped before its target was fully created."""
        return self.status == "creating"

    def start(self) -> None:
        self.state.setdefault("started_at", _now())
        self.state["status"] = "running"
        self.save()

    def finish(self) -> None:
        """The job is complete: nothing is left to resume, so the file goes."""
        self.state["status"] = "done"
        self.remove()

    def remove(self) -> None:
        if self.path.exists():
            self.path.unlink()
        self._sweep()

    # --- phases -----------------------------------------------------------------------------------------------------
    def phase(self, name: str) -> dict:
        return self.state["phases"].setdefault(name, {"cursor": None, "read": 0, "written": 0, "done": False})

    def commit(self, name: str, cursor: Any, written: int, read: int | None = None) -> None:
        ph = self.phase(name)
        ph["cursor"] = cursor
        ph["written"] += written
        ph["read"] = ph.get("read", 0) + (written if read is None else read)
        self.save()

    def complete(self, name: str) -> None:
        self.phase(name)["done"] = True
        self.save()

    @property
    def status(self) -> str:
        return self.state.get("status", "new")

    @property
    def written(self) -> int:
        return sum(p["written"] for p in self.state["phases"].values())

    @property
    def read(self) -> int:
        return sum(p.get("read", p["written"]) for p in self.state["phases"].values())

    def total(self, key: str) -> int:
        """A count a job keeps per phase beside its cursor (e.g. a merge's ``linked``), summed over the phases."""
        return sum(int(p.get(key, 0)) for p in self.state["phases"].values())

    @property
    def batch_size(self) -> int | None:
        return self.state.get("batch_size")

    @batch_size.setter
    def batch_size(self, value: int) -> None:
        self.state["batch_size"] = int(value)
