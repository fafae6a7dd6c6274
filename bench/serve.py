"""``vecbridge serve`` under load on the loopback: an upgrade of 100,000 records in a private PostgreSQL+pgvector,
searched and embedded through the service by ``--clients`` threads at once, next to the store's own search called
directly by as many threads in the same run; then the same load while ``upgrade cutover``, ``rollback`` and
``cutover`` run in processes of their own; then the service killed with SIGKILL under load and started again while
the clients retry. A benchmark, not a test: every loop is bounded in requests and in time, and it stops by itself.

The records are synthetic but real: the bundled sample's 1,500 real MiniLM (old) and MPNet (new) vectors, tiled
with small Gaussian noise (standard deviation 0.005 per coordinate, a different draw for every copy after the
first). The new model is :func:`new_model`, this module's lookup of a record's text (``"<gloss> (copy N)"``) to its
tiled MPNet vector, so the model costs almost nothing and what is measured is the service. The HNSW indexes are
built once after the load (about a minute each here; maintaining them row by row would take the better part of an
hour on 2 cores).

Measured per phase (at most ``--seconds`` each, at most ``--requests`` requests per client; ``--rounds`` rounds of
the four phases, interleaved, medians reported): queries per second and p50 / p99 latency of ``/search`` with
vectors in (the upgrade's search of the new vectors: what an application moving to the service gets), ``/search``
with texts in, ``/v1/embeddings``, and the store's own search of the same vectors called directly (the connector's
``search``, one pgvector connection per thread); the overhead ratio is the service's p99 over the store's. Each
client cycles through 250 records of its own as queries, their request bodies encoded once, before the clock starts.

Run: ``python bench/serve.py [--records 100000] [--clients 8] [--seconds 30] [--rounds 3] [--requests 2000]``;
writes bench/results/serve.json.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from vecbridge.sample import load_wordnet_sample  # noqa: E402

MODEL = "serve:new_model"
STOP = ("stop", None)   # this file, imported by the service with bench/ on its path
NOISE = 0.005
#: at most this long under load while the stages switch (three CLI runs, each syncing the upgrade first), and while
#: the service is killed and restarted
SWITCH_SECONDS = 300
#: distinct queries per client (cycled through)
QUERIES = 250
_SAMPLE = None


def _sample():
    global _SAMPLE
    if _SAMPLE is None:
        s = load_wordnet_sample()
        _SAMPLE = (s, {it["doc"]: row for row, it in enumerate(s.items)})
    return _SAMPLE


def record_text(i: int) -> str:
    s, _ = _sample()
    return f"{s.items[i % len(s.items)]['doc']} (copy {i // len(s.items)})"


def _noisy(base: np.ndarray, copy: int, row: int, side: int, noise: float) -> np.ndarray:
    if copy == 0:
        return base
    return base + noise * np.random.default_rng([copy, row, side]).standard_normal(base.shape[-1]).astype(np.float32)


def new_model(texts) -> np.ndarray:
    """The new model of the tiled records: each text's MPNet vector with its copy's noise."""
    s, rows = _sample()
    out = []
    for t in texts:
        gloss, _, copy = t.rpartition(" (copy ")
        row = rows[gloss]
        out.append(_noisy(s.docs_new[row], int(copy.rstrip(")")), row, 1, NOISE))
    return np.stack(out).astype(np.float32)


def old_vectors(n: int, first: int = 0) -> np.ndarray:
    """The old vectors of records ``first`` .. ``first + n - 1``."""
    s, _ = _sample()
    return np.stack([_noisy(s.docs_old[i % 1500], i // 1500, i % 1500, 0, NOISE)
                     for i in range(first, first + n)]).astype(np.float32)


# --------------------------------------------------------------------------------------------- the store and upgrade

def prepare(server, n: int, folder: Path) -> tuple[str, Path]:
    """The source table (n records, indexed after the load) and an upgrade into its field ``v_new`` (indexed after
    start wrote it). Returns ``(source URL, state file)``."""
    import psycopg

    from vecbridge.connectors import VectorBatch, connect
    from vecbridge.connectors.pgvector import PgVectorCollection
    from vecbridge.jobs.upgrade import start

    with psycopg.connect(server.dsn(), autocommit=True) as conn:   # HNSW builds in memory, not in pieces
        conn.execute("ALTER SYSTEM SET maintenance_work_mem = '2GB'")
        conn.execute("SELECT pg_reload_conf()")
    url = server.url(f"serve_{uuid.uuid4().hex[:8]}")
    src = connect(url).create(dim=384, metric="cosine", index=False)
    vectors = old_vectors(n)
    for lo in range(0, n, 10_000):
        ids = list(range(lo, min(n, lo + 10_000)))
        src.upsert(VectorBatch(ids, vectors[lo:lo + len(ids)], [{"text": record_text(i)} for i in ids]))
    t = time.perf_counter()
    src.build_index()
    print(f"  source: {n:,} records, index built in {time.perf_counter() - t:.0f} s", flush=True)
    state = folder / "bench.upgrade.sqlite"
    real = PgVectorCollection._create_index
    PgVectorCollection._create_index = lambda *a, **k: None   # built once below, after the load
    try:
        t = time.perf_counter()
        start(url, model=MODEL, text_field="text", state_path=state, field="v_new", fit_sample=2000)
        print(f"  upgrade start: {time.perf_counter() - t:.0f} s", flush=True)
    finally:
        PgVectorCollection._create_index = real
    t = time.perf_counter()
    connect(f"{url}&vector=v_new").build_index()
    print(f"  v_new index built in {time.perf_counter() - t:.0f} s", flush=True)
    return url, state


# ----------------------------------------------------------------------------------------------------- the service

def env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCH)])}


class Service:
    def __init__(self, state: Path, port: int, threads: int, log: Path):
        self.args = [sys.executable, "-m", "vecbridge.cli", "serve", "--state", str(state), "--port", str(port),
                     "--threads", str(threads), "--log-level", "warning"]
        self.port, self.log = port, log
        self.proc = None

    def start(self, timeout: float = 180) -> float:
        t = time.perf_counter()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.args, cwd=ROOT, env=env(), stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        while time.perf_counter() - t < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the service exited: {self.log.read_text()[-1500:]}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    return time.perf_counter() - t
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the service did not start")

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


# ------------------------------------------------------------------------------------------------------- the load

class Client:
    """One keep-alive HTTP connection; ``retry``: reconnect and send again (for up to ``retry`` seconds) when the
    connection fails (the service killed and restarting), never on an HTTP error."""

    def __init__(self, port: int):
        self.port, self.conn = port, None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def post(self, path: str, body: bytes, retry: float = 0.0) -> tuple[int, dict, int]:
        """``(status, document, retries)`` for the JSON ``body``."""
        data = body
        deadline, retries = time.monotonic() + retry, 0
        while True:
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                self.conn.request("POST", path, data, {"Content-Type": "application/json"})
                r = self.conn.getresponse()
                return r.status, json.loads(r.read()), retries
            except (OSError, http.client.HTTPException):
                self.conn = None
                if time.monotonic() > deadline:
                    raise
                retries += 1
                time.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process and its exited, reaped children have used (Linux ``/proc``; 0 where it
    cannot be read): a backend that ends during a phase still counts, in its parent's figures."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (PostgreSQL's backends, uvicorn's workers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            todo += [int(c) for t in Path(f"/proc/{p}/task").iterdir()
                     for c in (t / "children").read_text().split()]
        except OSError:
            pass
    return out


class CpuMeter:
    """CPU seconds per request of each side of a phase: the service's processes, PostgreSQL's, and this process (the
    client threads, or the store's own search called directly): where a saturated machine's time goes."""

    def __init__(self, sides: dict):
        self.sides = sides   # name -> callable giving the pids now

    def read(self) -> dict:
        return {name: sum(cpu_seconds(p) for p in pids()) for name, pids in self.sides.items()}

    @staticmethod
    def per_request(before: dict, after: dict, requests: int) -> dict:
        return {f"cpu_ms_{name}": 1000 * (after[name] - before[name]) / max(requests, 1) for name in before}


def load(clients: int, seconds: float, requests: int, call, meter: CpuMeter | None = None) -> dict:
    """``clients`` threads each calling ``call(client_index, i)`` (which returns an outcome, :data:`STOP` to end
    early) up to ``requests`` times or until ``seconds`` passed: latencies (of every call answered, failed ones
    included), the outcomes, queries per second."""
    lat: list[list[float]] = [[] for _ in range(clients)]
    outcomes: list[list] = [[] for _ in range(clients)]
    stop_at = time.monotonic() + seconds

    def worker(c):
        for i in range(requests):
            if time.monotonic() > stop_at:
                break
            t = time.perf_counter()
            try:
                outcome = call(c, i)
            except Exception as exc:   # counted as a failed request
                outcome = ("error", f"{type(exc).__name__}: {exc}")
            if outcome == STOP:   # the phase is over for this client
                break
            lat[c].append(time.perf_counter() - t)
            outcomes[c].append(outcome)

    load_before = os.getloadavg()[0]
    cpu_before = meter.read() if meter else None
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    all_lat = sorted(x for row in lat for x in row)
    flat = [o for row in outcomes for o in row]
    cpu = CpuMeter.per_request(cpu_before, meter.read(), len(all_lat)) if meter else {}
    return {**cpu, "requests": len(all_lat), "seconds": wall, "qps": len(all_lat) / wall,
            "p50_ms": 1000 * statistics.median(all_lat), "p99_ms": 1000 * all_lat[int(0.99 * (len(all_lat) - 1))],
            "load_before": load_before, "load_after": os.getloadavg()[0], "outcomes": flat}


def summary(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "outcomes"}


def switch(state: Path, verbs: list[str], log: list) -> None:
    for verb in verbs:
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "vecbridge.cli", "upgrade", verb, "--state", str(state)],
                              cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
        log.append({"verb": verb, "rc": done.returncode, "seconds": time.perf_counter() - t,
                    "stderr": done.stderr.strip()[-300:]})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None, help="the service's --threads (default: its own default)")
    ap.add_argument("--seconds", type=float, default=30.0, help="at most this long per phase and round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the four phases (medians reported)")
    ap.add_argument("--requests", type=int, default=2000, help="at most this many requests per client and phase")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "serve.json")
    args = ap.parse_args(argv)
    if args.threads is None:
        from vecbridge.service.config import default_threads

        args.threads = default_threads()

    from tests.connectors.engines.pgvector import PgServer, free_port
    from vecbridge.connectors import connect

    folder = Path(tempfile.mkdtemp(prefix="vecbridge-bench-serve-"))
    pg_dir = folder / "pg"
    pg_dir.mkdir()
    server = PgServer(pg_dir).start()
    service = None
    try:
        print(f"preparing {args.records:,} records (load average {os.getloadavg()[0]:.1f})", flush=True)
        url, state = prepare(server, args.records, folder)
        rng = np.random.default_rng(0)
        picks = rng.integers(0, args.records, size=(args.clients, QUERIES))   # each client cycles through its own
        texts = [[record_text(int(i)) for i in row] for row in picks]
        vectors = [new_model(row) for row in texts]

        def bodies(make):   # encoded once: the clients' JSON is not what is measured
            return [[json.dumps(make(c, q)).encode() for q in range(QUERIES)] for c in range(args.clients)]

        by_vector = bodies(lambda c, q: {"vectors": [vectors[c][q].tolist()], "k": args.k})
        by_text = bodies(lambda c, q: {"texts": [texts[c][q]], "k": args.k})
        to_embed = bodies(lambda c, q: {"input": [texts[c][q]], "model": MODEL})
        port = free_port()
        service = Service(state, port, args.threads, folder / "service.log")
        started = service.start()
        print(f"  service started in {started:.1f} s", flush=True)
        clients = [Client(port) for _ in range(args.clients)]

        def ok(status, doc, *_):
            return ("ok", doc.get("stage") or doc.get("vecbridge", {}).get("stage")) if status == 200 else \
                ("failed", status)

        def search_vectors(c, i):
            return ok(*clients[c].post("/search", by_vector[c][i % QUERIES]))

        def search_texts(c, i):
            return ok(*clients[c].post("/search", by_text[c][i % QUERIES]))

        def embeddings(c, i):
            status, doc, _ = clients[c].post("/v1/embeddings", to_embed[c][i % QUERIES])
            if status == 200 and (doc["vecbridge"]["space"] == "old") != (doc["vecbridge"]["serving"] == "old"):
                return ("inconsistent", doc["vecbridge"]["stage"])   # vectors of one stage, said to be another's
            return ok(status, doc)

        stores = [connect(f"{url}&vector=v_new", read_only=True) for _ in range(args.clients)]

        def store(c, i):
            stores[c].search(vectors[c][i % QUERIES][None], args.k)
            return ("ok", None)

        meter = CpuMeter({"service": lambda: descendants(service.proc.pid),
                          "postgres": lambda: descendants(server.process.pid), "clients": lambda: [os.getpid()]})
        # warm-up: every connection opened, every thread of the service busy once
        load(args.clients, 10, 20, store)
        load(args.clients, 10, 20, search_vectors)
        phases = {}
        runs: dict[str, list] = {}
        for round_ in range(args.rounds):   # the phases interleaved, so that a change of the machine's load
            for name, call in (("store_direct", store), ("search_vectors", search_vectors),   # hits them all
                               ("search_texts", search_texts), ("embeddings", embeddings)):
                for client in clients:   # a connection idle through the last phase was closed by the server
                    client.close()
                r = load(args.clients, args.seconds, args.requests, call, meter)
                failed = [o for o in r["outcomes"] if o[0] != "ok"]
                runs.setdefault(name, []).append({**summary(r), "failed": len(failed),
                                                  "failures": sorted({str(o) for o in failed})[:5]})
                print(f"  round {round_ + 1} {name}: {r['qps']:.0f} q/s, p50 {r['p50_ms']:.1f} ms, p99 "
                      f"{r['p99_ms']:.1f} ms ({r['requests']:,} requests, {len(failed)} failed; load "
                      f"{r['load_before']:.1f})", flush=True)
        for name, rs in runs.items():   # medians over the rounds; each round's figures kept
            phases[name] = {**{key: statistics.median(r[key] for r in rs)
                               for key in ("qps", "p50_ms", "p99_ms", "load_before", "load_after", "cpu_ms_service",
                            "cpu_ms_postgres", "cpu_ms_clients")},
                            "requests": sum(r["requests"] for r in rs), "failed": sum(r["failed"] for r in rs),
                            "failures": sorted({f for r in rs for f in r["failures"]})[:5], "rounds": rs}

        # stage switches by other processes under load: none fails, every answer names one stage
        switches: list = []
        switcher = threading.Thread(target=switch, args=(state, ["cutover", "rollback", "cutover"], switches))

        def mixed(c, i):
            out = search_vectors(c, i) if i % 2 else embeddings(c, i)
            if not switcher.is_alive() and i > 4:
                raise StopIteration
            return out

        switcher.start()
        r = load(args.clients, SWITCH_SECONDS, args.requests * 50, lambda c, i: _until(mixed, c, i))
        switcher.join()
        outs = r["outcomes"]
        stages = sorted({o[1] for o in outs if o[0] == "ok"})
        failed = [o for o in outs if o[0] in ("failed", "error")]
        unnamed = [o for o in outs if o[0] == "inconsistent" or
                   (o[0] == "ok" and o[1] not in ("mapped", "cutover", "rolled-back"))]
        phases["switching"] = {**summary(r), "requests": len(outs), "failed": len(failed), "unnamed": len(unnamed),
                               "failures": sorted({str(o) for o in failed + unnamed})[:5], "stages": stages,
                               "switches": switches}
        print(f"  switching: {len(outs):,} requests, {len(failed)} failed, stages seen {stages}, "
              f"switches {[(s['verb'], s['rc'], round(s['seconds'], 1)) for s in switches]}", flush=True)

        # SIGKILL under load, restart; the clients retry (for up to 120 s) until answered
        killed: dict = {}

        def killer():
            time.sleep(3)
            killed["at"] = time.monotonic()
            service.kill()
            killed["restart_s"] = service.start()

        kt = threading.Thread(target=killer)
        kt.start()
        answered = {"n": 0, "retried": 0, "lost": 0}
        lock = threading.Lock()

        def resilient(c, i):
            if "restart_s" in killed and time.monotonic() > killed["at"] + killed["restart_s"] + 3:
                raise StopIteration
            try:
                status, doc, retries = clients[c].post("/search", by_vector[c][i % QUERIES], retry=120)
            except Exception:
                with lock:
                    answered["lost"] += 1
                raise
            with lock:
                answered["n"] += status == 200
                answered["retried"] += retries > 0
            return ok(status, doc)

        r = load(args.clients, SWITCH_SECONDS, args.requests * 50, lambda c, i: _until(resilient, c, i))
        kt.join()
        outs = r["outcomes"]
        phases["kill_restart"] = {"requests": len(outs), "failed": sum(o[0] != "ok" for o in outs),
                                  "retried": answered["retried"], "lost": answered["lost"],
                                  "restart_s": killed.get("restart_s")}
        print(f"  kill -9 + restart: {len(outs):,} requests, {phases['kill_restart']['failed']} failed, "
              f"{answered['retried']} retried, restart {killed.get('restart_s', 0):.1f} s", flush=True)

        store_p99 = phases["store_direct"]["p99_ms"]
        result = {"records": args.records, "clients": args.clients, "threads": args.threads, "k": args.k,
                  "rounds": args.rounds,
                  "noise": NOISE, "seconds_cap": args.seconds, "requests_cap": args.requests,
                  "phases": phases,
                  "overhead_p99": {name: phases[name]["p99_ms"] / store_p99
                                   for name in ("search_vectors", "search_texts", "embeddings")},
                  "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                  "command": "python bench/serve.py " + " ".join(argv if argv is not None else sys.argv[1:])}
        errors = [line for line in service.log.read_text(errors="replace").splitlines() if "error" in line.lower()]
        result["service_errors"] = errors[:10]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
        return 0
    finally:
        if service is not None:
            service.stop()
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _until(fn, c, i):
    """``fn``, with its StopIteration (the phase is over for this client) as a marker outcome."""
    try:
        return fn(c, i)
    except StopIteration:
        return STOP


if __name__ == "__main__":
    sys.exit(main())
