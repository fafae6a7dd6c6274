"""``upgrade reembed --engine ray`` on the session's real two-node Ray cluster, Ray actors running the real
all-MiniLM-L6-v2 (or, where a test is about stopping and resuming, its stored outputs looked up by text: the same
vectors without loading the model in every actor of every run): every native vector is the model's output for its
record's text, stamps (digests, hub scores) are the local run's, the old vectors stay bit-exact, ``limit`` and
``until`` hold, and a driver interrupted mid-run leaves only written batches stamped, so the next run (the CLI) ends
complete with each record stamped once."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import collection_urls
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import InputError
from vecbridge.jobs.upgrade import Upgrade, start
from vecbridge.runtime.engine import LocalEngine
from vecbridge.runtime.ray_engine import RayEngine
from vecbridge.runtime.record_stamps import record_digest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")   # keep every Ray address on the loopback

N, FIT, BATCH = 400, 100, 32
FITTED: dict = {}   # state file -> the ids start re-embedded to fit the map
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore::vecbridge.align.FewPairsWarning")   # 100 fit pairs, 768 dims


@pytest.fixture(scope="module")
def real_model(sample, minilm_model, minilm_vectors):
    """all-MiniLM-L6-v2 from the test extra (its path, as the upgrade and its Ray actors load it) and its output for
    the first N texts (encoded once per session, tests/conftest.py)."""
    return minilm_model[0], {i: minilm_vectors[i] for i in sample.ids[:N]}


def _looked_up(sample) -> tuple[str, dict]:
    """all-MiniLM-L6-v2's stored outputs of the first N texts, as a ``module:function`` the actors import."""
    return "tests.embedders:minilm_lookup", dict(zip(sample.ids[:N], sample.docs_old[:N]))


@pytest.fixture(params=["file", "pgvector"])
def store(request, tmp_path):
    """``url(name)`` of new collections on one engine, and whether the new vectors go into a field of the source."""
    engine = None if request.param == "file" else request.getfixturevalue("pg_engine")
    return collection_urls(engine, tmp_path), engine is not None


def _snapshot(url) -> dict:
    return {i: v.tobytes() for b in connect(url).scan(500) for i, v in zip(b.ids, b.vectors)}


def _start(sample, model, url_of, in_place, tmp_path) -> tuple[str, Path]:
    """A collection of N records holding the sample's all-mpnet-base-v2 vectors and texts, upgraded to the real
    all-MiniLM-L6-v2 (fitted on FIT re-embedded texts, native from the start; the others mapped)."""
    url = url_of("src")
    connect(url).create(dim=768).upsert(VectorBatch(sample.ids[:N], sample.docs_new[:N],
                                                    [{"text": it["doc"]} for it in sample.items[:N]]))
    where = {"field": "v_minilm"} if in_place else {"to": url_of("new")}
    state = tmp_path / "ray.upgrade.sqlite"
    status = start(url, model=model, text_field="text", state_path=state, fit_sample=FIT, **where)
    assert status["counts"] == {"mapped": N - FIT, "native": FIT, "pending": 0, "no-text": 0}
    with Upgrade.open(state) as up:
        FITTED[state] = [i for i, st in up.records.of(sample.ids[:N]).items() if st["origin"] == "native"]
    return url, state


def _close(a, b) -> bool:
    return np.allclose(a / np.linalg.norm(a), b / np.linalg.norm(b), atol=1e-5)


