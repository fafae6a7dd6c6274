"""``start``: fit the map on a re-embedded sample (or without the source's texts: unsupervised, or grown from seed
pairs, against a collection of new-model vectors; or take one), write mapped vectors *beside* the old ones — a new
vector field where the store has named vectors (PostgreSQL+pgvector, Qdrant), a new collection elsewhere — and stamp
every record in the store beside its new vector. Where the source holds no texts, the mapped vectors are final.
Resumable: the same command run again after an interruption continues."""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

from ...align.artifact import Alignment
from ...align.methods import method as method_of
from ...connectors import connect
from ...connectors.base import Collection, VectorBatch
from ...connectors.url import redact, scheme_of
from ...errors import InputError, StoreError, UsageError
from ...faultpoint import fault_point
from ...fs import require_writable
from ...linking.pairspec import PairSpec
from ...pairing.learned import UNPAIRED_SAMPLE
from ...pairing.reembed import _texts, reembed_pairs
from ...quality.scoring import hub_penalty
from ...runtime.checkpoint import Checkpoint
from ...runtime.guard import refuse_inputs_as_target
from ...runtime.models import ModelOptions
from ...runtime.open import load_alignment, open_collection
from ...runtime.provenance import (
    attach_spaces,
    check_space,
    fingerprint_vectors,
    spaces_of,
    stamp_alignment_target,
)
from ...runtime.record_stamps import MappedStamps, Stamper, digests_of
from ...secrets import has_secrets, strip_url
from ..rewrite import MapValidationWarning, migrate, preflight
from .base import HUB_K, TEXTS_GONE, open_target
from .core import Upgrade
from .stages import check
from .state import UpgradeState, exclusive

#: how ``start`` gets its map besides a given alignment: a re-embedded sample of the source's texts, or (no texts
#: needed) mini-vec2vec or GEH against a collection of new-model vectors (``new_vectors``)
START_PAIRS = ("reembed", "unsupervised", "geh")
#: stored texts re-embedded to fit the map unless told otherwise (each one a call to the new model)
REEMBED_FIT_SAMPLE = 2000
#: the payload field read for texts when none is named
DEFAULT_TEXT_FIELD = "text"

#: stores whose credential is ``user:password`` as one token: a user without its password would shadow the
#: environment's token (``MILVUS_TOKEN``), so the state keeps neither
_USER_IN_TOKEN = ("milvus",)


def url_without_secrets(url: str) -> str:
    """The URL the state file keeps: no password, no secret query values (they come from the environment, as for
    every command: ``PGPASSWORD``, ``QDRANT_API_KEY``, ``MILVUS_TOKEN`` ...)."""
    return strip_url(url, keep_user=scheme_of(url) not in _USER_IN_TOKEN)


def default_state_path(source: Collection) -> Path:
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(source.identity))[-80:].strip("_")
    return Path.cwd() / f"{name}.upgrade.sqlite"


