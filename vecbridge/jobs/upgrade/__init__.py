"""A model upgrade on a live collection: map now, re-embed in the background, cut over, roll back, finalize.

``start`` fits the map on a re-embedded sample (or takes one), writes mapped vectors *beside* the old ones — a new
vector field where the store has named vectors (PostgreSQL+pgvector, Qdrant), a new collection elsewhere — and
stamps every record in the upgrade's state file (:mod:`vecbridge.jobs.upgrade.state`). ``reembed`` then replaces
mapped vectors by the new model's own, batch by batch, resumable after ``kill -9``, picking up records the source
gained meanwhile; ``search`` serves new-model queries over the upgrade's vectors at every stage (optionally fused
with old-model queries over the old vectors). ``cutover`` and ``rollback`` move what the store serves — a
PostgreSQL view in one transaction — and the state's serving pointer; ``finalize`` ends the upgrade. The old
vectors are never written.
"""
from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from ...align.artifact import Alignment
from ...align.methods import method as method_of
from ...connectors import connect
from ...connectors.base import Collection, VectorBatch
from ...connectors.url import redact
from ...errors import InputError, StoreError, UsageError
from ...faultpoint import fault_point
from ...fs import require_writable
from ...pairing.reembed import _texts, reembed_pairs
from ...quality.scoring import hub_penalty
from ...runtime.checkpoint import Checkpoint
from ...runtime.engine import engine_of
from ...runtime.guard import refuse_inputs_as_target
from ...runtime.models import load_model
from ...runtime.open import load_alignment, open_collection
from ...vectors import l2_normalize
from ..rewrite import migrate, preflight
from .state import UpgradeState, exclusive, record_digest

STAGES = ("mapped", "cutover", "rolled-back", "finalized")
#: the old query's weights tried by :meth:`Upgrade.tune_fusion` (``inf``: the old model alone, i.e. staying)
FUSION_BETAS = (0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, float("inf"))
#: the hub penalty's weights tried by :meth:`Upgrade.tune_fusion` (0: no penalty)
HUB_WEIGHTS = (0.0, 0.25, 0.5, 1.0)
#: reference queries per record in a hub score (``r(d)``: mean cosine to its nearest reference queries)
HUB_K = 10
_SECRET_PARAMS = ("password", "api_key", "token")
#: stores whose credential is ``user:password`` as one token: a user without its password would shadow the
#: environment's token (``MILVUS_TOKEN``), so the state keeps neither
_USER_IN_TOKEN = ("milvus",)


