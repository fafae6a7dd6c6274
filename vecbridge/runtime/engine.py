"""Where a job's work runs. Every job is written once as *plan units -> run a body over each unit -> combine*; an
:class:`Engine` runs the bodies, here (:class:`LocalEngine`) or as Ray tasks (:class:`~vecbridge.runtime.ray_engine.
RayEngine`), and the job never asks which.

A **body** is a function ``body(unit, shared)``: either a generator, which yields progress reports (anything
picklable: the job decides what a report means, e.g. ``(cursor, read, written)`` after a committed batch) and
returns its result, or a plain function that returns its result. ``shared`` is what every unit needs and is sent
once (a key index, an alignment). ``on_report(i, report)`` runs on the driver for every report of unit ``i``, in the
order the unit made them, each exactly once even when Ray re-runs a task after its node died; the results come back
in unit order.

Work that needs a long-lived resource per worker (a model loaded once) runs in a :class:`Pool`: ``engine.pool(
factory, method)`` makes ``workers`` instances of ``factory()`` and calls ``instance.method(*args)`` on them.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
from typing import Any, Callable, Protocol, Sequence

from ..connectors.base import Collection
from ..errors import InputError

Body = Callable[[Any, Any], Any]
OnReport = Callable[[int, Any], None]

#: the engines ``--engine`` offers: name -> the class, imported when asked for (Ray only when a job runs on it)
ENGINES = {"local": "vecbridge.runtime.engine:LocalEngine", "ray": "vecbridge.runtime.ray_engine:RayEngine"}


class Pool(Protocol):
    """Workers that each hold a resource: ``submit(key, *args)`` while :meth:`free`, ``wait(timeout)`` gives
    ``[(key, result or the exception that failed it)]``; :meth:`starting` says whether workers are still loading."""

    def free(self) -> int: ...

    def starting(self) -> bool: ...

    def submit(self, key, *args) -> None: ...

    def wait(self, timeout: float | None = None) -> list: ...

    def close(self) -> None: ...


class Engine(Protocol):
    """What a job needs of an engine. ``name`` is ``local`` or ``ray``; ``workers`` bodies run at a time; a job cuts
    its input into :attr:`units` pieces (key ranges) where it can, one where it cannot. ``remote``: the bodies run
    in other processes, which open the stores themselves (a job plans key ranges, and a store only one process may
    open is refused by :meth:`require`); a body is given each collection as :meth:`portable` makes it."""

    name: str
    workers: int
    remote: bool

    @property
    def units(self) -> int: ...

    def session(self) -> contextlib.AbstractContextManager: ...

    def require(self, *colls: tuple[Collection, str]) -> None: ...

    def portable(self, coll: Collection) -> Any: ...

    def run(self, body: Body, units: Sequence, *, shared=None, on_report: OnReport | None = None) -> list: ...

    def pool(self, factory: Callable[[], Any], method: str, *, in_flight: int = 1) -> Pool: ...


def is_generator(body: Body) -> bool:
    """Whether ``body`` (a function, or a :func:`functools.partial` of one) reports progress as it goes."""
    return inspect.isgeneratorfunction(body) or inspect.isgeneratorfunction(getattr(body, "func", None))


def drive(body: Body, unit, shared, on_report: Callable[[Any], None] | None = None):
    """Run one body in this process: its reports to ``on_report``, its result returned."""
    if not is_generator(body):
        return body(unit, shared)
    work = body(unit, shared)
    try:
        while True:
            try:
                report = next(work)
            except StopIteration as done:
                return done.value
            if on_report is not None:
                on_report(report)
    finally:
        work.close()   # a report that raised stops the body now (its readers, its connections), not when collected


class LocalEngine:
    """The bodies run one after the other in this process; a job reads each collection in one pass."""

    name = "local"
    workers = 1
    units = 1
    remote = False

    def session(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext(self)

    def require(self, *colls: tuple[Collection, str]) -> None:
        """Every store works here."""

    def portable(self, coll: Collection) -> Collection:
        """The collection itself: the bodies run in this process (an in-memory store, a vector-field view)."""
        return coll

    def run(self, body: Body, units: Sequence, *, shared=None, on_report: OnReport | None = None) -> list:
        out = []
        for i, unit in enumerate(units):
            out.append(drive(body, unit, shared, None if on_report is None else (lambda r, i=i: on_report(i, r))))
        return out

    def pool(self, factory: Callable[[], Any], method: str, *, in_flight: int = 1) -> Pool:
        return LocalPool(factory, method)

    def __repr__(self) -> str:
        return "LocalEngine()"


class LocalPool:
    """One worker in this process; each submitted call runs when it is handed over (its result, or the exception that
    failed it, comes back from :meth:`wait`)."""

    def __init__(self, factory: Callable[[], Any], method: str):
        self._call = getattr(factory(), method)
        self._done: list = []

    def free(self) -> int:
        return 0 if self._done else 1

    def starting(self) -> bool:
        return False

    def submit(self, key, *args) -> None:
        try:
            result = self._call(*args)
        except Exception as exc:  # noqa: BLE001 - handed back with its key, as a Ray pool does, for the job to raise
            result = exc
        self._done.append((key, result))

    def wait(self, timeout: float | None = None) -> list:
        done, self._done = self._done, []
        return done

    def close(self) -> None:
        pass


LOCAL = LocalEngine()


def make_engine(name: str = "local", *, workers: int = 2, ray_address: str | None = None,
                units_per_worker: int | None = None) -> Engine:
    """The engine ``--engine NAME --workers N --ray-address URL`` asks for (checked here, before any work)."""
    if name == "local":
        return LOCAL
    if name not in ENGINES:
        raise InputError(f"unknown engine {name!r}: choose one of {', '.join(ENGINES)}")
    module, _, cls = ENGINES[name].partition(":")
    kw = {} if units_per_worker is None else {"units_per_worker": units_per_worker}
    return getattr(importlib.import_module(module), cls)(workers=workers, address=ray_address, **kw)


def engine_of(engine: "Engine | str | None") -> Engine:
    """``engine`` itself, the local engine for ``None``, or the engine a name asks for."""
    if engine is None:
        return LOCAL
    return make_engine(engine) if isinstance(engine, str) else engine

