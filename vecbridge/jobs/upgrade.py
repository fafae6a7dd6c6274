"""A model upgrade on a live collection: map now, re-embed in the background, cut over, roll back, finalize.

``start`` fits the map on a re-embedded sample (or takes one), writes mapped vectors *beside* the old ones — a new
vector field where the store has named vectors (PostgreSQL+pgvector, Qdrant), a new collection elsewhere — and
stamps every record in the upgrade's state file (:mod:`vecbridge.jobs.upgrade_state`). ``reembed`` then replaces
mapped vectors by the new model's own, batch by batch, resumable after ``kill -9``, picking up records the source
gained meanwhile; ``search`` serves new-model queries over the upgrade's vectors at every stage (optionally fused
with old-model queries over the old vectors). ``cutover`` and ``rollback`` move what the store serves — a
PostgreSQL view in one transaction — and the state's serving pointer; ``finalize`` ends the upgrade. The old
vectors are never written.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from ..align.artifact import Alignment
from ..align.procrustes import OrthogonalProcrustes
from ..connectors import connect
from ..connectors.base import Collection, VectorBatch
from ..connectors.url import redact
from ..errors import InputError, StoreError
from ..vectors import l2_normalize
from .open import load_alignment, open_collection
from .reembed import load_model, reembed_pairs
from .rewrite import migrate
from .upgrade_state import UpgradeState

STAGES = ("mapped", "cutover", "rolled-back", "finalized")
#: the old query's weights tried by :meth:`Upgrade.tune_fusion` (``inf``: the old model alone, i.e. staying)
FUSION_BETAS = (0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, float("inf"))
_SECRET_PARAMS = ("password", "api_key", "token")


def url_without_secrets(url: str) -> str:
    """The URL the state file keeps: no password, no secret query values (they come from the environment, as for
    every command: ``PGPASSWORD``, ``QDRANT_API_KEY``, ...)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':', 1)[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if not any(s in k.lower() for s in _SECRET_PARAMS)])
    out = urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    return out if out.startswith(f"{parts.scheme}://") else f"{parts.scheme}://{out.split(':', 1)[1]}"


def default_state_path(source: Collection) -> Path:
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(source.identity))[-80:].strip("_")
    return Path.cwd() / f"{name}.upgrade.sqlite"