def url_without_secrets(url: str) -> str:
    """The URL the state file keeps: no password, no secret query values (they come from the environment, as for
    every command: ``PGPASSWORD``, ``QDRANT_API_KEY``, ``MILVUS_TOKEN`` ...)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        netloc = host if parts.scheme.lower() in _USER_IN_TOKEN else f"{user.split(':', 1)[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if not any(s in k.lower() for s in _SECRET_PARAMS)])
    out = urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    return out if out.startswith(f"{parts.scheme}://") else f"{parts.scheme}://{out.split(':', 1)[1]}"


def _has_secrets(url: str) -> bool:
    """Whether ``url`` carries a credential the state file leaves out (later commands read it from the
    environment)."""
    parts = urlsplit(url)
    return parts.password is not None or any(s in k.lower() for k, _ in parse_qsl(parts.query) for s in _SECRET_PARAMS)


def default_state_path(source: Collection) -> Path:
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(source.identity))[-80:].strip("_")
    return Path.cwd() / f"{name}.upgrade.sqlite"


def open_target(source: str, field: str | None, target: str | None) -> Collection:
    """Where an upgrade writes its new vectors: the vector ``field`` of the source, else the collection ``target``
    (the driver and each Ray worker of :mod:`vecbridge.jobs.distributed_reembed` open it alike)."""
    if field:
        return connect(source).with_vector_field(field)
    return connect(target)


def embed_and_write(embed, target: Collection, batch: VectorBatch, texts: list[str]) -> np.ndarray:
    """One batch of ``reembed``: the new model run on ``texts`` (one per record of ``batch``), the records upserted
    with its vectors, which are returned (for the hub scores). The local run and each Ray actor run this."""
    vectors = np.asarray(embed(texts), dtype=np.float32)
    target.upsert(batch.with_vectors(vectors))
    return vectors


class InProcess:
    """The local run's pool for :meth:`Upgrade.reembed`: each batch is embedded and written here, when it is handed
    over, one at a time. A pool takes ``submit(key, batch, texts)`` while ``free()``, and ``wait(timeout)`` returns
    ``[(key, vectors or the exception that failed it)]``; ``starting()`` says whether workers are still loading."""

    def __init__(self, up: "Upgrade"):
        self._up, self._done = up, []

    def free(self) -> int:
        return 0 if self._done else 1

    def starting(self) -> bool:
        return False

    def submit(self, key, batch: VectorBatch, texts: list[str]) -> None:
        self._done.append((key, embed_and_write(self._up.model, self._up.target, batch, texts)))

    def wait(self, timeout: float | None = None) -> list:
        done, self._done = self._done, []
        return done

    def close(self) -> None:
        pass


class Upgrade:
    """An upgrade under way, opened from its state file: the collections, the models, and the jobs on them."""

    def __init__(self, state: UpgradeState):
        self.state = state
        self.meta = state.meta
        self.source = connect(self.meta["source"], read_only=True)
        self.target = self._target()
        self._model = None
        self._alignment = None
        self._reference = state.reference()

    @classmethod
    def open(cls, path) -> "Upgrade":
        return cls(UpgradeState.open(path))

    def _target(self) -> Collection:
        return open_target(self.meta["source"], self.meta.get("field"), self.meta.get("target"))

    @property
    def model(self):
        if self._model is None:
            self._model = load_model(self.meta["model"])
        return self._model

    @property
    def alignment(self) -> Alignment:
        if self._alignment is None:
            self._alignment = load_alignment(self.meta["alignment"])[0]
        return self._alignment

    def hubness(self, new_vectors) -> np.ndarray | None:
        """Hub scores ``r(d)`` of new vectors against the reference queries (None before there are any)."""
        if self._reference is None or not len(new_vectors):
            return None
        return hub_penalty(new_vectors, self._reference, HUB_K)

    def close(self) -> None:
        self.state.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- stages -----------------------------------------------------------------------------------------------------
    def status(self) -> dict:
        counts = self.state.counts()
        total = sum(counts.values())
        return {"state": str(self.state.path), "stage": self.meta["stage"], "serving": self.meta["serving"],
                "serving_via": self.meta.get("serving_via"), "switching": self.meta.get("switching"),
                "source": redact(self.meta["source"]), "vectors": self.meta.get("field") or
                redact(self.meta["target"]), "model": self.meta["model"], "alignment": self.meta["alignment"],
                "text_field": self.meta["text_field"], "counts": counts, "total": total,
                "native_fraction": counts["native"] / total if total else 0.0,
                "fusion_beta": "old model alone" if self.meta.get("fusion_stays") else self.meta.get("fusion_beta"),
                "hub_weight": self.meta.get("hub_weight", 0.0),
                "hub_reference": self.meta.get("hub_reference"), "dropped": self.meta.get("dropped"),
                "dropping": self.meta.get("dropping"),
                "probe": self.meta.get("probe"),
                "events": self.state.events()}

    def _started(self) -> None:
        """Re-read the state (another run may have moved it) and refuse an upgrade whose start did not finish."""
        self.meta = self.state.meta
        if self.meta["stage"] == "starting":
            raise InputError(f"the upgrade's start did not finish ({self.state.path}): run the same `vecbridge "
                             f"upgrade start` again to complete it")
        if self.meta.get("dropping"):
            raise InputError(f"finalize stopped while dropping {self.meta['dropping']} ({self.state.path}): run "
                             f"`vecbridge upgrade finalize --drop-old --yes` again to complete it")

    def _move(self, to_stage: str, allowed_from: tuple[str, ...], serving: str) -> dict:
        with exclusive(self.state.path):
            self._started()
            pending = self.meta.get("switching")
            self._complete_switch()
            stage = self.meta["stage"]
            if stage not in allowed_from and (pending or {}).get("stage") != to_stage:   # rerun: completed above
                raise InputError(f"the upgrade is {stage}: {to_stage} is possible only from "
                                 f"{' or '.join(allowed_from)}")
            if serving == "new":   # what is served must hold every record the source holds now
                self.sync()
            self._switch(to_stage, serving)
        return self.status()

    def _switch(self, to_stage: str, serving: str) -> None:
        """Intent, switch, confirm: the state says where it is going before the store is switched, and where it is
        once it was, so a run killed in between leaves an intent that the next cutover, rollback or finalize
        completes first (switching the store again is harmless: a view or alias is pointed, not toggled)."""
        self.meta = self.state.update(switching={"stage": to_stage, "serving": serving})
        via = self._serve(serving)
        fault_point(f"{to_stage}.switched")
        self.meta = self.state.update(stage=to_stage, serving=serving, serving_via=via, switching=None)
        self.state.event(to_stage, f"serving the {serving} model's vectors through {via}")

    def _complete_switch(self) -> None:
        """Finish a cutover or rollback that was interrupted between its intent and its confirmation."""
        pending = self.meta.get("switching")
        if pending:
            self._switch(pending["stage"], pending["serving"])

    def cutover(self) -> dict:
        """Serve the new model's vectors (where the store has a serving view, switched in one transaction), after
        bringing them up to the source (records added or changed since the last ``reembed`` get mapped vectors)."""
        return self._move("cutover", ("mapped", "rolled-back"), "new")

    def rollback(self) -> dict:
        """Serve the old model's vectors again, exactly as before the upgrade (they were never written)."""
        return self._move("rolled-back", ("cutover",), "old")

    def finalize(self, *, drop_old: bool = False) -> dict:
        """End the upgrade after a cutover, once every record is native: no more rollback. The old vectors stay
        unless ``drop_old`` (now, or in a later call once finalized): then the old vector column is removed
        (PostgreSQL+pgvector) or, when the new vectors are a collection of their own, the old collection is
        dropped."""
        with exclusive(self.state.path):
            self.meta = self.state.meta
            if self.meta.get("dropping"):   # a drop killed before the state recorded it: this run completes it
                self._drop_recorded()
                return self.status()
            self._started()
            self._complete_switch()
            if self.meta["stage"] == "finalized":
                if not drop_old or self.meta.get("dropped"):
                    raise InputError("the upgrade is already finalized" + (
                        f" and {self.meta['dropped']} was dropped" if self.meta.get("dropped") else ""))
                self._drop_recorded()
                return self.status()
            if self.meta["stage"] != "cutover":
                raise InputError(f"the upgrade is {self.meta['stage']}: finalize after a cutover")
            self.sync()
            c = self.state.counts()
            waiting, no_text = c["mapped"] + c["pending"], c["no-text"]
            if waiting or no_text:
                why = ([f"{waiting:,} still have mapped vectors: run `vecbridge upgrade reembed` to the end first"]
                       if waiting else []) + ([
                    f"{no_text:,} without text in {self.meta['text_field']!r} keep their mapped vectors: give them "
                    f"text and run `vecbridge upgrade reembed`, or delete them from the source"] if no_text else [])
                raise InputError(f"{waiting + no_text:,} records have no native vector yet: {'; '.join(why)}")
            if drop_old:
                self._drop_recorded()
            else:
                fault_point("finalize.dropped")   # (nothing dropped: the same point, for the crash tests)
                self.meta = self.state.update(stage="finalized", dropped=None)
                self.state.event("finalized", "old vectors kept: drop them when ready")
        return self.status()

    def _drop_recorded(self) -> None:
        """Intent, drop, record (as :meth:`_switch`): the state says the old vectors are being dropped before they
        are, and that the upgrade is finalized with them dropped once they are, so a run killed in between leaves an
        intent that the next ``finalize`` (or ``status``, once they are gone) completes, never a state that still
        counts on old vectors the store no longer holds."""
        finalizing = self.meta["stage"] != "finalized"
        if not self.meta.get("dropping"):
            self.meta = self.state.update(dropping=self._old_vectors())
        dropped = self._drop_old()
        fault_point("finalize.dropped")
        self.meta = self.state.update(stage="finalized", dropped=dropped, dropping=None)
        self.state.event("finalized" if finalizing else "dropped", f"dropped {dropped}" if finalizing else dropped)

    def settle(self) -> None:
        """Record a ``finalize --drop-old`` that was killed after the old vectors were dropped and before the state
        said so (what ``status`` does first). Only the state is written; a drop not done yet is left to
        ``finalize``, and a busy upgrade (another run holds it) is left as it is."""
        self.meta = self.state.meta
        if not self.meta.get("dropping") or self._old_held():
            return
        try:
            with exclusive(self.state.path):
                self.meta = self.state.meta
                if self.meta.get("dropping"):
                    self._drop_recorded()   # the old vectors are gone: nothing is dropped, the state records it
        except StoreError:
            pass

    def _old_field(self) -> str:
        return self.meta.get("source_field") or connect(self.meta["source"]).vector_field

    def _old_vectors(self) -> str:
        """The old vectors, in words: what ``finalize --drop-old`` drops."""
        if self.meta.get("field"):
            return f"the old vector field {self._old_field()!r}"
        return f"the old collection {redact(self.meta['source'])}"

    def _old_held(self) -> bool:
        """Whether the store still holds the old vectors (the source's old field is read through the new one's
        view: the source's own may be gone)."""
        if self.meta.get("field"):
            return self._old_field() in self.target.info().vector_fields
        return connect(self.meta["source"]).exists()

    def _drop_old(self) -> str:
        """Remove the old vectors (the source's old vector field, or the old collection) unless they are gone
        already (a drop killed before the state recorded it). Returns what was dropped."""
        if self._old_held():
            old = connect(self.meta["source"])
            if self.meta.get("field"):
                old.drop_vector_field(self._old_field())
            else:
                old.drop()
        return self._old_vectors()

    def _serve(self, which: str) -> str:
        """Switch what the store serves, where it can: a pgvector view ``<table>_serving`` over the serving vector
        column, or a Qdrant / Milvus alias ``<collection>_serving`` over the serving collection (new vectors in a
        new collection of the same server). Elsewhere nothing in the store moves: the answer says what clients must
        query instead. Returns how it is served."""
        field = self.meta.get("field")
        view = getattr(self.source, "serving_view", None)
        if view is not None and field:
            name = view(field if which == "new" else self.source.vector_field)
            return f"view {name}"
        same_store = self.target.identity.location == self.source.identity.location and \
            self.target.identity.store == self.source.identity.store
        has_alias = type(self.source).point_alias is not Collection.point_alias
        if not field and same_store and has_alias:
            alias = f"{self.source.identity.name}_serving"
            (self.target if which == "new" else self.source).point_alias(alias)
            return f"alias {alias}"
        if field:   # named vectors without a view (Qdrant): a query names the vector it searches
            name = field if which == "new" else self.meta.get("source_field")
            vector = f"the named vector {name!r} (using={name!r})" if name else "the default vector (no using=)"
            return (f"nothing switched (this store has no serving view): clients query {vector} of "
                    f"{redact(self.meta['source'])}")
        where = self.meta["target"] if which == "new" else self.meta["source"]
        why = "the new collection is on another server: no alias spans both" if has_alias else "this store has no alias"
        return f"nothing switched ({why}): clients query {redact(where)}"

    # --- re-embedding -----------------------------------------------------------------------------------------------
    def sync(self) -> dict:
        """Bring the state up to the source. Records added or changed since their new vector was made (a changed
        old vector or text) get the map of their current old vector, written now so that nothing served is stale,
        and are stamped ``pending`` (re-embedded first); records gone from the source are deleted from the upgrade's
        own collection (a new vector field goes with its record) and forgotten.
        Returns ``{"added", "changed", "removed"}``."""
        return self._compare(write=True)

    def changes(self) -> dict:
        """What :meth:`sync` would pick up now (``{"added", "changed", "removed"}``), writing nothing."""
        return self._compare(write=False)

    def _compare(self, *, write: bool) -> dict:
        added = changed = 0
        text_field = self.meta["text_field"]
        with self.state.seen() as seen:
            for batch in self.source.scan(batch_size=2000):
                seen(batch.ids)
                digests = _digests(batch, text_field)
                known = self.state.digests(batch.ids)
                stale = [j for j, (i, d) in enumerate(zip(batch.ids, digests))
                         if i not in known or (known[i] is not None and known[i] != d)]
                if not stale:
                    continue
                n_new = sum(batch.ids[j] not in known for j in stale)
                added, changed = added + n_new, changed + len(stale) - n_new
                if not write:
                    continue
                part = batch.take(np.asarray(stale))
                mapped = self.alignment.transform(part.vectors).astype(np.float32)
                self.target.upsert(part.with_vectors(mapped))
                fault_point("reembed.synced")
                self.state.stamp(part.ids, "pending", self.alignment.fingerprint, digests=[digests[j] for j in stale],
                                 hubness=self.hubness(mapped))
            gone = seen.missing()
        if write:
            self._drop(gone)
            if added or changed or gone:
                self.state.event("sync", f"{added:,} added, {changed:,} changed, {len(gone):,} removed in the source")
        return {"added": added, "changed": changed, "removed": len(gone)}

    def _drop(self, gone) -> None:
        """Records gone from the source: deleted from the upgrade's own collection (a new vector field goes with its
        record), then forgotten, in that order (a run killed in between deletes them again)."""
        if gone:
            if not self.meta.get("field"):
                self.target.delete(list(gone))
            self.state.forget(gone)

    def reembed(self, *, limit: int | None = None, until: float | None = None, budget_seconds: float | None = None,
                priority: str = "random", batch_size: int = 64, max_per_second: float | None = None,
                price_per_1k: float | None = None, spend_cap: float | None = None,
                on_progress: Callable[[int], None] | None = None,
                on_start: Callable[[int], None] | None = None, pool: Callable[["Upgrade"], Any] | None = None,
                engine=None) -> dict:
        """Replace mapped vectors by the new model's own, ``batch_size`` records at a time, until ``limit``
        records, a native ``until`` fraction, ``budget_seconds`` or the ``spend_cap`` (the upgrade's total spend at
        ``price_per_1k`` texts, kept across runs) is reached, or nothing is left; each batch is written, then
        stamped, so a killed run loses at most the batches in flight (re-done by the next run).

        ``pool(upgrade)`` makes what embeds and writes the batches (:class:`InProcess` by default: here, one at a
        time; :mod:`vecbridge.jobs.distributed_reembed`: Ray actors, several batches in flight). This loop alone
        picks the batches, holds the stop conditions and stamps, so both runs stop and stamp alike: records, texts
        and spend are counted when a batch is handed over (a spend cap counts the batches in flight), and
        ``max_per_second`` spaces the hand-overs as a local run spaces its batches."""
        if until is not None and not 0 < until <= 1:
            raise InputError("until is a fraction of the collection in (0, 1]")
        if spend_cap is not None and price_per_1k is None:
            raise InputError("a spend cap needs the model's price per 1,000 texts")
        if (spend_cap is not None and spend_cap < 0) or (price_per_1k is not None and price_per_1k < 0):
            raise InputError("prices and spend caps are at least 0")
        engine = engine_of(engine)
        if engine.name == "ray" and pool is None:  # temporary: the Ray twin, until the engine seam runs it
            from ..distributed_reembed import reembed_on_ray

            return reembed_on_ray(self, workers=engine.workers, ray_address=engine.address, limit=limit, until=until,
                                  budget_seconds=budget_seconds, priority=priority, batch_size=batch_size,
                                  max_per_second=max_per_second, price_per_1k=price_per_1k, spend_cap=spend_cap,
                                  on_progress=on_progress, on_start=on_start)
        with exclusive(self.state.path):   # one writer per upgrade: its spend and stamps are this run's to keep
            self._started()
            if self.meta["stage"] == "finalized":
                raise InputError("the upgrade is finalized")
            workers = (pool or InProcess)(self)   # Ray actors load the model while the state is synced
            try:
                return self._reembed(workers, limit=limit, until=until, budget_seconds=budget_seconds,
                                     priority=priority, batch_size=batch_size, max_per_second=max_per_second,
                                     price_per_1k=price_per_1k, spend_cap=spend_cap, on_progress=on_progress,
                                     on_start=on_start)
            finally:
                workers.close()

    def _reembed(self, pool, *, limit, until, budget_seconds, priority, batch_size, max_per_second, price_per_1k,
                 spend_cap, on_progress, on_start) -> dict:
        synced = self.sync()
        counts = self.state.counts()
        total = sum(counts.values())
        todo = counts["mapped"] + counts["pending"]
        if until is not None:
            todo = min(todo, max(0, int(np.ceil(until * total)) - counts["native"]))
        if limit is not None:
            todo = min(todo, limit)
        if on_start:
            on_start(todo)
        t0, done, no_text, stopped = time.perf_counter(), 0, 0, "done"
        spent = float(self.meta.get("spent") or 0.0)
        flying: dict[int, tuple] = {}   # key -> (ids, records, has, digests, cost) of each batch handed over
        busy: set = set()               # their ids: not picked again while in flight
        handed, committed, next_at, exhausted, error = 0, 0.0, None, False, None
        keys = itertools.count()

        def land(results) -> None:
            """Stamp each batch back from the pool (written by then); a failed one is left for the next run."""
            nonlocal done, spent, committed, error
            for key, vectors in results:
                if key is None or isinstance(vectors, BaseException):
                    error = error or vectors
                    if key is not None:
                        busy.difference_update(flying[key][0])
                        committed -= flying.pop(key)[4]
                    continue
                ids, records, has, digests, cost = flying.pop(key)
                fault_point("reembed.batch-written")
                busy.difference_update(ids)
                committed -= cost
                if has:
                    self.state.stamp([records.ids[j] for j in has], "native", self.meta["model"],
                                     hubness=self.hubness(vectors), digests=digests)
                    if price_per_1k:
                        spent += cost
                        self.meta = self.state.update(spent=spent)
                self._drop(set(ids) - set(records.ids))   # deleted from the source since the sync
                done += len(has)
                if on_progress and has:
                    on_progress(len(has))

        while True:
            more = error is None and stopped == "done" and not exhausted and handed < todo
            if more and pool.free():
                wait = next_at - time.perf_counter() if next_at is not None else 0.0
                if wait > 0:   # the rate limit: results may land meanwhile
                    if flying:
                        land(pool.wait(wait))
                        continue
                    time.sleep(wait)
                if budget_seconds is not None and time.perf_counter() - t0 >= budget_seconds:
                    stopped = "time budget"
                    continue
                n = min(batch_size, todo - handed)
                ids = [i for i in self.state.to_reembed(n + len(busy), priority) if i not in busy][:n]
                if not ids:
                    exhausted = True
                    continue
                records = self.source.get(ids)
                texts = [p.get(self.meta["text_field"]) for p in records.payloads]
                has = [j for j, t in enumerate(texts) if isinstance(t, str) and t]
                cost = len(has) * (price_per_1k or 0.0) / 1000
                if spend_cap is not None and spent + committed + cost > spend_cap + 1e-9:
                    stopped = "spend cap"
                    continue
                if len(has) < len(records):   # nothing to embed: they keep their mapped vector, counted apart
                    no_text += len(records) - len(has)
                    missing = {records.ids[j] for j in range(len(records)) if j not in set(has)}
                    self.state.stamp([i for i in ids if i in missing], "no-text", "kept its mapped vector")
                key, handed, committed = next(keys), handed + len(has), committed + cost
                flying[key] = (ids, records, has, [record_digest(records.vectors[j], texts[j]) for j in has], cost)
                busy.update(ids)
                if max_per_second:   # spaced from the hand-over itself, not from the read before it
                    next_at = time.perf_counter() + len(has) / max_per_second
                if has:
                    pool.submit(key, records.take(np.asarray(has)), [texts[j] for j in has])
                else:
                    land([(key, None)])
                continue
            if not flying and not (more and pool.starting()):
                break
            land(pool.wait(None))
        if error is not None:
            raise error
        if next_at is not None:
            time.sleep(max(0.0, next_at - time.perf_counter()))
        self.state.event("reembed", f"{done:,} records")
        return {**self.status(), "reembedded": done, "stopped_by": stopped, "spent": spent,
                "new_in_source": synced["added"],
                "changed_in_source": synced["changed"], "removed_from_source": synced["removed"],
                "without_text": no_text, "seconds": time.perf_counter() - t0}

    def learn_queries(self, queries, *, k: int = HUB_K) -> dict:
        """Score every record against a log of new-model query vectors: its hub score ``r(d)`` (the mean cosine to
        its ``k`` nearest log queries: the ``hubs`` priority and the hub penalty of :meth:`search`) and how often
        the log's queries retrieve it in their top ``k`` (the ``queries`` priority). The log becomes the hub
        reference for records re-embedded later."""
        with exclusive(self.state.path):
            self._started()
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
        scored = 0
        for batch in self.target.scan(batch_size=2000):
            self.state.score("hubness", batch.ids, self.hubness(batch.vectors))
            scored += len(batch)
        hits: dict = {}
        Qn = l2_normalize(Q)
        for lo in range(0, len(Qn), 256):
            ids, _ = self.target.search(Qn[lo:lo + 256], k)
            for row in ids:
                for i in row:
                    hits[i] = hits.get(i, 0) + 1
        self.state.score("query_hits", list(hits), list(hits.values()), reset=True)
        self.meta = self.state.update(hub_reference=f"a query log of {len(Q):,} queries")
        self.state.event("queries", f"{len(Q):,} logged queries scored {scored:,} records")
        return {**self.status(), "queries": len(Q), "records_scored": scored, "records_retrieved": len(hits)}

    # --- serving ----------------------------------------------------------------------------------------------------
    def _candidates(self, q_new: np.ndarray, q_old: np.ndarray | None, k_candidates: int):
        """Per query: ``(ids, cos_new, cos_old, hub)`` over its candidates, the union of the new search's and (with
        old-model queries) the old search's top ``k_candidates``, in the order returned. Records the upgrade no
        longer holds (gone from the source) are left out; ``hub`` is 0 where a record has no hub score."""
        ids_n, _ = self.target.search(q_new, k_candidates)
        ids_o = self.source.search(q_old, k_candidates)[0] if q_old is not None else [[]] * len(q_new)
        cands = [list(dict.fromkeys(list(n) + list(o))) for n, o in zip(ids_n, ids_o)]
        held = self.state.scores_of({i for row in cands for i in row})   # one lookup and one get per store
        flat = [i for i in dict.fromkeys(i for row in cands for i in row) if i in held]
        new_v = self.target.get(flat)
        vn = dict(zip(new_v.ids, l2_normalize(new_v.vectors)))
        vo = {}
        if q_old is not None:
            old_v = self.source.get(flat)
            vo = dict(zip(old_v.ids, l2_normalize(old_v.vectors)))
        out = []
        for qi, cand in enumerate(cands):
            both = [i for i in cand if i in held and i in vn and (q_old is None or i in vo)]
            out.append((both, np.array([vn[i] @ q_new[qi] for i in both], dtype=np.float32),
                        np.array([vo[i] @ q_old[qi] for i in both], dtype=np.float32) if q_old is not None else None,
                        np.array([held[i] or 0.0 for i in both], dtype=np.float32)))
        return out

    @staticmethod
    def _score(cos_new: np.ndarray, cos_old: np.ndarray | None, hub: np.ndarray, beta: float, weight: float):
        """``(cos_new + beta cos_old) / (1 + beta) - weight r(d)``; ``beta = inf`` is the old model alone (staying,
        no penalty: the hub score belongs to the new vectors)."""
        if cos_old is not None and np.isinf(beta):
            return cos_old
        s = cos_new if cos_old is None or beta == 0 else (cos_new + beta * cos_old) / (1.0 + beta)
        return s - weight * hub if weight else s

    def _recalls(self, queries_new, queries_old, relevant: list, settings, *, k: int, k_candidates: int) -> dict:
        """Recall@k of each ``(beta, hub weight)`` setting on queries with known answers (``relevant[i]`` is the id of
        query i's relevant record), all from one candidate pool per query."""
        q_new = l2_normalize(np.asarray(queries_new, dtype=np.float32))
        q_old = l2_normalize(np.asarray(queries_old, dtype=np.float32))
        if not (len(q_new) == len(q_old) == len(relevant)) or not len(relevant):
            raise InputError("measuring needs the same queries in both models and the id of each one's relevant "
                             "record")
        cands = self._candidates(q_new, q_old, k_candidates)
        has_hub = any(h.any() for _, _, _, h in cands)
        out = {}
        for beta, w in settings(has_hub):
            hits = 0
            for (ids, cn, co, hub), rel in zip(cands, relevant):
                order = np.argsort(-self._score(cn, co, hub, beta, w), kind="stable")[:k]
                hits += rel in {ids[j] for j in order}
            out[beta, w] = hits / len(relevant)
        return out

    def tune_fusion(self, queries_new, queries_old, relevant: list, *, k: int = 10, k_candidates: int = 100) -> dict:
        """Choose the old query's weight ``beta`` and the hub penalty's weight on queries with known answers
        (``relevant[i]`` is the id of query i's relevant record): the grid includes the old model alone (``inf``),
        so the choice serves at least as well as staying on the old model on these queries. Saved in the state;
        ``search`` uses them by default. The penalty is tried once records have hub scores (from the start's
        re-embedded sample, or a query log: :meth:`learn_queries`)."""
        weights = []

        def grid(has_hub):
            weights.extend(HUB_WEIGHTS if has_hub else (0.0,))
            return [(b, w) for b in FUSION_BETAS for w in (weights if np.isfinite(b) else (0.0,))]

        recall = self._recalls(queries_new, queries_old, relevant, grid, k=k, k_candidates=k_candidates)
        # ties: the lightest penalty, then the smallest old-model weight (the old model alone last)
        best_beta, best_w = max(recall, key=lambda bw: (recall[bw], -bw[1], -bw[0] if np.isfinite(bw[0]) else -1e9))
        stays = bool(np.isinf(best_beta))
        self.meta = self.state.update(fusion_beta=None if stays else best_beta, fusion_stays=stays,
                                      hub_weight=best_w)
        self.state.event("tuned", f"beta {best_beta}, hub weight {best_w} on {len(relevant):,} queries")
        by_beta = {("inf" if np.isinf(b) else b): max(r for (bb, _), r in recall.items() if bb == b)
                   for b in FUSION_BETAS}
        return {"beta": "old model alone" if stays else best_beta, "hub_weight": best_w,
                "recall": recall[best_beta, best_w], "staying": recall[np.inf, 0.0],
                "new_model_only": recall[0.0, 0.0], "n_queries": len(relevant), "recall_by_beta": by_beta,
                "hub_weights_tried": list(weights)}

    def measure(self, queries_new, queries_old, relevant: list, *, k: int = 10, k_candidates: int = 100) -> dict:
        """Recall@k on queries with known answers as served now (the tuned weights, or fusion with beta 1 and no
        penalty before any tuning), against the new model alone and staying on the old model. Kept in the state as
        the latest probe (``status`` shows it)."""
        beta = np.inf if self.meta.get("fusion_stays") else float(self.meta.get("fusion_beta") or 1.0)
        w = float(self.meta.get("hub_weight") or 0.0)
        r = self._recalls(queries_new, queries_old, relevant, lambda _: [(beta, w), (0.0, 0.0), (np.inf, 0.0)],
                          k=k, k_candidates=k_candidates)
        counts = self.state.counts()
        probe = {"k": k, "served": r[beta, w], "new_model_only": r[0.0, 0.0], "staying": r[np.inf, 0.0],
                 "n_queries": len(relevant), "native_fraction": counts["native"] / max(1, sum(counts.values())),
                 "at": time.time()}
        self.meta = self.state.update(probe=probe)
        self.state.event("probe", f"Recall@{k} served {probe['served']:.3f}, staying {probe['staying']:.3f}")
        return self.status()

    def search(self, texts: list[str], k: int = 10, *, old_model: str | None = None, beta: float | None = None,
               hub_weight: float | None = None, k_candidates: int = 100) -> tuple[list[list], np.ndarray]:
        """New-model queries over the upgrade's vectors (mapped and native alike). With ``old_model``, each query is
        also encoded by the old model and every candidate scored ``(cos(q_new, v_new) + beta cos(q_old, v_old)) /
        (1 + beta)`` over the union of both searches' candidates (dual-query fusion); ``hub_weight`` subtracts
        ``weight * r(d)``, the record's hub score (the hub penalty). Both default to what :meth:`tune_fusion`
        chose (else fusion with beta 1, no penalty)."""
        q_new = l2_normalize(np.asarray(self.model(texts), dtype=np.float32))
        weight = float(self.meta.get("hub_weight") or 0.0) if hub_weight is None else float(hub_weight)
        q_old = None
        if old_model is not None:
            if beta is None:
                beta = np.inf if self.meta.get("fusion_stays") else float(self.meta.get("fusion_beta") or 1.0)
            q_old = l2_normalize(np.asarray(load_model(old_model)(texts), dtype=np.float32))
        out_ids, out_scores = [], np.full((len(texts), k), -np.inf, dtype=np.float32)
        if q_old is None and not weight:   # the store's own search; records gone from the source left out
            ids, scores = self.target.search(q_new, 2 * k)
            held = self.state.scores_of([i for row in ids for i in row])
            for qi, row in enumerate(ids):
                keep = [j for j, i in enumerate(row) if i in held][:k]
                out_ids.append([row[j] for j in keep])
                out_scores[qi, :len(keep)] = np.asarray(scores[qi])[keep]
            return out_ids, out_scores
        for qi, (ids, cn, co, hub) in enumerate(self._candidates(q_new, q_old, max(k, k_candidates))):
            scores = self._score(cn, co, hub, beta or 0.0, weight)
            order = np.argsort(-scores, kind="stable")[:k]
            out_ids.append([ids[j] for j in order])
            out_scores[qi, :len(order)] = scores[order]
        return out_ids, out_scores


