"""What stamping costs a whole upgrade at scale: ``upgrade start`` and ``upgrade reembed`` of N records (by default
1,000,000) in the file store and in a private PostgreSQL+pgvector, with each record's stamp written in the same upsert
as its vector, against the same runs writing the same vectors without stamps.

The records are ``bench/serve.py``'s: the bundled sample's real MiniLM (old) and MPNet (new) vectors tiled with small
noise, each with its text; the new model is that bench's lookup of a text's MPNet vector, so what is measured is the
upgrade's own work, not a model. Each run starts an upgrade into a new collection (pgvector: its HNSW index left for
later, as ``bench/serve.py`` does) and then re-embeds ``--reembed`` records of it.

Per store and round (``--repeats`` rounds, medians reported): ``start`` as shipped (``stamped``: every record's stamp,
with its digest and its residual and hub scores, in the same upsert as its vector), then ``reembed`` of ``--reembed``
of its records twice, ``stamped`` and then ``unwritten`` (the stamps made, the vectors written without them);
then ``start`` ``unwritten`` and ``none`` (no stamps made or written) into collections of their own. Reported:

* ``write``: seconds inside the store's ``upsert`` (the write itself), stamped vs unwritten: what stamping adds to the
  write;
* ``job``: the whole ``start`` / ``reembed``, stamped vs unwritten (the same work but the stamps' writing), and
  ``start`` stamped vs none (what the stamps cost in all: hashing each record for its digest, its priority scores
  against the re-embedded sample, and their writing);
* the files the upgrade keeps on this machine and their sizes (nothing grows with the record count: compare a run
  with ``--records 100000``).

Run: ``python bench/upgrade_stamps.py [--records 1000000] [--reembed 100000] [--stores file pgvector] [--repeats 1]``;
writes bench/results/upgrade_stamps.json. A benchmark, not a test (a 1,000,000-record round takes about 15 minutes
on 2 cores).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

import serve  # noqa: E402  (the records and the lookup model of bench/serve.py)

from vecbridge.connectors import VectorBatch, connect  # noqa: E402
from vecbridge.connectors.file import FileCollection  # noqa: E402
from vecbridge.jobs.upgrade import Upgrade, start  # noqa: E402
from vecbridge.runtime import record_stamps  # noqa: E402

LOAD_BATCH = 10_000


class Timers:
    """Seconds spent inside each store class's ``upsert`` while on (the write alone)."""

    def __init__(self, classes):
        self.seconds = 0.0
        self._real = {}
        for cls in classes:
            real = cls.upsert
            self._real[cls] = real

            def timed(coll, batch, _real=real):
                t = time.perf_counter()
                try:
                    return _real(coll, batch)
                finally:
                    self.seconds += time.perf_counter() - t
            cls.upsert = timed

    def take(self) -> float:
        s, self.seconds = self.seconds, 0.0
        return s


class Variant:
    """Within: upgrades stamp as ``kind`` says: ``stamped`` as shipped; ``unwritten``: each batch's stamps made (digest,
    priority scores) but its vectors written without them; ``none``: no stamps made or written."""

    def __init__(self, kind: str):
        self.kind = kind

    def __enter__(self):
        self._saved = (record_stamps.MappedStamps.__call__, record_stamps.NativeStamps.__call__)
        if self.kind != "stamped":
            for cls, real in zip((record_stamps.MappedStamps, record_stamps.NativeStamps), self._saved):
                cls.__call__ = ((lambda me, batch, vectors, _real=real: (_real(me, batch, vectors), None)[1])
                                if self.kind == "unwritten" else (lambda me, batch, vectors: None))
        return self

    def __exit__(self, *exc):
        record_stamps.MappedStamps.__call__, record_stamps.NativeStamps.__call__ = self._saved


def load_source(url: str, n: int, *, index: bool) -> None:
    src = connect(url).create(dim=384, metric="cosine", **({} if index else {"index": False}))
    for lo in range(0, n, LOAD_BATCH):
        ids = list(range(lo, min(n, lo + LOAD_BATCH)))
        src.upsert(VectorBatch(ids, serve.old_vectors(len(ids), lo),
                               [{"text": serve.record_text(i)} for i in ids]))


def local_files(folder: Path) -> dict:
    """What the upgrade keeps on this machine: every file beside its state, with its size."""
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}


def settled() -> None:
    """Flush what earlier steps left for the disk to write (a start leaves gigabytes of dirty pages): the next timed
    step's fsyncs would otherwise wait for them, charging whichever step came first."""
    os.sync()
    time.sleep(1.0)


def timed_start(kind: str, src_url: str, target_url: str, state: Path, timers: Timers) -> dict:
    settled()
    with Variant(kind):
        timers.take()
        t = time.perf_counter()
        start(src_url, model=serve.MODEL, text_field="text", state_path=state, to=target_url, fit_sample=2000)
        return {"job_s": time.perf_counter() - t, "write_s": timers.take()}


def timed_reembed(kind: str, state: Path, n: int, timers: Timers) -> dict:
    settled()
    with Variant(kind):
        up = Upgrade.open(state)
        try:
            timers.take()
            t = time.perf_counter()
            got = up.reembed(limit=n, batch_size=256, refit=False)
            return {"job_s": time.perf_counter() - t, "write_s": timers.take(), "reembedded": got["reembedded"]}
        finally:
            up.state.close()