class Upgrade:
    """An upgrade under way, opened from its state file: the collections, the models, and the jobs on them."""

    def __init__(self, state: UpgradeState):
        self.state = state
        self.meta = state.meta
        self.source = connect(self.meta["source"], read_only=True)
        self.target = self._target()
        self._model = None

    @classmethod
    def open(cls, path) -> "Upgrade":
        return cls(UpgradeState.open(path))

    def _target(self) -> Collection:
        if self.meta.get("field"):
            return connect(self.meta["source"]).with_vector_field(self.meta["field"])
        return connect(self.meta["target"])

    @property
    def model(self):
        if self._model is None:
            self._model = load_model(self.meta["model"])
        return self._model

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
                "serving_via": self.meta.get("serving_via"),
                "source": redact(self.meta["source"]), "vectors": self.meta.get("field") or
                redact(self.meta["target"]), "model": self.meta["model"], "alignment": self.meta["alignment"],
                "counts": counts, "total": total,
                "native_fraction": counts["native"] / total if total else 0.0, "events": self.state.events()}

    def _move(self, to_stage: str, allowed_from: tuple[str, ...], serving: str) -> dict:
        stage = self.meta["stage"]
        if stage not in allowed_from:
            raise InputError(f"the upgrade is {stage}: {to_stage} is possible only from "
                             f"{' or '.join(allowed_from)}")
        via = self._serve(serving)
        self.meta = self.state.update(stage=to_stage, serving=serving, serving_via=via)
        self.state.event(to_stage, f"serving the {serving} model's vectors through {via}")
        return self.status()

    def cutover(self) -> dict:
        """Serve the new model's vectors (where the store has a serving view, switched in one transaction)."""
        return self._move("cutover", ("mapped", "rolled-back"), "new")

    def rollback(self) -> dict:
        """Serve the old model's vectors again, exactly as before the upgrade (they were never written)."""
        return self._move("rolled-back", ("cutover",), "old")

    def finalize(self) -> dict:
        """End the upgrade after a cutover: no more rollback; the old vectors stay until you drop them yourself."""
        if self.meta["stage"] != "cutover":
            raise InputError(f"the upgrade is {self.meta['stage']}: finalize after a cutover")
        pending = self.state.counts()
        if pending["mapped"] or pending["pending"]:
            raise InputError(f"{pending['mapped'] + pending['pending']:,} records have no native vector yet: run "
                             f"`vecbridge upgrade reembed` to the end first")
        self.meta = self.state.update(stage="finalized")
        self.state.event("finalized", "old vectors may now be dropped")
        return self.status()

    def _serve(self, which: str) -> str:
        """Switch what the store serves, where it can: a pgvector view ``<table>_serving`` over the serving vector
        column, or a Qdrant / Milvus alias ``<collection>_serving`` over the serving collection (new vectors in a
        new collection of the same server). Elsewhere only the state's pointer moves. Returns how it was served."""
        view = getattr(self.source, "serving_view", None)
        if view is not None and self.meta.get("field"):
            name = view(self.meta["field"] if which == "new" else self.source.vector_field)
            return f"view {name}"
        same_store = self.target.identity.location == self.source.identity.location and \
            self.target.identity.store == self.source.identity.store
        if not self.meta.get("field") and same_store and type(self.source).point_alias is not Collection.point_alias:
            alias = f"{self.source.identity.name}_serving"
            (self.target if which == "new" else self.source).point_alias(alias)
            return f"alias {alias}"
        return "the upgrade's state (this store has no view or alias to switch)"

    # --- re-embedding -----------------------------------------------------------------------------------------------
    def sync(self) -> int:
        """Stamp records the source gained since the start as ``pending`` (no new vector yet); returns how many."""
        new = []
        for batch in self.source.scan(batch_size=2000):
            known = self.state.stamps(batch.ids)
            new += [i for i in batch.ids if i not in known]
        if new:
            self.state.stamp(new, "pending", "")
        return len(new)

    def reembed(self, *, limit: int | None = None, until: float | None = None, budget_seconds: float | None = None,
                priority: str = "random", batch_size: int = 64, max_per_second: float | None = None,
                on_progress: Callable[[int], None] | None = None,
                on_start: Callable[[int], None] | None = None) -> dict:
        """Replace mapped vectors by the new model's own, ``batch_size`` records at a time, until ``limit``
        records, a native ``until`` fraction or ``budget_seconds`` is reached (or nothing is left); each batch is
        written, then stamped, so a killed run loses at most the batch in flight (re-done by the next run)."""
        if self.meta["stage"] == "finalized":
            raise InputError("the upgrade is finalized")
        if until is not None and not 0 < until <= 1:
            raise InputError("until is a fraction of the collection in (0, 1]")
        added = self.sync()
        counts = self.state.counts()
        total = sum(counts.values())
        todo = counts["mapped"] + counts["pending"]
        if until is not None:
            todo = min(todo, max(0, int(np.ceil(until * total)) - counts["native"]))
        if limit is not None:
            todo = min(todo, limit)
        if on_start:
            on_start(todo)
        t0, done, no_text = time.perf_counter(), 0, 0
        while done < todo:
            if budget_seconds is not None and time.perf_counter() - t0 >= budget_seconds:
                break
            ids = self.state.to_reembed(min(batch_size, todo - done), priority)
            if not ids:
                break
            tb = time.perf_counter()
            records = self.source.get(ids)
            texts = [p.get(self.meta["text_field"]) for p in records.payloads]
            has = [j for j, t in enumerate(texts) if isinstance(t, str) and t]
            if len(has) < len(records):
                no_text += len(records) - len(has)
                missing = {records.ids[j] for j in range(len(records)) if j not in set(has)}
                self.state.stamp([i for i in ids if i in missing], "no-text", "kept its mapped vector")
            if has:
                vectors = np.asarray(self.model([texts[j] for j in has]), dtype=np.float32)
                batch = records.take(np.asarray(has)).with_vectors(vectors)
                self.target.upsert(batch)
                self.state.stamp(batch.ids, "native", self.meta["model"])
            gone = set(ids) - set(records.ids)   # deleted from the source since: nothing left to re-embed
            if gone:
                self.state.forget(gone)
            done += len(ids)
            if on_progress:
                on_progress(len(ids))
            if max_per_second:
                time.sleep(max(0.0, len(has) / max_per_second - (time.perf_counter() - tb)))
        self.state.event("reembed", f"{done:,} records, {added:,} new in the source")
        return {**self.status(), "reembedded": done, "new_in_source": added, "without_text": no_text,
                "seconds": time.perf_counter() - t0}

    # --- serving ----------------------------------------------------------------------------------------------------
    def _fused_candidates(self, q_new: np.ndarray, q_old: np.ndarray, k_candidates: int):
        """Per query: the union of both searches' candidates with their new and old cosines (rows as returned)."""
        ids_n, _ = self.target.search(q_new, k_candidates)
        ids_o, _ = self.source.search(q_old, k_candidates)
        out = []
        for qi in range(len(q_new)):
            cand = list(dict.fromkeys(list(ids_n[qi]) + list(ids_o[qi])))
            new_v, old_v = self.target.get(cand), self.source.get(cand)
            vn = dict(zip(new_v.ids, l2_normalize(new_v.vectors)))
            vo = dict(zip(old_v.ids, l2_normalize(old_v.vectors)))
            both = [i for i in cand if i in vn and i in vo]
            out.append((both, np.array([vn[i] @ q_new[qi] for i in both]), np.array([vo[i] @ q_old[qi] for i in both])))
        return out

    @staticmethod
    def _fuse(cos_new: np.ndarray, cos_old: np.ndarray, beta: float) -> np.ndarray:
        """``(cos_new + beta cos_old) / (1 + beta)``; ``beta = inf`` is the old model alone (staying)."""
        return cos_old if np.isinf(beta) else (cos_new + beta * cos_old) / (1.0 + beta)

    def tune_fusion(self, queries_new, queries_old, relevant: list, *, k: int = 10, k_candidates: int = 100) -> dict:
        """Choose the old query's weight ``beta`` on queries with known answers (``relevant[i]`` is the id of query
        i's relevant record): the grid includes the old model alone (``inf``), so the choice serves at least as well
        as staying on the old model on these queries. Saved in the state; ``search`` uses it by default."""
        q_new = l2_normalize(np.asarray(queries_new, dtype=np.float32))
        q_old = l2_normalize(np.asarray(queries_old, dtype=np.float32))
        if not (len(q_new) == len(q_old) == len(relevant)) or not len(relevant):
            raise InputError("tuning needs the same queries in both models and the id of each one's relevant record")
        cands = self._fused_candidates(q_new, q_old, k_candidates)
        recall = {}
        for beta in FUSION_BETAS:
            hits = 0
            for (ids, cn, co), rel in zip(cands, relevant):
                order = np.argsort(-self._fuse(cn, co, beta), kind="stable")[:k]
                hits += rel in {ids[j] for j in order}
            recall[beta] = hits / len(relevant)
        best = max(FUSION_BETAS, key=lambda b: (recall[b], -b if np.isfinite(b) else -1e9))
        self.meta = self.state.update(fusion_beta=None if np.isinf(best) else best, fusion_stays=bool(np.isinf(best)))
        self.state.event("tuned", f"beta {best} on {len(relevant):,} queries")
        return {"beta": "old model alone" if np.isinf(best) else best, "recall": recall[best],
                "staying": recall[np.inf], "new_model_only": recall[0.0], "n_queries": len(relevant),
                "recall_by_beta": {("inf" if np.isinf(b) else b): r for b, r in recall.items()}}

    def search(self, texts: list[str], k: int = 10, *, old_model: str | None = None, beta: float | None = None,
               k_candidates: int = 100) -> tuple[list[list], np.ndarray]:
        """New-model queries over the upgrade's vectors (mapped and native alike). With ``old_model``, each query is
        also encoded by the old model and every candidate scored ``(cos(q_new, v_new) + beta cos(q_old, v_old)) /
        (1 + beta)`` over the union of both searches' candidates (dual-query fusion); ``beta`` defaults to the one
        :meth:`tune_fusion` chose, else 1."""
        q_new = l2_normalize(np.asarray(self.model(texts), dtype=np.float32))
        if old_model is None:
            return self.target.search(q_new, k)
        if beta is None:
            beta = np.inf if self.meta.get("fusion_stays") else float(self.meta.get("fusion_beta") or 1.0)
        q_old = l2_normalize(np.asarray(load_model(old_model)(texts), dtype=np.float32))
        out_ids, out_scores = [], np.full((len(texts), k), -np.inf, dtype=np.float32)
        for qi, (ids, cn, co) in enumerate(self._fused_candidates(q_new, q_old, k_candidates)):
            scores = self._fuse(cn, co, beta)
            order = np.argsort(-scores, kind="stable")[:k]
            out_ids.append([ids[j] for j in order])
            out_scores[qi, :len(order)] = scores[order]
        return out_ids, out_scores