def _residual_scorer(alignment: Alignment, sample) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Expected unreliability of each mapped vector: the fit anchors' residuals ``1 - cos(T(x_a), y_a)`` near it in
    the old space, weighted by similarity (the ``anchor_residual`` strategy the report measures). The anchors'
    residuals are computed once; the scorer takes a batch's old and mapped vectors."""
    from ...quality.options import anchor_residuals, reliability_scores

    olds, news = sample
    res = anchor_residuals(alignment.transform(olds.vectors), news)
    return lambda X, mapped: reliability_scores(X, mapped, olds.vectors, news, res)["anchor_residual"]


def _digests(batch: VectorBatch, text_field: str) -> list[str]:
    return [record_digest(v, (p or {}).get(text_field)) for v, p in zip(batch.vectors, batch.payloads)]


def start(source, *, model: str, text_field: str, state_path=None, field: str | None = None, to=None,
          alignment=None, method: str = "orthogonal", fit_sample: int = 2000, seed: int = 0,
          batch_size: int | None = None, overwrite: bool = False,
          on_step: Callable[[str], None] = lambda s: None) -> dict:
    """Begin an upgrade of ``source`` to ``model``: fit the map (``method``, see :mod:`vecbridge.align.methods`) on
    ``fit_sample`` re-embedded records (or use ``alignment``), write mapped vectors into the new vector ``field`` of
    the source (stores with named vectors) or into the new collection ``to``, write the re-embedded sample natively,
    and stamp every record (with its residual and hub scores, measured against the re-embedded sample).

    Nothing is written before every check passed: the source holds text in ``text_field``; the new vectors go
    neither into the source (however its URL is spelled) nor into any vector field it has, nor into a collection
    that exists already (``overwrite`` drops and recreates that one). The state file appears, whole, once the
    map is fitted (stage ``starting``, with the fit sample): the same command run again after an interruption
    continues into the target this start created, with the same sample; other settings or another collection are
    refused."""
    if (field is None) == (to is None):
        raise UsageError("say where the new vectors go: a new vector field of the source (field) or a new "
                         "collection (to), one of them")
    src = open_collection(source)
    chosen = method_of(method)
    state_path = Path(state_path) if state_path else default_state_path(src)
    _refuse_unwritable(state_path)
    with exclusive(state_path):
        info = src.info()
        target = _new_vectors_target(src, info, field, to)
        settings = {"source": str(src.identity), "field": field, "target": None if field else str(target.identity),
                    "model": model, "text_field": text_field, "method": chosen.name, "fit_sample": fit_sample,
                    "seed": seed, "alignment": None if alignment is None else _alignment_key(alignment)}
        state = _unfinished_start(state_path, settings)
        if state is None:
            _refuse_existing(src, info, target, field, overwrite)
            _require_text(src, text_field, seed)
            state = _fit_and_create(src, info, state_path, settings, alignment=alignment, to=to, chosen=chosen,
                                    replaces=field is None and target.exists(), on_step=on_step)
        try:
            return _write_and_stamp(src, state, alignment, field=field, to=to, batch_size=batch_size,
                                    on_step=on_step)
        finally:
            state.close()


