"""The built-in ``file://`` store (no server)."""
from __future__ import annotations

from pathlib import Path

NAME = "file"


def unavailable():
    return None


class Engine:
    features: set[str] = set()

    def __init__(self, workdir: Path):
        self.workdir = workdir

    def url(self, collection: str) -> str:
        return f"file://{self.workdir / collection}"

    def stop(self):
        pass


def start(workdir: Path) -> Engine:
    return Engine(workdir)