def _residuals(X, alignment: Alignment, sample) -> np.ndarray:
    """Expected unreliability of each mapped vector: the fit anchors' residuals ``1 - cos(T(x_a), y_a)`` near it in
    the old space, weighted by similarity (the ``anchor_residual`` strategy the report measures)."""
    from .options import anchor_residuals, reliability_scores

    olds, news = sample
    res = anchor_residuals(alignment.transform(olds.vectors), news)
    return reliability_scores(X, alignment.transform(X), olds.vectors, news, res)["anchor_residual"]


def start(source, *, model: str, text_field: str, state_path=None, field: str | None = None, to=None,
          alignment=None, fit_sample: int = 2000, seed: int = 0, batch_size: int | None = None,
          on_step: Callable[[str], None] = lambda s: None) -> dict:
    """Begin an upgrade of ``source`` to ``model``: fit the map on ``fit_sample`` re-embedded records (or use
    ``alignment``), write mapped vectors into the new vector ``field`` of the source (stores with named vectors) or
    into the new collection ``to``, write the re-embedded sample natively, and stamp every record.

    The state file is written first (stage ``starting``): the same command run again after a crash continues the
    interrupted start."""
    src = open_collection(source)
    if (field is None) == (to is None):
        raise InputError("say where the new vectors go: a new vector field of the source (field) or a new "
                         "collection (to)")
    state_path = Path(state_path) if state_path else default_state_path(src)
    if state_path.exists():
        state = UpgradeState.open(state_path)
        if state.meta["stage"] != "starting":
            state.close()
            raise InputError(f"an upgrade is already under way with the state file {state_path}: see `vecbridge "
                             f"upgrade status`, or choose another state file")
        alignment = alignment or state.meta["alignment"] or None
    else:
        state = UpgradeState.create(state_path, {
            "source": url_without_secrets(src.url), "field": field, "model": model, "text_field": text_field,
            "target": url_without_secrets(str(to)) if to else None, "alignment": "", "stage": "starting",
            "serving": "old", "source_field": src.vector_field})
    try:
        sample = None
        if alignment is None:
            on_step(f"re-embedding {fit_sample:,} stored texts ({text_field!r}) with {model} to fit the map")
            olds, news = reembed_pairs(src, load_model(model), text_field=text_field, n=fit_sample, seed=seed)
            est = OrthogonalProcrustes().fit(olds.vectors, news)
            alignment = Alignment.from_estimator(
                est, target_model=model, metric=src.info().metric,
                anchors={"method": "re-embedded-sample", "n": len(olds)}).save(
                    state_path.with_name(state_path.name.replace(".upgrade.sqlite", "") + ".align.vb"))
            sample = (olds, news)
        aligned, align_file = load_alignment(alignment)
        state.update(alignment=str(align_file or ""))
        on_step("writing mapped vectors beside the old ones")
        checkpoint = state_path.with_name(state_path.name + ".migrate.json")
        target = connect(src.url).with_vector_field(field) if field else open_collection(to, read_only=False)
        written = field in src.info().vector_fields if field else target.exists()
        if checkpoint.exists() or not written:
            migrate(src, aligned if align_file is None else align_file, None if field else to, field=field,
                    batch_size=batch_size, checkpoint_path=checkpoint, resume=checkpoint.exists())
        for batch in src.scan(batch_size=2000):   # the target holds the same ids; the old vectors score priority
            state.stamp(batch.ids, "mapped", aligned.fingerprint,
                        _residuals(batch.vectors, aligned, sample) if sample is not None else None)
        if sample is not None:   # the fit's re-embedded texts are native vectors already: keep them
            olds, news = sample
            target.upsert(olds.with_vectors(news))
            state.stamp(olds.ids, "native", model)
        state.update(stage="mapped")
        state.event("mapped", f"alignment {aligned.fingerprint[:12]}")
        return Upgrade(state).status()
    finally:
        state.close()