def _refuse_unwritable(state_path: Path) -> None:
    """Everything a start writes on this machine lies beside its state file (the state and its ``.part``, the fitted
    alignment, the migration's checkpoint, SQLite's journal): a folder or state file it could not write is refused
    now, in one line, before minutes of re-embedding are spent."""
    hint = "choose a --state in a folder you can write"
    require_writable(state_path, "the upgrade's state file and alignment", hint)
    if state_path.exists() and not os.access(state_path, os.W_OK):
        raise StoreError(f"cannot write the upgrade's state file {state_path}: it is read-only; {hint}")


def _alignment_key(alignment) -> str:
    """How a start's settings name a given alignment: its file, or its fingerprint."""
    return alignment.fingerprint if isinstance(alignment, Alignment) else str(Path(alignment).resolve())


def _source_field(src: Collection, info) -> str | None:
    """The vector field the source's vectors are in (None: a store without named vectors)."""
    if src.vector_field is not None:
        return src.vector_field
    return next(iter(info.vector_fields)) if len(info.vector_fields) == 1 else None


def _new_vectors_target(src: Collection, info, field: str | None, to) -> Collection:
    """Where the new vectors go, refused if it is the source itself or the source's own vector field."""
    if field is not None:
        if field == _source_field(src, info):
            raise InputError(f"--field {field} holds the source's own vectors, which an upgrade never writes: "
                             f"name a new field for the new model's vectors")
        return connect(src.url).with_vector_field(field)   # a clear StoreError where the store has no named vectors
    target = open_collection(to, read_only=False)
    refuse_inputs_as_target(target, [(src, "the source collection itself")],
                            "name a new collection for the new model's vectors (or --field NAME: a new vector field "
                            "of the source)")
    return target


