"""``upgrade reembed`` on a Ray cluster: the model's forward passes spread over a pool of Ray actors.

The driver (this process) keeps the upgrade's state (its SQLite file is local to it) and runs the one loop of
:meth:`vecbridge.jobs.upgrade.Upgrade.reembed`: it syncs, picks id batches in priority order, reads their records
and texts from the source, stamps records without text, and hands each batch (records and texts) to an actor. Each
of the ``workers`` actors loads the model once (by its name, as the local run does, with
:func:`~vecbridge.runtime.models.load_model`: a name, path or ``module:function`` the workers can resolve), opens the
upgrade's target once, embeds, upserts, and returns the vectors; the driver stamps the batch (native, with its
digests and hub scores) when they come back. A stamp is only written after its upsert, so a killed driver or
worker loses at most the batches in flight, which the next run re-does; Ray re-runs a batch whose actor died (the
upsert is by id).

Each actor keeps ``in_flight`` batches queued to hide the round trips; with ``max_per_second`` it keeps one (the
driver spaces the hand-overs, and an idle actor starts a batch when it gets it, so no queue bursts past the rate).
The stop conditions are the local run's: records and spend are counted when a batch is handed over, ``limit`` and
``until`` bound what is handed over, and ``budget_seconds`` stops the hand-overs (the batches in flight are then
finished and stamped, as a local run finishes its current batch).

Actors ask for one CPU each (``num_cpus=1``); the model runs on CPU. Nothing needs a GPU (GPU nodes would take a
``num_gpus`` actor option, not offered until measured). Actors open the stores from the state's URLs, which hold no
secrets: the driver's credentials from the environment (``PGPASSWORD``, ``QDRANT_API_KEY``, ...) travel sealed with
each actor, as a local run reads them from its own. Ray is imported only here, and only when a run starts.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any

from ..errors import InputError, StoreError, VecbridgeError
from ..runtime.models import load_model
from .distributed import MAX_RETRIES, Sealed, _connected, _ray, task_error
from .upgrade import Upgrade, embed_and_write, open_target

#: batches queued per actor: one being embedded, the others on their way (hides the driver's round trips)
IN_FLIGHT = 3
#: where the connectors read credentials, and connection defaults, from: the driver's go to its actors
ENVIRONMENT = ("PGPASSWORD", "PGUSER", "PGHOST", "PGPORT", "PGDATABASE", "QDRANT_API_KEY", "MILVUS_TOKEN",
               "CHROMA_TOKEN")


class Environment:
    """The driver's store credentials on their way to an actor: printed (in a Ray error, a log, a dashboard) it
    names the variables, never their values."""

    __slots__ = ("values",)

    def __init__(self, values: dict[str, str]):
        self.values = dict(values)

    @classmethod
    def of_driver(cls) -> "Environment":
        return cls({k: os.environ[k] for k in ENVIRONMENT if os.environ.get(k)})

    def apply(self) -> None:
        os.environ.update(self.values)

    def __repr__(self) -> str:
        return f"Environment({sorted(self.values)})"

    __str__ = __repr__

    def __reduce__(self):
        return Environment, (self.values,)


class Reembedder:
    """One Ray actor: the model loaded once, the upgrade's target opened once; each call embeds and writes a batch.
    A failure to load or open is kept for :meth:`ready` to raise (one line on the driver), not retried by Ray."""

    def __init__(self, model: str, source: Sealed, field: str | None, target: Sealed | None, env: Environment):
        env.apply()
        self._error = None
        try:
            self._embed = load_model(model)
            self._target = open_target(source.url, field, target.url if target is not None else None)
        except (VecbridgeError, OSError) as exc:
            self._error = exc

    def ready(self) -> bool:
        if self._error is not None:
            raise self._error
        return True

    def embed_and_write(self, batch, texts: list[str]):
        return embed_and_write(self._embed, self._target, batch, texts)


def _cause(ray, exc: BaseException) -> BaseException:
    """What the driver raises for a failed batch: the worker's own error where it is one of ours (one line, as in a
    local run), else one line saying what Ray lost."""
    if isinstance(exc, ray.exceptions.RayActorError):
        return StoreError(f"a Ray worker re-embedding batches died ({type(exc).__name__}): run the same command "
                          f"again: the batches it held were not stamped and are re-done")
    return task_error(ray, exc)


class ActorPool:
    """``workers`` :class:`Reembedder` actors, ``in_flight`` batches queued on each; the pool interface of
    :class:`vecbridge.jobs.upgrade.InProcess`. Batches go to ready actors only (an actor the cluster cannot place
    never holds one), the least loaded first."""

    def __init__(self, ray, up: Upgrade, *, workers: int, in_flight: int):
        self._ray, self._depth = ray, max(int(in_flight), 1)
        make = ray.remote(Reembedder).options(num_cpus=1, max_restarts=MAX_RETRIES, max_task_retries=MAX_RETRIES)
        meta = up.meta
        target = Sealed(meta["target"]) if meta.get("target") and not meta.get("field") else None
        self._actors = [make.remote(meta["model"], Sealed(meta["source"]), meta.get("field"), target,
                                    Environment.of_driver()) for _ in range(int(workers))]
        self._starting = {a.ready.remote(): n for n, a in enumerate(self._actors)}
        self._load: dict[int, int] = {}     # ready actor -> batches it holds
        self._flying: dict[Any, tuple] = {}   # ref -> (key, actor)

    def free(self) -> int:
        return sum(self._depth - n for n in self._load.values())

    def starting(self) -> bool:
        return bool(self._starting)

    def submit(self, key, batch, texts: list[str]) -> None:
        n = min(self._load, key=self._load.get)
        self._flying[self._actors[n].embed_and_write.remote(batch, texts)] = (key, n)
        self._load[n] += 1

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
                    out.append((None, _cause(self._ray, exc)))
                continue
            key, n = self._flying.pop(ref)
            self._load[n] -= 1
            try:
                out.append((key, self._ray.get(ref)))
            except self._ray.exceptions.RayError as exc:
                out.append((key, _cause(self._ray, exc)))
        return out

    def close(self) -> None:
        for actor in self._actors:
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)


def reembed_on_ray(up: Upgrade, *, workers: int = 2, ray_address: str | None = None, in_flight: int = IN_FLIGHT,
                   **options) -> dict:
    """:meth:`Upgrade.reembed <vecbridge.jobs.upgrade.Upgrade.reembed>` with the batches embedded and written by
    ``workers`` Ray actors (``options``: its keyword arguments); the cluster is the one this process is connected
    to, ``ray_address``, ``$RAY_ADDRESS``, else a local one for this run."""
    _ray()   # a missing extra fails first, in one line
    if int(workers) <= 0:
        raise InputError(f"workers must be a positive number, got {workers}")
    depth = 1 if options.get("max_per_second") else in_flight
    with _connected(ray_address, workers) as ray:
        result = up.reembed(**options, pool=lambda u: ActorPool(ray, u, workers=workers, in_flight=depth))
    return {**result, "engine": "ray", "workers": int(workers)}