def plan(source, *, model: str, text_field: str, sample: int = 64, seed: int = 0) -> dict:
    """What an upgrade of ``source`` to ``model`` costs on this machine, measured on ``sample`` stored texts; writes
    nothing. (Quality at each stage on your own queries: ``vecbridge report --pairs reembed``.)"""
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
    return {"source": src.display_url, "count": info.count, "dim": info.dim, "model": model,
            "texts_sampled": len(records), "with_text": with_text, "seconds_per_text": per_text,
            "full_reembed_seconds": per_text * info.count * with_text,
            "stages": ["start: fit the map on a re-embedded sample, write mapped vectors beside the old ones",
                       "reembed: replace mapped vectors by native ones in the background (resumable)",
                       "cutover: serve the new model's vectors; rollback at any time until finalize"]}


def tune(path, queries, old_queries, *, k: int = 10) -> dict:
    """:meth:`Upgrade.tune_fusion` on two query collections (the same queries embedded by the new and the old model,
    each query's id being its relevant record's id, as ``vecbridge report --queries`` takes them)."""
    new_q = VectorBatch.concat(list(open_collection(queries).scan(batch_size=2000)))
    old_q = open_collection(old_queries).get(list(new_q.ids))
    if len(old_q) < len(new_q):
        raise InputError(f"only {len(old_q):,} of the {len(new_q):,} queries are in the old-model query collection")
    with open_upgrade(path) as up:
        return up.tune_fusion(new_q.vectors, old_q.vectors, list(new_q.ids), k=k)


def open_upgrade(path) -> Upgrade:
    """The upgrade whose state file is ``path``."""
    if not Path(path).is_file():
        raise StoreError(f"no upgrade state at {path}")
    return Upgrade.open(path)
