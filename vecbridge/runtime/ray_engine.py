"""The Ray engine: a job's bodies as Ray tasks, ``workers`` at a time, on the cluster this process is connected to.

One scheduling loop (:meth:`RayEngine.run`) serves every job. Each unit is one streaming task: it yields its body's
reports, numbered, then the result; the driver hands each report to the job once, in order (a task Ray re-runs
after its node died replays its reports, which are recognised by their numbers), and keeps the results in unit
order. Tasks that are still running when a job stops are not cancelled (Ray 2.x's driver aborts when a cancelled
streaming task's reply arrives late); they end with the driver's process, and bodies are written so that a rerun
of a unit changes nothing (upserts by id, reads only).

Store URLs travel :class:`Sealed` (a password never shows in what Ray prints) and the driver's credentials from the
environment travel with each actor (:class:`Environment`). Ray is imported only when a job runs.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator, NoReturn, Sequence

from ..connectors.base import Collection
from ..connectors.url import redact
from ..errors import InputError, StoreError, VecbridgeError
from .engine import Body, OnReport, is_generator

#: how often Ray re-runs a task whose worker or node died (a replay is harmless: upserts by id, or reads)
MAX_RETRIES = 5
#: units per worker: a few more than workers, so that a slow or re-run unit does not hold up the end
UNITS_PER_WORKER = 4
#: seconds a stopped job waits for the Ray tasks it cancelled (or the actors it killed) to end
STOP_WAIT_S = 60.0
#: where the connectors read credentials, and connection defaults, from: the driver's go to its actors
ENVIRONMENT = ("PGPASSWORD", "PGUSER", "PGHOST", "PGPORT", "PGDATABASE", "QDRANT_API_KEY", "MILVUS_TOKEN",
               "CHROMA_TOKEN")


def ray_module():
    """Ray itself; a missing extra is one line."""
    try:
        import ray
    except ImportError:
        raise InputError("--engine ray needs Ray: pip install 'vecbridge[ray]'") from None
    return ray


class Sealed:
    """A store URL on its way to a Ray task: written as ``repr``/``str`` (in a Ray error, a log, a dashboard) it shows
    no password or token; the task opens the store with :attr:`url`. Credentials thus reach the workers inside the
    task's arguments (Ray's object store), never in what Ray prints."""

    __slots__ = ("url",)

    def __init__(self, url: "str | Sealed"):
        self.url = url.url if isinstance(url, Sealed) else str(url)

    def __repr__(self) -> str:
        return f"Sealed({redact(self.url)!r})"

    __str__ = __repr__

    def __reduce__(self):
        return Sealed, (self.url,)


def url_of(obj) -> str:
    """The URL of a collection, or of what names one (a URL, a :class:`Sealed` URL)."""
    if isinstance(obj, Collection):
        return obj.url
    return obj.url if isinstance(obj, Sealed) else str(obj)


class Environment:
    """The driver's connector settings (:data:`ENVIRONMENT`), applied in an actor before it opens a store. Like
    :class:`Sealed`, it never shows a value in what Ray prints."""

    __slots__ = ("values",)

    def __init__(self, values: dict[str, str]):
        self.values = dict(values)

    @classmethod
    def of_driver(cls) -> "Environment":
        return cls({k: os.environ[k] for k in ENVIRONMENT if k in os.environ})

    def apply(self) -> None:
        os.environ.update(self.values)

    def __repr__(self) -> str:
        return f"Environment({sorted(self.values)})"

    __str__ = __repr__

    def __reduce__(self):
        return Environment, (self.values,)


def task_error(ray, exc: BaseException) -> BaseException:
    """Our own error (or an OSError) inside what Ray raised, to be raised as one line as in a local run: a task's
    error arrives as ``RayTaskError`` with the worker's traceback as text, and Ray Data chains it further. ``exc``
    itself where none is inside."""
    stack, seen = [exc], set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ray.exceptions.RayTaskError):
            stack.append(getattr(e, "cause", None))
        elif isinstance(e, (VecbridgeError, OSError)):
            return e
        else:
            stack.extend([e.__cause__, e.__context__])
    return exc


def raise_one_line(ray, exc: BaseException) -> NoReturn:
    """Raise what :func:`task_error` finds inside ``exc`` without Ray's wrapper (one line, as in a local run), else
    ``exc`` itself. Call it from the ``except`` block that caught ``exc``."""
    cause = task_error(ray, exc)
    if cause is exc:
        raise exc
    raise cause from None


def _reply(ray, ref):
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        raise_one_line(ray, exc)


def run_unit(body: Body, index: int, unit, shared) -> Iterator[tuple]:
    """One unit as a Ray task (runnable without Ray): ``(index, n, report)`` for its ``n``-th report, then
    ``(index, None, result)``."""
    if not is_generator(body):
        yield index, None, body(unit, shared)
        return
    work = body(unit, shared)
    n = 0
    while True:
        try:
            report = next(work)
        except StopIteration as done:
            yield index, None, done.value
            return
        yield index, n, report
        n += 1


class RayEngine:
    """Bodies as Ray tasks, ``workers`` at a time; a job cuts its input into ``workers x units_per_worker`` key
    ranges. The cluster: the one this process is connected to, ``address``, ``$RAY_ADDRESS``, else a local Ray
    started for the job on this machine's loopback and stopped after it (never one another job started)."""

    name = "ray"
    remote = True

    def __init__(self, workers: int = 2, address: str | None = None, units_per_worker: int = UNITS_PER_WORKER):
        ray_module()   # a missing extra fails first, in one line
        if int(workers) <= 0:
            raise InputError(f"workers must be a positive number, got {workers}")
        if int(units_per_worker) <= 0:
            raise InputError(f"units per worker must be a positive number, got {units_per_worker}")
        self.workers, self.address, self.units_per_worker = int(workers), address, int(units_per_worker)
        self._ray = None

    def __repr__(self) -> str:
        return f"RayEngine(workers={self.workers}, address={redact(self.address) if self.address else None!r})"

    @property
    def units(self) -> int:
        return self.workers * self.units_per_worker

    @contextlib.contextmanager
    def session(self) -> Iterator["RayEngine"]:
        """Connected to the cluster for the job (re-entrant: a job inside a job keeps the connection)."""
        ray = ray_module()
        if self._ray is not None or ray.is_initialized():
            self._ray = ray
            yield self
            return
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        if address:
            ray.init(address=address, logging_level="WARNING", log_to_driver=False)
        else:
            ray.init(address="local", num_cpus=self.workers, include_dashboard=False, _node_ip_address="127.0.0.1",
                     logging_level="WARNING", log_to_driver=False)
        self._ray = ray
        try:
            yield self
        finally:
            self._ray = None
            ray.shutdown()

    def require(self, *colls: tuple[Collection, str]) -> None:
        """Every Ray task opens the stores itself: a store only one process may open (``capabilities.single_process``)
        would fail there, or be a different, empty one (a store in this process's memory), or be corrupted by
        concurrent writers. ``colls``: ``(collection, role)`` pairs, checked before Ray starts."""
        for coll, role in colls:
            if coll.capabilities.single_process:
                raise InputError(f"the {role} {coll.display_url} is an embedded store that one process at a time "
                                 f"can open: --engine ray needs the collection on a server or in a file:// store "
                                 f"(or use the default engine)")

    def portable(self, coll: Collection) -> Sealed:
        """The collection's URL, sealed: each task opens its own connection from it."""
        return Sealed(url_of(coll))

    def _connected(self):
        if self._ray is None:
            raise RuntimeError("RayEngine.run outside RayEngine.session()")
        return self._ray

    def run(self, body: Body, units: Sequence, *, shared=None, on_report: OnReport | None = None) -> list:
        ray = self._connected()
        task = ray.remote(run_unit).options(num_cpus=1, num_returns="streaming", max_retries=MAX_RETRIES,
                                            retry_exceptions=False)
        body_ref, shared_ref = ray.put(body), ray.put(shared)
        results: list = [None] * len(units)
        finished = [False] * len(units)
        todo = list(range(len(units)))
        running: dict = {}   # generator -> [unit index, reports delivered]
        try:
            while todo or running:
                while todo and len(running) < self.workers:
                    i = todo.pop(0)
                    running[task.remote(body_ref, i, units[i], shared_ref)] = [i, 0]
                ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
                for gen in ready:
                    seen = running[gen]
                    try:
                        ref = next(gen)
                    except StopIteration:
                        del running[gen]
                        if not finished[seen[0]]:
                            raise StoreError(f"a Ray task ended without its result (unit {seen[0]})") from None
                        continue
                    i, n, value = _reply(ray, ref)
                    if n is None:
                        results[i], finished[i] = value, True
                    elif n >= seen[1]:   # below: a re-run task replaying what its first attempt reported
                        seen[1] = n + 1
                        if on_report is not None:
                            on_report(i, value)
        except BaseException:
            # the driver stops (an error, a callback that raised, Ctrl-C): its tasks stop with it, and nothing they
            # hold writes after this job has raised (a unit interrupted is re-done from its checkpoint next time)
            for gen in running:
                with contextlib.suppress(Exception):
                    ray.cancel(gen, force=True)
            if running:
                with contextlib.suppress(Exception):
                    ray.wait([gen.completed() for gen in running], num_returns=len(running), timeout=STOP_WAIT_S)
            raise
        return results

    def pool(self, factory: Callable[[], Any], method: str, *, in_flight: int = 1) -> "RayPool":
        return RayPool(self._connected(), factory, method, workers=self.workers, in_flight=in_flight)


