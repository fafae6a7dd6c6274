"""Milvus Lite (pip ``milvus-lite``): a ``.db`` directory served in-process by pymilvus, no server to start.

milvus-lite 3.x re-implements the Milvus API in Python; it is slower than the server. A Lite database can be open
in one process at a time (it takes a lock), and pymilvus keeps it open until the process exits, so each collection
gets its own database: a test may write a collection from a second process (e.g. the CLI) and read it back here.
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
        self.workdir = Path(workdir)

    def url(self, collection: str) -> str:
        return f"milvus://{self.workdir / collection}.db/{collection}"

    def stop(self):
        pass  # pymilvus stops the in-process Lite servers when the process exits


def start(workdir: Path) -> Engine:
    return Engine(workdir)
