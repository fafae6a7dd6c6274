"""Re-embedding in the background: records picked in priority order, batch by batch, embedded and written by the
engine's pool of workers, stamped when they come back; and the query-log scores the ``hubs`` and ``queries``
priorities order by.

The driver (this process) keeps the upgrade's document (its SQLite file is local to it) and runs the one loop of
:class:`_Run`: it syncs, queues ids in priority order (one filtered scan of the stamps in the store) and hands each
batch of ids to a worker of ``engine.pool``, which reads their records and texts from the source, embeds and
writes them (:func:`~vecbridge.runtime.reembed_worker.embed_and_write`): here, when the batch is handed over, one
at a time (:class:`~vecbridge.runtime.engine.LocalPool`); on Ray (:class:`~vecbridge.runtime.ray_engine.RayPool`),
each of ``workers`` actors loads the model once (by its name, with :func:`~vecbridge.runtime.models.load_model`),
opens the source and the upgrade's target once, and keeps ``in_flight`` batches queued. The worker that writes a
batch stamps it, in the same upsert (the driver reads no record and writes no per-record row; it gets back the
ids written, and their old and new vectors for the continuous refit), so a killed driver or worker loses at most
the batches in flight, which the next run re-does (the upsert is by id).
"""
from __future__ import annotations

import hashlib
import itertools
import time
from typing import Callable

import numpy as np

from ...align.artifact import Alignment
from ...errors import InputError
from ...faultpoint import fault_point
from ...runtime.engine import engine_of
from ...runtime.models import ModelOptions
from ...runtime.record_stamps import QUEUE
from ...runtime.reembed_worker import Reembedder, embed_and_write  # noqa: F401 (read from here too)
from ...runtime.refit import RefitPairs, remap
from ...vectors import l2_normalize
from .base import HUB_K
from .state import exclusive
from .sync import Syncing

#: batches queued per Ray actor: one being embedded, the others on their way (hides the driver's round trips)
IN_FLIGHT = 3
#: records per batch when none is given, unless the model's forward pass is larger
RECORDS_PER_BATCH = 64