class _Worker:
    """One Ray actor: ``factory()`` made once (a model loaded, a store opened), then ``method`` called per item. A
    failure to start is kept for :meth:`ready` to raise (one line on the driver), not retried by Ray."""

    def __init__(self, factory: Callable[[], Any], method: str, env: Environment):
        env.apply()
        self._error = None
        try:
            self._call = getattr(factory(), method)
        except (VecbridgeError, OSError) as exc:
            self._error = exc

    def ready(self) -> bool:
        if self._error is not None:
            raise self._error
        return True

    def call(self, *args):
        return self._call(*args)


class RayPool:
    """``workers`` actors, ``in_flight`` items queued on each; items go to ready actors only (an actor the cluster
    cannot place never holds one), the least loaded first."""

    def __init__(self, ray, factory: Callable[[], Any], method: str, *, workers: int, in_flight: int):
        self._ray, self._depth = ray, max(int(in_flight), 1)
        make = ray.remote(_Worker).options(num_cpus=1, max_restarts=MAX_RETRIES, max_task_retries=MAX_RETRIES)
        self._actors = [make.remote(factory, method, Environment.of_driver()) for _ in range(int(workers))]
        self._starting = {a.ready.remote(): n for n, a in enumerate(self._actors)}
        self._load: dict[int, int] = {}     # ready actor -> items it holds
        self._flying: dict[Any, tuple] = {}   # ref -> (key, actor)

    def free(self) -> int:
        return sum(self._depth - n for n in self._load.values())

    def starting(self) -> bool:
        return bool(self._starting)

    def submit(self, key, *args) -> None:
        n = min(self._load, key=self._load.get)
        self._flying[self._actors[n].call.remote(*args)] = (key, n)
        self._load[n] += 1

    def _cause(self, exc: BaseException) -> BaseException:
        if isinstance(exc, self._ray.exceptions.RayActorError):
            return StoreError(f"a Ray worker died ({type(exc).__name__}): run the same command again: what it held "
                              f"was not recorded and is re-done")
        return task_error(self._ray, exc)

    def wait(self, timeout: float | None = None) -> list:
        refs = [*self._starting, *self._flying]
        if not refs:
            return []
        ready, _ = self._ray.wait(refs, num_returns=1, timeout=timeout)
        out = []
        for ref in ready:
            if ref in self._starting:
                n = self._starting.pop(ref)
                try:
                    self._ray.get(ref)
                    self._load[n] = 0
                except self._ray.exceptions.RayError as exc:
                    out.append((None, self._cause(exc)))
                continue
            key, n = self._flying.pop(ref)
            self._load[n] -= 1
            try:
                out.append((key, self._ray.get(ref)))
            except self._ray.exceptions.RayError as exc:
                out.append((key, self._cause(exc)))
        return out

    def close(self) -> None:
        """Kill every actor, then wait (at most :data:`STOP_WAIT_S`) until each item it held has ended: a kill is
        asynchronous, and an item still running could otherwise write after the job that used the pool returned."""
        held = [*self._starting, *self._flying]
        for actor in self._actors:
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
        if held:
            with contextlib.suppress(Exception):
                self._ray.wait(held, num_returns=len(held), timeout=STOP_WAIT_S)
        self._starting, self._flying, self._load = {}, {}, {}