def _refuse_existing(src: Collection, info, target: Collection, field: str | None, overwrite: bool) -> None:
    """A new upgrade writes into a field or collection of its own: one that exists (the application's, or another
    upgrade's) is refused; a collection may be replaced with ``overwrite`` (dropped and recreated when the writing
    starts), a vector field never (it is part of the source)."""
    if field is not None and field in info.vector_fields:
        raise InputError(f"the vector field {field!r} already exists in {src.display_url}: name a new field (an "
                         f"upgrade never writes or drops a field of the source it did not create)")
    if field is None and target.exists() and not overwrite:
        raise StoreError(f"target already exists: {target.display_url} (name a new collection for the new vectors, "
                         f"or --overwrite to drop and recreate it)")


def _require_text(src: Collection, text_field: str, seed: int) -> None:
    """The new model embeds each record's text: a field no sampled record holds text in is refused now."""
    sampled = src.sample(200, seed=seed)
    keep, _ = _texts(sampled, text_field)
    if not len(keep):
        fields = sorted({k for p in sampled.payloads for k in (p or {})})
        raise InputError(f"no sampled record of {src.display_url} has text in payload field {text_field!r} "
                         f"(its records hold: {', '.join(fields) or 'no payload'}): name it with --text-field")


def _unfinished_start(path: Path, settings: dict) -> UpgradeState | None:
    """The state of an interrupted start of this same upgrade (continued), None if there is no state; a state of
    another upgrade, of one under way, or of a start with other settings is refused."""
    if not path.exists():
        return None
    state = UpgradeState.open(path)
    try:
        meta = state.meta
        if meta["stage"] != "starting":
            raise InputError(f"an upgrade is already under way with the state file {path}: see `vecbridge "
                             f"upgrade status`, or choose another state file")
        had = meta.get("settings") or {
            "source": str(connect(meta["source"]).identity), "field": meta.get("field"), "model": meta["model"],
            "target": str(connect(meta["target"]).identity) if meta.get("target") else None,
            "text_field": meta["text_field"]}
        if had["source"] != settings["source"]:
            raise InputError(f"{path} holds an upgrade of another collection ({redact(meta['source'])}): choose "
                             f"another state file")
        differs = [k for k in settings if k in had and had[k] != settings[k]]
        if differs:
            raise InputError(f"{path} holds an unfinished start with other settings "
                             f"({', '.join(f'{k} {had[k]!r}' for k in differs)}): run it again with those to "
                             f"finish it, or remove {path} (and the new vectors it began writing) to start over")
    except BaseException:
        state.close()
        raise
    return state


