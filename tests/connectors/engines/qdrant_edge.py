"""Qdrant Edge: the real Qdrant engine, embedded in the test process (pip ``qdrant-edge-py``).

Nothing to start: every collection is a shard directory under the session's workdir.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

NAME = "qdrant_edge"


def unavailable():
    if importlib.util.find_spec("qdrant_edge") is None:
        return "qdrant-edge-py is not installed (pip install qdrant-edge-py)"
    return None


class Engine:
    features: set[str] = {"add_vector_field"}

    def __init__(self, workdir: Path):
        self.workdir = workdir

    def url(self, collection: str) -> str:
        return f"qdrant-edge://{self.workdir.resolve() / collection}"

    def stop(self):
        pass  # shards left open by a test are flushed and closed at exit by the connector


def start(workdir: Path) -> Engine:
    return Engine(workdir)