class Scheduling(Syncing):
    """:meth:`reembed` and :meth:`learn_queries`."""

    def reembed(self, *, limit: int | None = None, until: float | None = None, budget_seconds: float | None = None,
                priority: str = "random", batch_size: int | None = None, max_per_second: float | None = None,
                price_per_1k: float | None = None, spend_cap: float | None = None,
                on_progress: Callable[[int], None] | None = None,
                on_start: Callable[[int], None] | None = None, engine=None,
                models: ModelOptions | None = None, refit: bool = True) -> dict:
        """Replace mapped vectors by the new model's own, ``batch_size`` records at a time, until ``limit``
        records, a native ``until`` fraction, ``budget_seconds`` or the ``spend_cap`` (the upgrade's total spend at
        ``price_per_1k`` texts, kept across runs) is reached, or nothing is left; each batch is written, then
        stamped, so a killed run loses at most the batches in flight (re-done by the next run).

        ``engine`` (local by default) gives the workers that embed and write the batches: here, one at a time; on
        Ray, actors with several batches in flight (the result then says ``engine`` and ``workers``). One loop
        picks the batches and holds the stop conditions, so every engine stops alike: records and spend are counted
        when a batch is handed over (each record as a text: a spend cap counts the batches in flight at most; the
        spend kept is what was embedded), and ``max_per_second`` spaces the hand-overs (one batch queued per actor
        then).

        ``models`` says where the model runs (each Ray actor chooses its own ``auto`` device); here, the result's
        ``model_run`` is its throughput. A model call gets at most ``batch_size`` texts, whatever the model's batch
        size; without one, a batch is 64 records, or the model's forward pass where that is larger (256 on a GPU:
        smaller calls leave it idle)."""
        self.run_models(models)
        if batch_size is not None and batch_size < 1:
            raise InputError("a batch is at least 1 record")
        batch_size = batch_size or max(RECORDS_PER_BATCH, self.models.texts_per_pass(self.meta["model"]) or 0)
        if until is not None and not 0 < until <= 1:
            raise InputError("until is a fraction of the collection in (0, 1]")
        if spend_cap is not None and price_per_1k is None:
            raise InputError("a spend cap needs the model's price per 1,000 texts")
        if (spend_cap is not None and spend_cap < 0) or (price_per_1k is not None and price_per_1k < 0):
            raise InputError("prices and spend caps are at least 0")
        engine = engine_of(engine)
        with exclusive(self.state.path):   # one writer per upgrade: its spend and stamps are this run's to keep
            self._check("reembed")
            with engine.session():
                pool = engine.pool(Reembedder(self), "embed_and_write",
                                   in_flight=1 if max_per_second else IN_FLIGHT)   # loading while the state syncs
                try:
                    result = self._reembed(pool, limit=limit, until=until, budget_seconds=budget_seconds,
                                           priority=priority, batch_size=batch_size, max_per_second=max_per_second,
                                           price_per_1k=price_per_1k, spend_cap=spend_cap, on_progress=on_progress,
                                           on_start=on_start, refit=refit)
                finally:
                    pool.close()
        if engine.name != "local":
            result = {**result, "engine": engine.name, "workers": int(engine.workers)}
        elif self.models.summary():
            result = {**result, "model_run": self.models.summary()}
        return result

    def _reembed(self, pool, *, limit, until, on_start, refit, **options) -> dict:
        pairs = self.refit_pairs() if refit else None
        if pairs is not None and self.meta.get("remapping"):   # a refit's remap interrupted: finished first
            self._replace_map(Alignment.load(self.meta["remapping"]), {})
        synced = self.sync()
        counts = self.recount()
        total = sum(counts.values())
        todo = counts["mapped"] + counts["pending"]
        if until is not None:
            todo = min(todo, max(0, int(np.ceil(until * total)) - counts["native"]))
        if limit is not None:
            todo = min(todo, limit)
        if on_start:
            on_start(todo)
        run = _Run(self, pool, todo, pairs=pairs, **options)
        try:
            run.loop()
        finally:
            if pairs is not None:
                pairs.save()
            self.recount()
        self.state.event("reembed", f"{run.done:,} records")
        return {**self.status(), "reembedded": run.done, "refits": run.refits, "stopped_by": run.stopped,
                "spent": run.spent, "new_in_source": synced["added"],
                "changed_in_source": synced["changed"], "removed_from_source": synced["removed"],
                "without_text": run.no_text, "seconds": time.perf_counter() - run.t0}

    def refit_pairs(self) -> RefitPairs:
        """The exact pairs this upgrade has re-embedded (kept beside its state file), from the start's fit sample on."""
        pairs = RefitPairs(self.state.path.with_name(self.state.path.name + ".refit.npz"), self.alignment.source_dim,
                           self.alignment.target_dim)
        kept = self.state.fit_sample()
        return pairs.seed(kept[2], kept[3]) if kept is not None else pairs

    def refit(self, pairs: RefitPairs) -> dict:
        """Refit the map on ``pairs`` and, when it maps the held-out pairs better, make it the map in use (every
        record still mapped is mapped again by it). Returns the verdict."""
        method = (self.meta.get("settings") or {}).get("method") or "orthogonal"
        new, verdict = pairs.refit(self.alignment, "orthogonal" if method == "clustered" else method)
        if new is not None:
            path = self.state.path.with_name(f"{self.state.path.name.replace('.upgrade.sqlite', '')}.align."
                                             f"{verdict['pairs']}.vb")
            new.save(path)
            self.meta = self.state.update(remapping=str(path))
            self._replace_map(new, verdict)
        pairs.save()
        return verdict

    def _replace_map(self, new: Alignment, verdict: dict) -> None:
        """Map the records still mapped again with ``new`` (an interrupted remap continues), then make it the map in
        use: its file in the state, its fingerprint in the state's list of maps."""
        verdict["remapped"] = remap(self.source, self.target, new)
        fault_point("refit.remapped")
        maps = [*(self.meta.get("maps") or [{"fingerprint": self.alignment.fingerprint, "pairs": None}]),
                {"fingerprint": new.fingerprint, "pairs": verdict.get("pairs"), "gain": verdict.get("gain")}]
        self.meta = self.state.update(alignment=self.meta["remapping"], remapping=None, maps=maps)
        self._alignment = new
        self.state.event("refit", f"map {new.fingerprint[:12]} from {verdict.get('pairs', 0):,} re-embedded pairs "
                                  f"(held-out cosine +{verdict.get('gain', 0):.4f}); {verdict['remapped']:,} "
                                  f"records mapped again")

    def learn_queries(self, queries, *, k: int = HUB_K) -> dict:
        """Score every record against a log of new-model query vectors: its hub score ``r(d)`` (the mean cosine to
        its ``k`` nearest log queries: the ``hubs`` priority and the hub penalty of :meth:`search`) and how often
        the log's queries retrieve it in their top ``k`` (the ``queries`` priority). The log becomes the hub
        reference for records re-embedded later."""
        with exclusive(self.state.path):
            self._check("learn-queries")
            return self._learn_queries(queries, k=k)

    def _learn_queries(self, queries, *, k: int) -> dict:
        Q = np.asarray(queries, dtype=np.float32)
        if Q.ndim != 2 or not len(Q):
            raise InputError("the query log is empty")
        if Q.shape[1] != self.target.info().dim:
            raise InputError(f"the query log has {Q.shape[1]} dimensions, the new model's vectors "
                             f"{self.target.info().dim}: give queries encoded by the new model")
        self.state.set_reference(Q)
        self._reference = self.state.reference()
        hits: dict = {}
        Qn = l2_normalize(Q)
        for lo in range(0, len(Qn), 256):
            ids, _ = self.target.search(Qn[lo:lo + 256], k)
            for row in ids:
                for i in row:
                    hits[i] = hits.get(i, 0) + 1
        # names this log (the same log, the same name): hits counted by another rank as none
        log = hashlib.blake2b(np.ascontiguousarray(Q).tobytes(), digest_size=8).hexdigest()
        scored = self.records.rescore(self.hubness, hits, log)
        self.meta = self.state.update(hub_reference=f"a query log of {len(Q):,} queries", query_log=log)
        self.records.log = log
        self.state.event("queries", f"{len(Q):,} logged queries scored {scored:,} records")
        return {**self.status(), "queries": len(Q), "records_scored": scored, "records_retrieved": len(hits)}