def _fit_and_create(src: Collection, info, state_path: Path, settings: dict, *, alignment, to, chosen,
                    replaces: bool, on_step) -> UpgradeState:
    """Fit the map on a re-embedded sample (unless ``alignment`` is given), then write the state file whole (its
    settings, the alignment, the fit sample, and whether the target collection ``replaces`` one that exists, with
    --overwrite): a start interrupted before has left nothing behind."""
    model, text_field, seed = settings["model"], settings["text_field"], settings["seed"]
    sample = None
    if alignment is None:
        on_step(f"re-embedding {settings['fit_sample']:,} stored texts ({text_field!r}) with {model} to fit the map")
        olds, news = reembed_pairs(src, load_model(model), text_field=text_field, n=settings["fit_sample"], seed=seed)
        fault_point("upgrade-start.sample-reembedded")
        est = chosen.build(seed=seed).fit(olds.vectors, news)
        alignment = Alignment.from_estimator(
            est, target_model=model, metric=info.metric,
            anchors={"method": "re-embedded-sample", "n": len(olds)}).save(
                state_path.with_name(state_path.name.replace(".upgrade.sqlite", "") + ".align.vb"))
        sample = (olds, news)
        fault_point("upgrade-start.fitted")
    aligned, align_file = load_alignment(alignment)
    if aligned.source_dim != info.dim:
        raise InputError(f"the alignment maps {aligned.source_dim}-dimensional vectors; {src.display_url} holds "
                         f"{info.dim}-dimensional ones")
    part = state_path.with_name(state_path.name + ".part")
    if part.exists():
        part.unlink()
    state = UpgradeState.create(part, {
        "source": url_without_secrets(src.url), "field": settings["field"], "model": model, "text_field": text_field,
        "target": url_without_secrets(str(to)) if to else None, "alignment": str(align_file or ""),
        "stage": "starting", "serving": "old", "source_field": _source_field(src, info), "settings": settings,
        "replaces": replaces})
    if sample is not None:   # the re-embedded sample is the hub reference until a query log replaces it
        olds, news = sample
        state.set_fit_sample(olds.ids, _digests(olds, text_field), olds.vectors, news)
        state.set_reference(news)
    state.close()
    os.replace(part, state_path)
    return UpgradeState.open(state_path)


def _kept_sample(src: Collection, state: UpgradeState):
    """The start's fit sample ``(old records, new vectors, digests)`` as the source holds those records now (records
    deleted since are left out), or None when the map was given."""
    kept = state.fit_sample()
    if kept is None:
        return None
    ids, digests, old, new = kept
    now = src.get(ids)
    row = {i: j for j, i in enumerate(ids)}
    rows = np.asarray([row[i] for i in now.ids], dtype=np.int64)
    return VectorBatch(now.ids, old[rows], now.payloads), new[rows], [digests[j] for j in rows]


