"""Chroma's embedded persistent client (``chromadb.PersistentClient``) on a local directory: no server."""
from __future__ import annotations

import importlib.util
from pathlib import Path

NAME = "chroma_persistent"


def unavailable() -> str | None:
    if importlib.util.find_spec("chromadb") is None:
        return "chromadb is not installed (pip install chromadb)"
    return None


class Engine:
    features: set[str] = set()

    def __init__(self, workdir: Path):
        self.directory = Path(workdir) / "chroma"

    def url(self, collection: str) -> str:
        return f"chroma://{self.directory}/{collection}"

    def stop(self) -> None:
        pass


def start(workdir: Path) -> Engine:
    return Engine(workdir)