class _Run:
    """One ``reembed`` loop: batches handed to the pool while it has room and no stop condition holds, each stamped
    when it comes back; a failed batch is left for the next run, and its error raised once the others landed."""

    def __init__(self, up: Scheduling, pool, todo: int, *, pairs, budget_seconds, priority, batch_size,
                 max_per_second, price_per_1k, spend_cap, on_progress):
        self.up, self.pool, self.todo, self.pairs, self.refits = up, pool, todo, pairs, []
        self.budget_seconds, self.priority, self.batch_size = budget_seconds, priority, batch_size
        self.max_per_second, self.price_per_1k, self.spend_cap = max_per_second, price_per_1k, spend_cap
        self.on_progress = on_progress
        self.t0, self.done, self.no_text, self.stopped = time.perf_counter(), 0, 0, "done"
        self.spent = float(up.meta.get("spent") or 0.0)
        self.flying: dict[int, tuple] = {}   # key -> (ids, cost at most) of each batch handed over
        self.busy: set = set()               # their ids: not picked again while in flight
        self.handed, self.committed, self.next_at, self.exhausted, self.error = 0, 0.0, None, False, None
        self.keys = itertools.count()
        self.queue: list = []                # (id, origin) queued by the last scan of the stamps, the next last
        self.origins: dict = {}              # id -> origin of the records handed over, until they land

    def moved(self, ids: list, origin: str) -> dict[str, int]:
        """What the kept counts gain and lose as ``ids`` become ``origin``."""
        out = {origin: len(ids)}
        for i in ids:
            was = self.origins.pop(i, "mapped")
            out[was] = out.get(was, 0) - 1
        return out

    def loop(self) -> None:
        while True:
            if self.pairs is not None and self.error is None and self.pairs.due():
                if self.flying:   # the batches in flight land first: a remap never races a worker's write
                    self.land(self.pool.wait(None))
                    continue
                self.refits.append(self.up.refit(self.pairs))
            more = self.error is None and self.stopped == "done" and not self.exhausted and self.handed < self.todo
            if more and self.pool.free():
                wait = self.next_at - time.perf_counter() if self.next_at is not None else 0.0
                if wait > 0:   # the rate limit: results may land meanwhile
                    if self.flying:
                        self.land(self.pool.wait(wait))
                        continue
                    time.sleep(wait)
                if self.budget_seconds is not None and time.perf_counter() - self.t0 >= self.budget_seconds:
                    self.stopped = "time budget"
                    continue
                self.hand_over()
                continue
            if not self.flying and not (more and self.pool.starting()):
                break
            self.land(self.pool.wait(None))
        if self.error is not None:
            raise self.error
        if self.next_at is not None:
            time.sleep(max(0.0, self.next_at - time.perf_counter()))

    def hand_over(self) -> None:
        """Pick the next batch of ids and hand them to the pool (the worker reads their records and texts)."""
        up, n = self.up, min(self.batch_size, self.todo - self.handed)
        if not self.queue:   # one filtered scan of the stamps in the store queues the next ids
            self.queue = up.records.queue(self.priority, limit=max(QUEUE, n), skip=self.busy)[::-1]
            if not self.queue:
                self.exhausted = True
                return
        picked = [self.queue.pop() for _ in range(min(n, len(self.queue)))]
        ids = [i for i, _ in picked]
        self.origins.update(picked)
        if not ids:
            self.exhausted = True
            return
        cost = len(ids) * (self.price_per_1k or 0.0) / 1000   # at most: a record without text costs nothing
        if self.spend_cap is not None and self.spent + self.committed + cost > self.spend_cap + 1e-9:
            self.stopped = "spend cap"
            return
        key, self.handed, self.committed = next(self.keys), self.handed + len(ids), self.committed + cost
        self.flying[key] = (ids, cost)
        self.busy.update(ids)
        if self.max_per_second:   # spaced from the hand-over itself
            self.next_at = time.perf_counter() + len(ids) / self.max_per_second
        self.pool.submit(key, ids)

    def land(self, results) -> None:
        """Count and stamp-account each batch back from the pool (written by then); a failed one is left for the
        next run."""
        up = self.up
        for key, landed in results:
            if key is None or isinstance(landed, BaseException):
                self.error = self.error or landed
                if key is not None:
                    self.busy.difference_update(self.flying[key][0])
                    self.committed -= self.flying.pop(key)[1]
                continue
            ids, cost = self.flying.pop(key)
            fault_point("reembed.batch-written")
            self.busy.difference_update(ids)
            self.committed -= cost
            if landed.no_text:   # nothing to embed: they keep their mapped vector, counted apart
                self.no_text += len(landed.no_text)
                up.count(self.moved(landed.no_text, "no-text"))
            if landed.written:
                up.count(self.moved(landed.written, "native"))
                if self.pairs is not None:
                    self.pairs.add(landed.written, landed.old, landed.new)
                if self.price_per_1k:
                    self.spent += len(landed.written) * self.price_per_1k / 1000
                    up.meta = up.state.update(spent=self.spent)
            up._drop(set(landed.gone))   # deleted from the source since the sync
            for i in landed.gone:
                self.origins.pop(i, None)
            self.done += len(landed.written)
            if self.on_progress and landed.written:
                self.on_progress(len(landed.written))
