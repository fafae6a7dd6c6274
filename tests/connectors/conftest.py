"""Fixtures that run the same connector contract against every real engine in ``engines/``."""
from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import uuid
from pathlib import Path

import pytest

ENGINES = sorted(p.stem for p in (Path(__file__).parent / "engines").glob("*.py") if p.stem != "__init__")
#: engines for tests of a workflow (an upgrade, what migrate and merge stamp) rather than of a connector, through
#: ``@pytest.mark.engines(*WORKFLOW_ENGINES)``: every engine but the Milvus server, whose connector is Milvus Lite's
#: (the same pymilvus calls) plus the network, and where one run of such a workflow costs 20-30 s. The connector
#: contract (test_contract, test_record_stamps, test_stamp, test_key_ranges, test_delete, test_capabilities) and the
#: tests of what only the server has (aliases, credentials, a crash) keep the server.
WORKFLOW_ENGINES = [name for name in ENGINES if name != "milvus_server"]


def pytest_configure(config):
    config.addinivalue_line("markers", "engines(*names): run the test on these engines of ENGINES only")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Drop the items of a test marked ``engines(*names)`` whose engine is not named. The items left keep the
    ``engine`` fixture's own parameter numbers, by which pytest runs each engine's tests together: an indirect
    ``parametrize("engine", [...])`` numbers its own list, and each engine it numbers otherwise is started again."""
    def wanted(item) -> bool:
        marker = item.get_closest_marker("engines")
        params = getattr(item, "callspec", None)
        return marker is None or params is None or params.params.get("engine") in marker.args

    items[:] = [item for item in items if wanted(item)]


def started_engine(name: str, tmp_path_factory):
    """Start the real engine ``engines/<name>.py`` (a generator for fixtures: yields it, stops it); an unavailable one
    is skipped, or fails the test where ``VECBRIDGE_REQUIRE_ENGINES`` is set (CI)."""
    module = importlib.import_module(f"tests.connectors.engines.{name}")
    reason = module.unavailable()
    if reason:
        if os.environ.get("VECBRIDGE_REQUIRE_ENGINES"):
            pytest.fail(f"engine {module.NAME} is required but unavailable: {reason}")
        pytest.skip(f"engine {module.NAME} unavailable: {reason}")
    if hasattr(module, "attach") and os.environ.get("PYTEST_XDIST_WORKER"):
        yield from _shared_engine(module, tmp_path_factory)
        return
    eng = module.start(tmp_path_factory.mktemp(module.NAME))
    eng.name = module.NAME
    yield eng
    eng.stop()


@contextlib.contextmanager
def _users(state: Path):
    """The shared server's record (``{"users": n, ...}`` or None), changed under a lock by one worker at a time."""
    with open(state.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = {"info": json.loads(state.read_text()) if state.exists() else None}
        yield record
        if record["info"] is None:
            state.unlink(missing_ok=True)
        else:
            state.write_text(json.dumps(record["info"]))


def _shared_engine(module, tmp_path_factory):
    """One server for every pytest-xdist worker of a run (a Milvus standalone idles at a fifth of a core, one per
    worker on two cores): the first worker to need it starts it, each user counts itself in and out, and the last
    one out stops it. The record lives beside the workers' temporary folders, which belong to this run."""
    state = tmp_path_factory.getbasetemp().parent / f"{module.NAME}.shared.json"
    with _users(state) as record:
        eng = module.attach(record["info"]) if record["info"] is not None else None
        if eng is None or not eng.alive():
            eng = module.start(tmp_path_factory.mktemp(module.NAME))
            record["info"] = {**eng.share(), "users": 0}
        record["info"]["users"] += 1
    eng.name = module.NAME
    try:
        yield eng
    finally:
        with _users(state) as record:
            if record["info"] is not None:
                record["info"]["users"] -= 1
                if record["info"]["users"] <= 0:
                    eng.stop()
                    record["info"] = None


#: engines whose server the whole session shares with tests/conftest.py (one start each, not two)
SESSION_SERVERS = {"pgvector": "pg_engine", "milvus_server": "milvus_engine", "chroma_server": "chroma_engine"}


@pytest.fixture(scope="session", params=ENGINES)
def engine(request, tmp_path_factory):
    if request.param in SESSION_SERVERS:
        yield request.getfixturevalue(SESSION_SERVERS[request.param])
    else:
        yield from started_engine(request.param, tmp_path_factory)


@pytest.fixture
def new_url(engine):
    """A factory of URLs of fresh collections on the current engine; they are dropped after the test."""
    from vecbridge.connectors import connect

    made = []

    def make(prefix: str = "t") -> str:
        url = engine.url(f"{prefix}_{uuid.uuid4().hex[:10]}")
        made.append(url)
        return url

    yield make
    for url in made:
        try:
            coll = connect(url)
            if coll.exists():
                coll.drop()
        except Exception:
            pass