def _check(state, expected, model, *, interrupted: bool = False) -> dict:
    """Each record's new vector is what its stamp in the store says (the model's output, with the digest and hub
    score of a local run; or the map of its old vector). Returns ``{id: (origin, made_by)}``."""
    fitted = set(FITTED[state])
    with Upgrade.open(state) as up:
        old = VectorBatch.concat(list(up.source.scan(500)))
        new = {i: v for b in up.target.scan(500) for i, v in zip(b.ids, b.vectors)}
        assert sorted(new) == sorted(old.ids), "a record is missing from, or extra in, the new vectors"
        held = up.records.of(old.ids)
        stamps = {i: (st["origin"], st["made_by"]) for i, st in held.items()}
        digests, hubs = {i: st.get("digest") for i, st in held.items()}, {i: st.get("hubness") for i, st in held.items()}
        mapped = dict(zip(old.ids, up.alignment.transform(old.vectors)))
        native = [i for i in old.ids if stamps[i][0] == "native" and i not in fitted]
        local_hubs = dict(zip(native, up.hubness(np.stack([expected[i] for i in native]))))
        for i, v_old, p in zip(old.ids, old.vectors, old.payloads):
            origin, made_by = stamps[i]
            want = expected[i] if origin == "native" else mapped[i]
            if interrupted and origin == "mapped" and _close(new[i], expected[i]):
                continue
            np.testing.assert_allclose(new[i] / np.linalg.norm(new[i]), want / np.linalg.norm(want), atol=1e-5,
                                       err_msg=f"{i} ({origin})")
            if origin == "native":
                assert made_by == model
                assert digests[i] == record_digest(v_old, p["text"])
                if i not in fitted:   # the fit sample's hub scores leave each record out of its own reference
                    assert hubs[i] == pytest.approx(local_hubs[i], abs=1e-5)
    return stamps


def _native(stamps) -> set:
    return {i for i, (origin, _) in stamps.items() if origin == "native"}


def test_ray_reembed_stops_then_completes(ray_cluster, store, sample, request, tmp_path):
    """A run stopped by ``limit`` (file store) or ``until`` (pgvector, into a new vector field) re-embeds exactly
    that many records; the next run, in another priority order, re-embeds the rest. (One stop condition per store:
    each run starts its actors; the real model on the file store, loaded by every actor of both runs, about 15 s
    each on 2 cores.)"""
    url_of, in_place = store
    model, expected = _looked_up(sample) if in_place else request.getfixturevalue("real_model")
    url, state = _start(sample, model, url_of, in_place, tmp_path)
    before = _snapshot(url)
    seen = []
    stop, first = ({"until": 0.75}, int(0.75 * N) - FIT) if in_place else ({"limit": 70}, 70)
    with Upgrade.open(state) as up:
        r = up.reembed(engine=RayEngine(workers=2), batch_size=BATCH, on_progress=seen.append, **stop)
    assert (r["engine"], r["workers"], r["reembedded"], sum(seen), r["stopped_by"]) == ("ray", 2, first, first, "done")
    assert len(_native(_check(state, expected, model))) == FIT + first
    with Upgrade.open(state) as up:
        r = up.reembed(engine=RayEngine(workers=2), batch_size=BATCH, priority="hubs")
    assert r["reembedded"] == N - FIT - first and r["native_fraction"] == 1.0
    assert _native(_check(state, expected, model)) == set(sample.ids[:N])
    assert _snapshot(url) == before, "the old vectors are never written"


class Interrupt(Exception):
    pass


def _natives(state) -> set:
    with Upgrade.open(state) as up:
        return {i for ids, _ in up.target.scan_stamps(origins=["native"]) for i in ids}