def start(source, *, model: str, text_field: str | None = None, state_path=None, field: str | None = None, to=None,
          alignment=None, method: str = "orthogonal", fit_sample: int | None = None, seed: int = 0,
          batch_size: int | None = None, overwrite: bool = False, force: bool = False,
          on_step: Callable[[str], None] = lambda s: None, models: ModelOptions | None = None,
          pairs: str = "reembed", new_vectors=None, params: dict | None = None) -> dict:
    """Begin an upgrade of ``source`` to ``model``: fit the map (``method``, see :mod:`vecbridge.align.methods`) on
    ``fit_sample`` re-embedded records (or use ``alignment``), write mapped vectors into the new vector ``field`` of
    the source (stores with named vectors) or into the new collection ``to``, write the re-embedded sample natively,
    and stamp every record (with its residual and hub scores, measured against the re-embedded sample).

    ``fit_sample`` defaults to :data:`REEMBED_FIT_SAMPLE` texts, or ``UNPAIRED_SAMPLE`` vectors a side (no text).
    ``pairs`` ``unsupervised`` or ``geh:SEEDS`` fit the map without the source's texts, on ``fit_sample`` vectors of
    the source and of ``new_vectors`` (new-model vectors of in-domain items; for GEH, holding the seeds' partners),
    fitted and validated exactly as ``fit --pairs unsupervised`` and ``link --pairs geh:SEEDS`` do (``params``: the
    estimator's): a map that fails validation is refused (:class:`~vecbridge.errors.CheckFailed`) before anything is
    written, unless ``force`` (then the alignment, the state and the result say it failed). With those pairings or
    a given ``alignment``, ``text_field`` may be left out (None): where no sampled record holds text in the default
    field, the texts are gone and every record is stamped ``no-text`` (the mapped vectors are final: ``reembed``
    has nothing to do, ``cutover`` serves them and ``finalize`` keeps them).

    Nothing is written before every check passed: the source holds text in ``text_field`` (unless the texts may be
    gone, above); the new vectors go neither into the source (however its URL is spelled) nor into any vector field
    it has, nor into the new-model vectors the map is fitted against, nor into a collection that exists already
    (``overwrite`` drops and recreates that one). The state file appears, whole, once the map is fitted (stage
    ``starting``, with the fit sample): the same command run again after an interruption continues into the target
    this start created, with the same sample; other settings or another collection are refused. A given
    ``alignment`` must have the source in its source space (refused before anything is written unless ``force``:
    :func:`~vecbridge.runtime.provenance.check_space`). The new model runs where ``models`` says (a device missing
    here is refused before anything is written; the state keeps the model, never the device: another machine may
    re-embed); ``model_run`` in the result is its throughput."""
    models = models or ModelOptions()
    if (field is None) == (to is None):
        raise UsageError("say where the new vectors go: a new vector field of the source (field) or a new "
                         "collection (to), one of them")
    spec = _start_pairs(pairs, alignment=alignment, new_vectors=new_vectors, method=method, params=params)
    fit_sample = fit_sample or (REEMBED_FIT_SAMPLE if spec.kind == "reembed" else UNPAIRED_SAMPLE)
    named, text_field = text_field is not None, text_field or DEFAULT_TEXT_FIELD
    src = open_collection(source)
    chosen = method_of(method)
    state_path = Path(state_path) if state_path else default_state_path(src)
    _refuse_unwritable(state_path)
    with exclusive(state_path):
        info = src.info()
        new = None if new_vectors is None else open_collection(new_vectors)
        target = _new_vectors_target(src, info, field, to, new)
        settings = {"source": str(src.identity), "field": field, "target": None if field else str(target.identity),
                    "model": model, "text_field": text_field, "method": chosen.name, "fit_sample": fit_sample,
                    "seed": seed, "alignment": None if alignment is None else _alignment_key(alignment),
                    "pairs": str(spec), "new_vectors": None if new is None else str(new.identity)}
        state = _unfinished_start(state_path, settings)
        if state is None:
            _refuse_existing(src, info, target, field, overwrite)
            has_text = _require_text(src, text_field, seed, texts_may_be_gone=not named and (
                alignment is not None or spec.kind != "reembed"))
            if alignment is not None:   # the given map's side and dimension, before anything is re-embedded
                given = load_alignment(alignment)[0]
                if given.source_dim == info.dim:
                    check_space(src, given, "source", force=force)
            state = _fit_and_create(src, info, state_path, settings, alignment=alignment, to=to, chosen=chosen,
                                    replaces=field is None and target.exists(), on_step=on_step, models=models,
                                    new=new, params=params or {}, force=force, no_texts=not has_text)
        try:
            status = _write_and_stamp(src, state, alignment, field=field, to=to, batch_size=batch_size,
                                      on_step=on_step, force=force)
            return {**status, "model_run": models.summary()} if models.summary() else status
        finally:
            state.close()


def _start_pairs(pairs: str, *, alignment, new_vectors, method: str, params: dict | None) -> PairSpec:
    """How the map is obtained, refused in one line (:class:`UsageError`) where the options contradict each other:
    a given alignment and a pairing to fit one, a pairing without texts and no new-model vectors to fit against (or
    new-model vectors nothing reads), a method or estimator parameters that the pairing does not use."""
    spec = PairSpec.parse(pairs, allowed=START_PAIRS)
    fits_on_vectors = spec.kind != "reembed"
    if alignment is not None and fits_on_vectors:
        raise UsageError(f"--alignment gives the map and --pairs {spec} fits one: choose one of them")
    if fits_on_vectors and new_vectors is None:
        raise UsageError(f"--pairs {spec} fits the map against new-model vectors: name a collection of them with "
                         f"--new-vectors URL")
    if not fits_on_vectors and new_vectors is not None:
        raise UsageError("--new-vectors is read by --pairs unsupervised or geh:SEEDS only (the default, reembed, "
                         "re-embeds the source's texts)")
    if fits_on_vectors and method_of(method).name != "orthogonal":
        raise UsageError(f"--pairs {spec} fits an orthogonal map (the one it validates): drop --method {method}")
    if params and not fits_on_vectors:
        raise UsageError("--param sets the estimator of --pairs unsupervised or geh:SEEDS only")
    return spec


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