def _made_by_this_start(src: Collection, meta: dict, field: str | None, to) -> bool:
    """Whether the field or collection the new vectors go to exists and was created by this start (run before and
    interrupted): a field always (a start refuses one that exists), a collection unless the start was asked to
    replace one that existed (``--overwrite``: then what is there may still be that one, dropped by the
    migration)."""
    if field is not None:
        return field in src.info().vector_fields
    return not meta.get("replaces", True) and connect(to).exists()


def _adopt(src: Collection, alignment, field: str | None, to, checkpoint: Path) -> None:
    """Let the migration continue into the field or collection an interrupted run of this start created (killed
    before the migration's first checkpoint, or after its last): a checkpoint that has copied nothing, so every row
    is written again into what exists, instead of dropping it (a store may not drop a vector field: Qdrant
    Edge)."""
    aligned, align_file = load_alignment(alignment)
    target = connect(src.url).with_vector_field(field) if field else open_collection(to, read_only=False)
    _, path, identity = preflight(src, target, aligned, align_file, checkpoint, kind="migrate", field=field)
    Checkpoint(path, identity).start()


def _write_and_stamp(src: Collection, state: UpgradeState, alignment, *, field, to, batch_size, on_step) -> dict:
    """The writing part of :func:`start`, resumable: mapped vectors (by a resumable migration into the field or
    collection this start owns), then every record's stamp, then the fit sample's native vectors."""
    meta = state.meta
    aligned, align_file = load_alignment(meta["alignment"] or alignment)
    sample = _kept_sample(src, state)
    text_field = meta["text_field"]
    on_step("writing mapped vectors beside the old ones")
    if not meta.get("migrated"):
        checkpoint = state.path.with_name(state.path.name + ".migrate.json")
        given = aligned if align_file is None else align_file
        if not checkpoint.exists() and _made_by_this_start(src, meta, field, to):
            _adopt(src, given, field, to, checkpoint)
        resume = checkpoint.exists()
        migrate(src, given, None if field else to, field=field, batch_size=batch_size, checkpoint_path=checkpoint,
                resume=resume, overwrite=not resume)
        fault_point("upgrade-start.mapped")
        state.update(migrated=True)
    target = open_target(src.url, field, to)
    if sample is not None:
        olds, news, digests = sample
        residuals = _residual_scorer(aligned, (olds, news))
    for batch in src.scan(batch_size=2000):   # the target holds the same ids; the old vectors score priority
        mapped = aligned.transform(batch.vectors)
        scored = {} if sample is None else {
            "residuals": residuals(batch.vectors, mapped), "hubness": hub_penalty(mapped, news, HUB_K)}
        state.stamp(batch.ids, "mapped", aligned.fingerprint, digests=_digests(batch, text_field), **scored)
    fault_point("upgrade-start.stamped")
    if sample is not None and len(olds):   # the fit's re-embedded texts are native vectors already: keep them
        target.upsert(olds.with_vectors(news))
        fault_point("upgrade-start.sample-written")
        with_self = hub_penalty(news, news, HUB_K + 1)   # each is its own nearest reference: leave it out
        state.stamp(olds.ids, "native", meta["model"], digests=digests,
                    hubness=(with_self * (HUB_K + 1) - 1.0) / HUB_K)
    up = Upgrade(state)
    up.source, up.target = src, target   # this run's handles hold the credentials the URLs given to it carry
    try:   # the serving view or alias exists from now on, over the old vectors: point applications at it early
        via = up._serve("old")
    except StoreError as exc:
        via = f"nothing switched (the serving view or alias could not be made: {exc})"
    state.update(stage="mapped", serving_via=via)
    state.event("mapped", f"alignment {aligned.fingerprint[:12]}; serving the old model's vectors through {via}")
    up.meta = state.meta
    status = up.status()
    if _has_secrets(str(src.url)) or (to and _has_secrets(str(to))):
        status["credentials"] = ("the state file keeps no password or token: later commands read them from the "
                                 "environment (PGPASSWORD, QDRANT_API_KEY, MILVUS_TOKEN, ...)")
    return status


#: native fractions at which :func:`plan` predicts what the upgrade serves
PLAN_FRACTIONS = (0.0, 0.1, 0.25, 0.5, 1.0)
#: a plan's default pool and fit sample (each at most a quarter of the collection: :func:`plan_sizes`)
PLAN_POOL = PLAN_FIT_SAMPLE = 2000


def _query_pairs(queries, old_queries) -> tuple[VectorBatch, VectorBatch]:
    """The same queries in the new and the old model (each query's id is its relevant record's id)."""
    new_q = VectorBatch.concat(list(open_collection(queries).scan(batch_size=2000)))
    old_q = open_collection(old_queries).get(list(new_q.ids))
    if len(old_q) < len(new_q):
        raise InputError(f"only {len(old_q):,} of the {len(new_q):,} queries are in the old-model query collection")
    by_id = dict(zip(old_q.ids, range(len(old_q))))
    return new_q, old_q.take(np.asarray([by_id[i] for i in new_q.ids]))


def _with_text(batch: VectorBatch, text_field: str) -> tuple[VectorBatch, list[str]]:
    """The records of ``batch`` that hold a text, and their texts (:func:`vecbridge.pairing.reembed._texts`)."""
    keep, texts = _texts(batch, text_field)
    return batch.take(keep), texts


def _encode(embed, texts: list[str], on_progress: Callable[[int], None], chunk: int = 256) -> np.ndarray:
    """``embed(texts)`` in chunks, reporting each one done (a progress bar over minutes of encoding)."""
    parts = []
    for lo in range(0, len(texts), chunk):
        parts.append(np.asarray(embed(texts[lo:lo + chunk]), dtype=np.float32))
        on_progress(len(parts[-1]))
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)