def test_interrupted_driver_then_the_cli_ends_complete(ray_cluster, sample, tmp_path):
    """The driver dies after its first landed batches with more in flight (some of them written, each with its
    stamp, by the workers): the stamped records are right, and ``upgrade reembed --engine ray`` run again re-does
    only the others."""
    model, expected = _looked_up(sample)
    url, state = _start(sample, model, lambda name: f"file://{tmp_path / name}", False, tmp_path)
    before = _snapshot(url)
    done = []

    def progress(n):
        done.append(n)
        if sum(done) >= 3 * BATCH:
            raise Interrupt

    with Upgrade.open(state) as up, pytest.raises(Interrupt):
        up.reembed(engine=RayEngine(workers=2), batch_size=BATCH, on_progress=progress)
    first = _natives(state)
    assert FIT + sum(done) <= len(first) < N
    time.sleep(2)   # a worker's item still running when the job raised would land now
    assert _natives(state) == first, "nothing writes after the job has raised"
    _check(state, expected, model, interrupted=True)
    r = CliRunner().invoke(main, ["upgrade", "reembed", "--state", str(state), "--batch-size", str(BATCH),
                                  "--engine", "ray", "--workers", "2", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["engine"] == "ray" and out["native_fraction"] == 1.0
    assert out["reembedded"] == N - len(first), "only the records not stamped yet are re-embedded"
    stamps = _check(state, expected, model)
    assert _native(stamps) == set(sample.ids[:N])
    assert _snapshot(url) == before


def test_a_model_the_workers_cannot_load_is_one_line(ray_cluster, sample, tmp_path):
    url = f"file://{tmp_path}/src"
    connect(url).create(dim=768).upsert(VectorBatch(sample.ids[:50], sample.docs_new[:50],
                                                    [{"text": it["doc"]} for it in sample.items[:50]]))
    align = Alignment.from_estimator(OrthogonalProcrustes().fit(sample.docs_new[500:], sample.docs_old[500:]),
                                     target_model="none").save(tmp_path / "a.vb")
    state = tmp_path / "u.upgrade.sqlite"
    start(url, model="tests.no_such_module:embed", text_field="text", state_path=state, alignment=align,
          to=f"file://{tmp_path}/new")
    with Upgrade.open(state) as up, pytest.raises(InputError, match="cannot import embedding function"):
        up.reembed(engine=RayEngine(workers=1))
    with Upgrade.open(state) as up:
        assert up.records.counts()["native"] == 0


def test_ray_is_not_imported_by_a_local_reembed(tmp_path):
    code = f"""
import sys
import time
from vecbridge.cli import main
from tests.conftest import write_collection
from vecbridge.sample import load_wordnet_sample
s = load_wordnet_sample()
write_collection("file://{tmp_path}/old", s.ids[:300], s.docs_old[:300], [{{"text": it["doc"]}} for it in s.items[:300]])
for args in (["start", "file://{tmp_path}/old", "--to-model", "tests.embedders:mpnet_lookup", "--to",
              "file://{tmp_path}/new", "--fit-sample", "200"], ["reembed"]):
    try:
        main(["upgrade", *args, "--state", "{tmp_path}/u.sqlite", "--json"])
    except SystemExit as exc:
        assert not exc.code, exc.code
print("RAY", "ray" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "RAY False"


class Deferred:
    """A pool that holds up to four batches before embedding and writing any: what Ray's batches in flight look like
    to the one loop of ``Upgrade.reembed`` (here without Ray, with the lookup model, in a second). Notes when it is
    handed each batch."""

    def __init__(self, factory, method):
        self.held, self.handed = [], []
        self.run = getattr(factory(), method)

    def free(self):
        return 4 - len(self.held)

    def starting(self):
        return False

    def submit(self, key, ids):
        self.handed.append((time.perf_counter(), len(ids)))
        self.held.append((key, ids))

    def wait(self, timeout=None):
        if timeout is not None and self.free():
            time.sleep(timeout)
            return []
        done, self.held = [(key, self.run(ids)) for key, ids in self.held], []
        return done

    def close(self):
        pass


class DeferringEngine(LocalEngine):
    """The local engine with :class:`Deferred` pools (kept in ``pools``)."""

    def __init__(self):
        self.pools = []

    def pool(self, factory, method, *, in_flight=1):
        self.pools.append(Deferred(factory, method))
        return self.pools[-1]


def test_stop_conditions_count_the_batches_in_flight(sample, tmp_path):
    """A spend cap counts the batches handed over and not yet back (or the pool would overspend), and the rate limit
    spaces the hand-overs, however many batches are in flight."""
    url = f"file://{tmp_path}/src"
    connect(url).create(dim=384).upsert(VectorBatch(sample.ids[:300], sample.docs_old[:300],
                                                    [{"text": it["doc"]} for it in sample.items[:300]]))
    state = tmp_path / "d.upgrade.sqlite"
    start(url, model="tests.embedders:mpnet_lookup", text_field="text", state_path=state, to=f"file://{tmp_path}/new",
          fit_sample=200)
    engine = DeferringEngine()
    with Upgrade.open(state) as up:
        r = up.reembed(batch_size=25, price_per_1k=1.0, spend_cap=0.06, engine=engine)
        assert (r["reembedded"], r["stopped_by"], r["spent"]) == (50, "spend cap", pytest.approx(0.05))
        r = up.reembed(batch_size=10, limit=40, max_per_second=200, engine=engine)
    assert r["reembedded"] == 40 and r["seconds"] >= 40 / 200
    times = [t for t, _ in engine.pools[-1].handed]
    assert len(times) == 4 and min(np.diff(times)) >= 10 / 200 - 1e-3, "hand-overs no faster than the rate"
    with Upgrade.open(state) as up:
        assert up.records.counts()["native"] == 200 + 50 + 40