def _new_vectors_target(src: Collection, info, field: str | None, to, new: Collection | None = None) -> Collection:
    """Where the new vectors go, refused if it is the source itself, the source's own vector field or the new-model
    vectors the map is fitted against (``new``)."""
    if field is not None:
        if field == _source_field(src, info):
            raise InputError(f"--field {field} holds the source's own vectors, which an upgrade never writes: "
                             f"name a new field for the new model's vectors")
        return connect(src.url).with_vector_field(field)   # a clear StoreError where the store has no named vectors
    target = open_collection(to, read_only=False)
    refuse_inputs_as_target(target, [(src, "the source collection itself")] + (
        [(new, "the new-model vectors the map is fitted against (--new-vectors)")] if new is not None else []),
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


def _require_text(src: Collection, text_field: str, seed: int, *, texts_may_be_gone: bool = False) -> bool:
    """Whether sampled records hold text in ``text_field`` (the new model embeds it). None does: refused now,
    unless ``texts_may_be_gone`` (a map fitted without texts, no field named): then False, the mapped vectors are
    final."""
    sampled = src.sample(200, seed=seed)
    keep, _ = _texts(sampled, text_field)
    if len(keep):
        return True
    if texts_may_be_gone:
        return False
    fields = sorted({k for p in sampled.payloads for k in (p or {})})
    raise InputError(f"no sampled record of {src.display_url} has text in payload field {text_field!r} "
                     f"(its records hold: {', '.join(fields) or 'no payload'}): name it with --text-field (if the "
                     f"texts are gone: fit the map with --pairs unsupervised or geh:SEEDS and --new-vectors URL, or "
                     f"give --alignment, without --text-field)")


def _unfinished_start(path: Path, settings: dict) -> UpgradeState | None:
    """The state of an interrupted start of this same upgrade (continued), None if there is no state; a state of
    another upgrade, of one under way, or of a start with other settings is refused."""
    if not path.exists():
        return None
    state = UpgradeState.open(path)
    try:
        meta = state.meta
        check(meta, "start", path)
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
                    replaces: bool, on_step, models: ModelOptions, new: Collection | None = None,
                    params: dict | None = None, force: bool = False, no_texts: bool = False) -> UpgradeState:
    """Fit the map on a re-embedded sample, or against the new-model vectors ``new`` (unless ``alignment`` is
    given), then write the state file whole (its settings, the alignment and its validation, the fit sample, whether
    the source's texts are gone (``no_texts``), and whether the target collection ``replaces`` one that exists, with
    --overwrite): a start interrupted before, or refused by the map's validation, has left nothing behind."""
    model, text_field, seed = settings["model"], settings["text_field"], settings["seed"]
    sample = None
    align_path = state_path.with_name(state_path.name.replace(".upgrade.sqlite", "") + ".align.vb")
    if alignment is None and new is not None:
        alignment = _fit_without_texts(src, PairSpec.parse(settings["pairs"]), new, model=model,
                                       n=settings["fit_sample"], seed=seed, params=params or {}, force=force,
                                       on_step=on_step).save(align_path)
        fault_point("upgrade-start.fitted")
    elif alignment is None:
        on_step(f"re-embedding {settings['fit_sample']:,} stored texts ({text_field!r}) with {model} to fit the map")
        olds, news = reembed_pairs(src, models.load(model), text_field=text_field, n=settings["fit_sample"],
                                   seed=seed)
        fault_point("upgrade-start.sample-reembedded")
        est = chosen.build(seed=seed).fit(olds.vectors, news)
        alignment = attach_spaces(
            Alignment.from_estimator(est, target_model=model, metric=info.metric,
                                     anchors={"method": "re-embedded-sample", "n": len(olds)}),
            fingerprint_vectors(olds.vectors, seed=seed), fingerprint_vectors(news, model=model, seed=seed)).save(
                align_path)
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
        "replaces": replaces, "pairs": settings.get("pairs", "reembed"),
        "validation": aligned.metadata.get("validation"), "no_texts": no_texts})
    validation = aligned.metadata.get("validation")
    if validation:   # a map fitted without true pairs: how its label-free check went, in the history
        state.event("starting", f"map validated without labels: score {validation.get('score', float('nan')):.2f} "
                                f"({'passed' if validation.get('passed') else 'FAILED, kept with --force'})")
    if no_texts:
        state.event("starting", f"{TEXTS_GONE}: no sampled record holds text in {text_field!r}")
    if sample is not None:   # the re-embedded sample is the hub reference until a query log replaces it
        olds, news = sample
        state.set_fit_sample(olds.ids, digests_of(olds, text_field), olds.vectors, news)
        state.set_reference(news)
    state.close()
    os.replace(part, state_path)
    return UpgradeState.open(state_path)


def _fit_without_texts(src: Collection, spec: PairSpec, new: Collection, *, model: str, n: int, seed: int,
                       params: dict, force: bool, on_step) -> Alignment:
    """The map fitted on vectors alone, as ``fit --pairs unsupervised`` (mini-vec2vec) or ``fit --pairs geh:SEEDS``
    (GEH's links, refined) fit it, and validated the same way (:func:`vecbridge.pairing.learned.check_map`): one
    that fails is refused (:class:`~vecbridge.errors.CheckFailed`) unless ``force``; the alignment records the
    validation either way."""
    from ..fit import fit_alignment

    if spec.kind == "unsupervised":
        on_step(f"unsupervised alignment (mini-vec2vec) of up to {n:,} vectors per side against {new.display_url}, "
                f"validated without labels")
    return fit_alignment(src, new, pairs=spec, max_pairs=n, seed=seed, params=params, force=force,
                         target_model=model, on_step=on_step)


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


