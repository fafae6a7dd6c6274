"""Milvus Lite (pip ``milvus-lite``): a ``.db`` directory served in-process by pymilvus, no server to start.

milvus-lite 3.x re-implements the Milvus API in Python; it is slower than the server (reading vectors back is
pure Python), so it is the engine to keep small tests on.
"""
from __future__ import annotations

from pathlib import Path

NAME = "milvus_lite"


def unavailable() -> str | None:
    try:
        import milvus_lite  # noqa: F401
        import pymilvus  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install pymilvus milvus-lite)"
    return None


class Engine:
    features: set[str] = set()

    def __init__(self, workdir: Path):
        self.db = Path(workdir) / "lite.db"

    def url(self, collection: str) -> str:
        return f"milvus://{self.db}/{collection}"

    def stop(self):
        pass  # pymilvus stops the in-process Lite servers when the process exits


def start(workdir: Path) -> Engine:
    return Engine(workdir)