def plan_sizes(count: int, pool: int | None, fit_sample: int | None) -> tuple[int, int, str | None]:
    """The pool and fit sample a plan re-embeds: the user's, else 2,000 each but at most a quarter of the
    collection each, so that predicting costs at most half a full re-embed (with the defaults alone, a 3,000-record
    collection would be re-embedded whole to predict). The note says when the defaults were reduced."""
    cap = max(100, count // 4)
    p = pool if pool is not None else min(PLAN_POOL, cap)
    f = fit_sample if fit_sample is not None else min(PLAN_FIT_SAMPLE, cap)
    reduced = (pool is None and p < PLAN_POOL) or (fit_sample is None and f < PLAN_FIT_SAMPLE)
    note = (f"predicting on a pool of {p:,} and a fit sample of {f:,} re-embedded records (a quarter of the "
            f"{count:,} records each, not {PLAN_POOL:,}, so the plan costs at most half a full re-embed; --pool "
            f"and --fit-sample choose)" if reduced else None)
    return p, f, note


def predict_stages(src: Collection, embed, *, text_field: str, queries, old_queries, pool: int = 2000,
                   fit_sample: int = 2000, method: str = "orthogonal", seed: int = 0, k: int = 10,
                   fractions=PLAN_FRACTIONS, on_step: Callable[[str], None] = lambda s: None,
                   on_start: Callable[[int], None] = lambda n: None,
                   on_progress: Callable[[int], None] = lambda n: None) -> dict:
    """Recall@k the upgrade serves at each stage, simulated on a pool of the collection: the queries' relevant
    records plus ``pool`` others, all re-embedded, and a map fitted on ``fit_sample`` further re-embedded records
    (as ``start`` does). Each stage serves the pool with a ``fraction`` of it native (random order), new-model
    queries alone and fused with old-model ones (the fusion weight chosen on these queries, as ``upgrade tune``
    does), against staying on the old model. Recall within a pool is higher than within the whole collection;
    the comparison between stages is what carries over."""
    from ...quality.options import recall, relevant_ranks

    chosen = method_of(method)
    new_q, old_q = _query_pairs(queries, old_queries)
    relevant, rel_texts = _with_text(src.get(list(dict.fromkeys(new_q.ids))), text_field)
    if not len(relevant):
        raise InputError(f"none of the queries' relevant records is in {src.display_url} with text in "
                         f"{text_field!r}")
    held = set(relevant.ids)
    others, other_texts = _with_text(src.sample(pool + len(held), seed=seed), text_field)
    keep = np.asarray([j for j, i in enumerate(others.ids) if i not in held][:pool], dtype=np.int64)
    others, other_texts = others.take(keep), [other_texts[j] for j in keep]
    docs = VectorBatch.concat([relevant, others])
    in_pool = set(docs.ids)
    fit, fit_texts = _with_text(src.sample(fit_sample + len(in_pool), seed=seed + 1), text_field)
    keep = np.asarray([j for j, i in enumerate(fit.ids) if i not in in_pool][:fit_sample], dtype=np.int64)
    fit, fit_texts = fit.take(keep), [fit_texts[j] for j in keep]
    if len(fit) < 2:
        raise InputError(f"{src.display_url} has too few records with text beyond the pool to fit a map")
    on_step(f"re-embedding {len(docs) + len(fit):,} stored texts to predict each stage")
    on_start(len(docs) + len(fit))
    t0 = time.perf_counter()
    Y = _encode(embed, rel_texts + other_texts, on_progress)
    Y_fit = _encode(embed, fit_texts, on_progress)
    seconds = time.perf_counter() - t0
    M = chosen.build(seed=seed).fit(fit.vectors, Y_fit).transform(docs.vectors)
    row = {i: j for j, i in enumerate(docs.ids)}
    use = np.asarray([qi for qi, i in enumerate(new_q.ids) if i in row], dtype=np.int64)
    Qn, Qo = new_q.vectors[use], old_q.vectors[use]
    rel = np.asarray([row[new_q.ids[qi]] for qi in use], dtype=np.int64)
    staying = recall(relevant_ranks(Qo, docs.vectors, rel), k)
    order = np.random.default_rng(seed).permutation(len(docs))
    stages = []
    for f in fractions:
        served = M.copy()
        native = order[:int(round(f * len(docs)))]
        served[native] = Y[native]
        alone = recall(relevant_ranks(Qn, served, rel), k)
        fused = {b: recall(relevant_ranks(Qn, served, rel, Q_old=Qo, old_docs=docs.vectors, beta=b), k)
                 for b in FUSION_BETAS if 0 < b < np.inf}
        best = max(fused, key=lambda b: (fused[b], -b))
        stages.append({"native_fraction": f, "recall": alone, "recall_fused": max(fused[best], staying),
                       "beta": best if fused[best] >= staying else "old model alone"})
    alone_ok = [st["native_fraction"] for st in stages if st["recall"] >= staying]
    return {"k": k, "queries": len(use), "pool": len(docs), "fit_sample": len(fit), "method": chosen.name,
            "staying": staying, "stages": stages, "texts_encoded": len(docs) + len(fit), "encode_seconds": seconds,
            "new_model_alone_from": alone_ok[0] if alone_ok else None}


def plan(source, *, model: str, text_field: str, sample: int = 64, seed: int = 0, queries=None, old_queries=None,
         pool: int | None = None, fit_sample: int | None = None, method: str = "orthogonal",
         on_step: Callable[[str], None] = lambda s: None, on_start: Callable[[int], None] = lambda n: None,
         on_progress: Callable[[int], None] = lambda n: None) -> dict:
    """What an upgrade of ``source`` to ``model`` costs on this machine, measured on ``sample`` stored texts, and,
    given queries with known answers in both models (``queries``, ``old_queries``), the Recall@10 it serves at each
    stage (:func:`predict_stages`, on the pool and fit sample of :func:`plan_sizes`). Writes nothing."""
    if (queries is None) != (old_queries is None):
        raise InputError("predicting quality needs the queries in both models: give --queries and --old-queries")
    src = open_collection(source)
    info = src.info()
    if info.count == 0:
        raise InputError(f"collection is empty: {src.display_url}")
    embed = load_model(model)
    records = src.sample(sample, seed=seed)
    texts = [p.get(text_field) for p in records.payloads]
    texts = [t for t in texts if isinstance(t, str) and t]
    if not texts:
        raise InputError(f"no sampled record of {src.display_url} has text in payload field {text_field!r}")
    embed(texts[:2])                          # model warm-up, not timed
    t0 = time.perf_counter()
    embed(texts)
    per_text = (time.perf_counter() - t0) / len(texts)
    with_text = len(texts) / len(records)
    predicted = None
    if queries is not None:
        pool, fit_sample, note = plan_sizes(info.count, pool, fit_sample)
        if note:
            on_step(note)
        predicted = predict_stages(src, embed, text_field=text_field, queries=queries, old_queries=old_queries,
                                   pool=pool, fit_sample=fit_sample, method=method, seed=seed, on_step=on_step,
                                   on_start=on_start, on_progress=on_progress)
        per_text = predicted["encode_seconds"] / predicted["texts_encoded"]   # the larger measurement
    return {"source": src.display_url, "count": info.count, "dim": info.dim, "model": model,
            "texts_sampled": len(records), "with_text": with_text, "seconds_per_text": per_text,
            "full_reembed_seconds": per_text * info.count * with_text, "predicted": predicted,
            "stages": ["start: fit the map on a re-embedded sample, write mapped vectors beside the old ones",
                       "reembed: replace mapped vectors by native ones in the background (resumable)",
                       "cutover: serve the new model's vectors; rollback at any time until finalize"]}


def tune(path, queries, old_queries, *, k: int = 10) -> dict:
    """:meth:`Upgrade.tune_fusion` on two query collections (the same queries embedded by the new and the old model,
    each query's id being its relevant record's id, as ``vecbridge report --queries`` takes them)."""
    new_q, old_q = _query_pairs(queries, old_queries)
    with open_upgrade(path) as up:
        return up.tune_fusion(new_q.vectors, old_q.vectors, list(new_q.ids), k=k)


def measure(path, queries, old_queries, *, k: int = 10) -> dict:
    """:meth:`Upgrade.measure` on two query collections (as :func:`tune` takes them)."""
    new_q, old_q = _query_pairs(queries, old_queries)
    with open_upgrade(path) as up:
        return up.measure(new_q.vectors, old_q.vectors, list(new_q.ids), k=k)


def learn_queries(path, queries, *, k: int = HUB_K) -> dict:
    """:meth:`Upgrade.learn_queries` on a collection of new-model query vectors (a sample of the query log)."""
    log = VectorBatch.concat(list(open_collection(queries).scan(batch_size=2000)))
    with open_upgrade(path) as up:
        return up.learn_queries(log.vectors, k=k)


def open_upgrade(path) -> Upgrade:
    """The upgrade whose state file is ``path``."""
    if not Path(path).is_file():
        raise StoreError(f"no upgrade state at {path}")
    return Upgrade.open(path)