def one_round(r: int, url_of, src_url: str, folder: Path, reembed: int, timers: Timers) -> dict:
    """One round: ``start`` stamped, then ``reembed`` of its collection stamped and then unwritten (a record written
    without its stamp has none in the file store: a later ``reembed`` would take it for a new record), then ``start``
    unwritten and none into collections of their own (in turn by round)."""
    out = {}
    work = folder / f"round_{r}"
    work.mkdir()
    target = url_of(f"bench_target_{uuid.uuid4().hex[:8]}")
    out["start stamped"] = timed_start("stamped", src_url, target, work / "a.upgrade.sqlite", timers)
    for kind in ("stamped", "unwritten"):   # unwritten last: records it writes lose their stamps in the file store
        out[f"reembed {kind}"] = timed_reembed(kind, work / "a.upgrade.sqlite", reembed, timers)
    out["local_files"] = local_files(work)
    connect(target).drop()
    for kind in (("unwritten", "none") if r % 2 == 0 else ("none", "unwritten")):
        target = url_of(f"bench_target_{uuid.uuid4().hex[:8]}")
        out[f"start {kind}"] = timed_start(kind, src_url, target, work / f"{kind}.upgrade.sqlite", timers)
        connect(target).drop()
    shutil.rmtree(work)
    return out


def bench_store(store: str, n: int, reembed: int, repeats: int, folder: Path) -> dict:
    server = None
    try:
        if store == "file":
            url_of = lambda name: str(folder / name)   # noqa: E731
            classes = [FileCollection]
            patch = None
        else:
            from tests.connectors.engines.pgvector import PgServer
            from vecbridge.connectors.pgvector import PgVectorCollection

            (folder / "pg").mkdir()
            server = PgServer(folder / "pg").start()
            url_of = server.url
            classes = [PgVectorCollection]
            patch = (PgVectorCollection, PgVectorCollection._create_index)
            PgVectorCollection._create_index = lambda *a, **k: None   # indexes are built after a load, not during
        src_url = url_of("bench_source")
        t = time.perf_counter()
        load_source(src_url, n, index=store == "file")
        print(f"  source: {n:,} records in {time.perf_counter() - t:.0f} s", flush=True)
        timers = Timers(classes)
        rounds = []
        for r in range(repeats):
            row = one_round(r, url_of, src_url, folder, reembed, timers)
            row["load_average"] = os.getloadavg()[0]
            rounds.append(row)
            print("  " + "; ".join(f"{k} {v['job_s']:.0f} s (write {v['write_s']:.1f} s)" for k, v in row.items()
                                   if isinstance(v, dict) and "job_s" in v)
                  + f"; files {row['local_files']}; load {row['load_average']:.1f}", flush=True)
        for cls in classes:
            cls.upsert = timers._real[cls]
        if patch:
            patch[0]._create_index = patch[1]
        med = {k: {m: statistics.median(r[k][m] for r in rounds) for m in ("job_s", "write_s")}
               for k in rounds[0] if isinstance(rounds[0][k], dict) and "job_s" in rounds[0][k]}
        adds = {f"{step} {m}": med[f"{step} stamped"][m] / med[f"{step} unwritten"][m] - 1
                for step in ("start", "reembed") for m in ("job_s", "write_s")}
        adds["start job_s, stamps made and written vs none"] = med["start stamped"]["job_s"] / med["start none"]["job_s"] - 1
        return {"store": store, "records": n, "reembedded": reembed, "rounds": rounds, "median_s": med,
                "stamping_adds": adds}
    finally:
        if server is not None:
            server.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--reembed", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=1, help="pairs of runs (stamped and plain) per store")
    ap.add_argument("--stores", nargs="+", default=["file", "pgvector"])
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "upgrade_stamps.json")
    args = ap.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="vecbridge-bench-upgrade-stamps-"))
    rows = []
    try:
        warm = folder / "warm"   # imports and the bundled sample loaded once, before anything is timed
        warm.mkdir()
        load_source(str(warm / "src"), 3000, index=True)
        start(str(warm / "src"), model=serve.MODEL, text_field="text", state_path=warm / "w.sqlite",
              to=str(warm / "dst"), fit_sample=2000)
        for store in args.stores:
            print(f"{store}: {args.records:,} records, load average {os.getloadavg()[0]:.1f}", flush=True)
            (folder / store).mkdir()
            row = bench_store(store, args.records, args.reembed, args.repeats, folder / store)
            rows.append(row)
            for step in ("start", "reembed"):
                print(f"  {step}: writing the stamps adds {row['stamping_adds'][f'{step} write_s']:+.1%} to the "
                      f"write, {row['stamping_adds'][f'{step} job_s']:+.1%} to the job", flush=True)
            print(f"  start: stamps made and written add "
                  f"{row['stamping_adds']['start job_s, stamps made and written vs none']:+.1%} to the job", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} cores",
                                    "command": "python bench/upgrade_stamps.py " + " ".join(argv or sys.argv[1:]),
                                    "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