def _write_mapped(src: Collection, state: UpgradeState, aligned, align_file, *, field, to, batch_size,
                  stamps: MappedStamps, force: bool = False) -> None:
    """Mapped vectors into the field or collection this start owns, each with its stamp, by a resumable migration
    (once)."""
    if state.meta.get("migrated"):
        return
    checkpoint = state.path.with_name(state.path.name + ".migrate.json")
    given = aligned if align_file is None else align_file
    if not checkpoint.exists() and _made_by_this_start(src, state.meta, field, to):
        _adopt(src, given, field, to, checkpoint)
    resume = checkpoint.exists()
    with warnings.catch_warnings():   # the start's own status says how the map it just fitted validated
        warnings.simplefilter("ignore", MapValidationWarning)
        migrate(src, given, None if field else to, field=field, batch_size=batch_size, checkpoint_path=checkpoint,
                resume=resume, overwrite=not resume, force=force, record_stamps=stamps)
    fault_point("upgrade-start.mapped")
    state.update(migrated=True)


class _FinalStamps:
    """How a start whose source's texts are gone stamps each record its migration maps: ``no-text`` (its mapped
    vector is final: ``reembed`` never queues it), and ``mapped`` as usual where a record does hold text."""

    def __init__(self, mapped: MappedStamps, aligned: Alignment, text_field: str):
        spaces = spaces_of(aligned)
        self.mapped, self.text_field = mapped, text_field
        self.final = Stamper("no-text", aligned.fingerprint, spaces["target"] if spaces else None,
                             aligned.target_dim).base

    def __call__(self, batch: VectorBatch, mapped: np.ndarray) -> list[dict]:
        stamps = self.mapped(batch, mapped)
        keep, _ = _texts(batch, self.text_field)
        has = set(np.asarray(keep).tolist())
        return [st if j in has else {**st, **self.final} for j, st in enumerate(stamps)]


def _write_sample(up: Upgrade, sample) -> None:
    """The fit's re-embedded texts are native vectors already: written, stamped ``native`` in the same upsert."""
    olds, news, digests = sample
    if not len(olds):
        return
    with_self = hub_penalty(news, news, HUB_K + 1)   # each is its own nearest reference: leave it out
    stamps = up.stamper("native")(len(olds), digests=digests, hubness=(with_self * (HUB_K + 1) - 1.0) / HUB_K)
    up.target.upsert(olds.with_vectors(news, stamps))
    fault_point("upgrade-start.sample-written")


def _write_and_stamp(src: Collection, state: UpgradeState, alignment, *, field, to, batch_size, on_step,
                     force: bool = False) -> dict:
    """The writing part of :func:`start`, resumable: mapped vectors, each stamped (by a resumable migration into the
    field or collection this start owns), then the fit sample's native vectors."""
    meta = state.meta
    aligned, align_file = load_alignment(meta["alignment"] or alignment)
    sample = _kept_sample(src, state)
    on_step("writing mapped vectors beside the old ones")
    stamps = MappedStamps(aligned, meta["text_field"], sample, HUB_K)
    _write_mapped(src, state, aligned, align_file, field=field, to=to, batch_size=batch_size, force=force,
                  stamps=_FinalStamps(stamps, aligned, meta["text_field"]) if meta.get("no_texts") else stamps)
    target = open_target(src.url, field, to)
    up = Upgrade(state)
    up.source, up.target = src, target   # this run's handles hold the credentials the URLs given to it carry
    up.records.target = target
    if sample is not None:
        _write_sample(up, sample)
    fault_point("upgrade-start.stamped")
    stamp_alignment_target(target, aligned, origin="upgrade", source=src.display_url)
    up.recount()
    try:   # the serving view or alias exists from now on, over the old vectors: point applications at it early
        via = up._serve("old")
    except StoreError as exc:
        via = f"nothing switched (the serving view or alias could not be made: {exc})"
    to_stage = check(state.meta, "start", state.path)
    state.update(stage=to_stage, serving_via=via)
    state.event(to_stage, f"alignment {aligned.fingerprint[:12]}; serving the old model's vectors through {via}")
    up.meta = state.meta
    status = up.status()
    if has_secrets(str(src.url)) or (to and has_secrets(str(to))):
        status["credentials"] = ("the state file keeps no password or token: later commands read them from the "
                                 "environment (PGPASSWORD, QDRANT_API_KEY, MILVUS_TOKEN, ...)")
    return status
