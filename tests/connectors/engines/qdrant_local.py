"""Qdrant through ``qdrant-client``'s local mode, in memory (no Qdrant server can be installed here).

The ``:memory:`` store is shared by every ``qdrant://:memory:/...`` URL of the process, so the contract tests reach
it by URL like any other store. ``path=`` mode writes too slowly for the round trip of thousands of records; it is covered by a
small persistence test in ``tests/connectors/test_qdrant.py``.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

NAME = "qdrant_local"


def unavailable():
    if importlib.util.find_spec("qdrant_client") is None:
        return "qdrant-client is not installed (pip install qdrant-client)"
    return None


class Engine:
    features: set[str] = {"add_vector_field"}

    def __init__(self, workdir: Path):
        self.workdir = workdir

    def url(self, collection: str) -> str:
        return f"qdrant://:memory:/{collection}"

    def stop(self):
        pass  # in-process: collections are dropped by the tests, the memory goes with the process


def start(workdir: Path) -> Engine:
    return Engine(workdir)
