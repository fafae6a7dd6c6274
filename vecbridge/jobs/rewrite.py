"""Rewrite a collection into the new model's space: stream, map every vector, write a new collection (or a new
vector field), resumable after any crash and refused wherever it could damage the source."""
from __future__ import annotations

import json
import re
import time
import warnings
from functools import partial
from pathlib import Path
from typing import Callable

from ..align.artifact import Alignment
from ..connectors import connect
from ..connectors.base import Collection, KeyRange, VectorBatch, first_duplicate
from ..errors import CheckFailed, InputError, StoreError, VecbridgeError
from ..faultpoint import fault_point
from ..results import DryRun, MigrationPlan, MigrationResult
from ..runtime.checkpoint import Checkpoint
from ..runtime.engine import engine_of
from ..runtime.guard import check_checkpoint_path, check_checkpoint_writable, exclusive_writer, refuse_inputs_as_target
from ..runtime.open import load_alignment, open_collection
from ..runtime.pipeline import CopyJob, committer, copy_unit, pending, range_phases
from ..runtime.provenance import MapStamps, check_space, stamp_alignment_target


def default_checkpoint_path(alignment_path: Path | None, target: Collection, kind: str = "migrate") -> Path:
    """Beside the alignment artifact (where the user keeps it), named after the target collection."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", target.display_url.split("://", 1)[-1]).strip("_")[-80:]
    base = alignment_path.parent if alignment_path else Path.cwd()
    stem = alignment_path.name if alignment_path else "vecbridge"
    return base / f"{stem}.{name}.{kind}.json"


def store_batch_size(coll: Collection, requested: int | None) -> int:
    """The user's choice, else what the store's connector prefers, else 1,000."""
    if requested is not None:
        if int(requested) <= 0:
            raise InputError(f"batch size must be a positive number of records, got {requested}")
        return int(requested)
    return coll.capabilities.preferred_batch_size


def check_source(src: Collection, alignment: Alignment):
    info = src.info()
    if info.dim != alignment.source_dim:
        raise InputError(f"{src.display_url} holds {info.dim}-d vectors but the alignment maps "
                         f"{alignment.source_dim}-d vectors (wrong alignment or wrong collection?)")
    if info.count == 0:
        raise InputError(f"source collection is empty: {src.display_url}")
    return info


def mapper(alignment: Alignment, stamps: Callable | None = None) -> Callable[[VectorBatch], VectorBatch]:
    """The transform of a migration: each batch mapped, every record stamped with how its new vector was made
    (``stamps(batch, vectors)``; by default :class:`~vecbridge.runtime.provenance.MapStamps`)."""
    stamps = stamps or MapStamps(alignment)

    def transform(batch: VectorBatch) -> VectorBatch:
        if not len(batch):
            return batch
        vectors = alignment.map_records(batch.vectors, batch.ids)
        return batch.with_vectors(vectors, stamps(batch, vectors))
    return transform


def plan_migration(src: Collection, alignment: Alignment, tgt: Collection, *, batch_size: int,
                   field: str | None) -> MigrationPlan:
    """Count, dimensions, an estimate of the read+map time measured on one batch, and the target size."""
    info = check_source(src, alignment)
    t = time.perf_counter()
    first = next(iter(src.scan(batch_size=min(batch_size, info.count))), None)
    mapped = mapper(alignment)(first) if first is not None else None
    per_record = (time.perf_counter() - t) / max(len(first), 1) if first is not None else 0.0
    payload_bytes = (len(json.dumps(first.payloads, default=str)) / max(len(first), 1)) if first is not None else 0
    size = int(info.count * (alignment.target_dim * 4 + payload_bytes + 16))
    notes = ["estimate covers reading and mapping only: the target store's write speed adds to it"]
    if alignment.metadata.get("is_projection"):
        notes.append("the alignment maps a larger space into a smaller one: a projection, not an isometry")
    del mapped
    return MigrationPlan(src.display_url, tgt.display_url, info.count, info.dim, alignment.target_dim,
                         info.metric, batch_size, field, per_record * info.count, size, notes)


class MapValidationWarning(UserWarning):
    """A map fitted without true pairs that failed its validation (kept with ``--force``) or passed it with a
    warning: said again by every migration that uses it."""


def warn_failed_validation(alignment: Alignment, path: Path | None = None):
    """Warn (before anything is written) when the alignment was saved with ``--force`` after failing its label-free
    validation (``metadata["validation"]``, :mod:`vecbridge.align.validation`), or passed it with a warning (a map
    fitted without pairs on few vectors)."""
    v = alignment.metadata.get("validation")
    if isinstance(v, dict) and v.get("passed") is False:
        name = path.name if path is not None else "the alignment"
        warnings.warn(f"{name} failed its validation when it was fitted (score {v.get('score', float('nan')):.2f} < "
                      f"{v.get('threshold', float('nan')):.2f}: {v.get('reason', 'no reason recorded')}) and was "
                      f"saved with --force: the migrated vectors are likely wrong", MapValidationWarning, stacklevel=3)
    elif isinstance(v, dict) and v.get("passed") and v.get("warning"):
        name = path.name if path is not None else "the alignment"
        warnings.warn(f"{name} was {v['warning']}", MapValidationWarning, stacklevel=3)


def migrate(source, alignment, target=None, *, field: str | None = None, batch_size: int | None = None,
            resume: bool = False, overwrite: bool = False, dry_run: bool = False, checkpoint_path=None,
            metric: str | None = None, build_index: bool = True, on_progress: Callable[[int], None] | None = None,
            on_start: Callable[[int, int], None] | None = None, on_phase: Callable[[str], None] | None = None,
            engine=None, force: bool = False, record_stamps: Callable | None = None) -> MigrationResult | DryRun:
    """Rewrite ``source`` (old model) into ``target`` (new model's space) through ``alignment``.

    * New collection (default): ``target`` must not exist (``overwrite=True`` drops and recreates it). It may never
      be the source, however its URL is spelled, not even another vector field of it: that is what ``field`` is for.
    * ``field=NAME``: add a vector field/column to the source collection itself (where the store supports it) and
      write the mapped vectors there; the original vectors are never touched. ``target`` must be None or the source.
    * ``resume=True``: continue an interrupted run from its checkpoint (refused if anything differs), with the
      batch size of the original run.
    * ``dry_run=True``: return the plan and write nothing.
    * ``build_index=False``: where the store defers its vector index (pgvector), leave the new collection without
      one (the user builds it later, e.g. ``CREATE INDEX CONCURRENTLY`` in a maintenance window).
    * ``on_phase``: called with ``"index"`` before a deferred index build (it can take minutes).
    * ``force``: map the source even where it does not look like the alignment's source space, or holds more than
      one space (:func:`~vecbridge.runtime.provenance.check_space`; refused otherwise, before anything is written).
      The result and the target's stamp record that the check was overridden.
    * ``record_stamps``: ``(batch, new vectors) -> stamps``, each record's stamp written with its new vector (by
      default: mapped by this alignment, in its target space; :class:`~vecbridge.runtime.provenance.MapStamps`).
    * ``engine``: where the copying runs (:mod:`vecbridge.runtime.engine`; None: here). In this process the source
      is read in one pass (checkpoint phase ``main``); an engine whose bodies run elsewhere (Ray) copies
      ``engine.units`` key ranges of it, a phase each, ``engine.workers`` at a time (the source needs key ranges;
      no ``field`` and no dry run there yet).

    Only one run writes a target at a time; at the end the job checks that the target holds as many records as it
    read, and raises :class:`CheckFailed` if not.
    """
    engine = engine_of(engine)
    if engine.remote and (target is None or dry_run):
        raise InputError("--engine ray writes a new collection: --field and --dry-run are not supported with it "
                         "yet (use --engine local)")
    alignment, alignment_path = load_alignment(alignment)
    warn_failed_validation(alignment, alignment_path)
    src = open_collection(source)   # never written: the identity checks below make sure
    if field is not None:
        if target is not None:
            given = target if isinstance(target, Collection) else connect(target)
            if given.identity != src.identity:
                raise InputError("--field writes into the source collection itself: do not also give --to")
        if field == src.vector_field:
            raise InputError(f"--field {field} is the field that holds the source vectors: name a new field")
        base = connect(src.url)
        tgt = base.with_vector_field(field)   # a clear StoreError where the store has no named vectors
    else:
        if target is None:
            raise InputError("a target collection is required (or --field NAME for an in-place vector field)")
        tgt = open_collection(target, read_only=False)
        refuse_inputs_as_target(tgt, [(src, "the source collection itself")], "choose a new target" + (
            "" if engine.remote else " (or --field NAME to add a vector field in place)"))
    engine.require((src, "source"), (tgt, "target"))
    bs = store_batch_size(tgt, batch_size)
    check_source(src, alignment)
    space = check_space(src, alignment, "source", force=force, mixed=True)
    if dry_run:
        return DryRun(plan_migration(src, alignment, tgt, batch_size=bs, field=field))

    info, ckpt_path, identity = preflight(src, tgt, alignment, alignment_path, checkpoint_path,
                                          kind="migrate-ranges" if engine.remote else "migrate", field=field)
    with exclusive_writer(tgt), engine.session():
        planned: list[KeyRange] = []

        def create():
            if engine.remote:
                planned.extend(src.key_ranges(engine.units))   # before any write: a store without ranges refuses
            if field is not None:
                if overwrite and field in base.info().vector_fields:   # never the source's own: refused above
                    base.drop_vector_field(field)
                base.add_vector_field(field, alignment.target_dim, metric or info.metric)
            else:
                create_target(tgt, alignment.target_dim, metric or info.metric, overwrite=overwrite)
            fault_point("migrate.target-created")

        ckpt, created, bs = open_checkpoint(ckpt_path, identity, tgt, resume=resume, overwrite=overwrite,
                                            batch_size=bs, create=create, new_collection=field is None)
        if created and engine.remote:
            ckpt.state["ranges"] = [r.as_dict() for r in planned]
        parts = range_phases("", _ranges_of(ckpt)) if engine.remote else [("main", None)]
        ckpt.start()
        resumed_from = ckpt.written
        if on_start:
            on_start(info.count, ckpt.read)
        t0 = time.perf_counter()
        units = pending(ckpt, engine.portable(src), "map", parts)
        try:
            steps = {"map": partial(mapper, alignment, record_stamps)}
            engine.run(copy_unit, units, shared=CopyJob(engine.portable(tgt), bs, steps),
                       on_report=committer(ckpt, units, on_progress=on_progress))
        except (VecbridgeError, OSError) as exc:
            # bad data in the source, or a target that refused the first write: never leave a half-written new
            # collection behind (a collection that already holds committed batches is kept for --resume)
            if created and field is None and (ckpt.written == 0 or isinstance(exc, InputError)):
                discard_target(tgt, ckpt)
            raise
        fault_point("migrate.before-finish")
        held = finish_target(tgt, ckpt, build_index=build_index, on_phase=on_phase, count=field is None)
        stamp_alignment_target(tgt, alignment, origin="mapped", source=src.display_url,
                               forced=space.reason if space.forced else None)
    seconds = time.perf_counter() - t0
    check_counts(tgt, read=ckpt.read, written=ckpt.written, held=held, source=src)
    written = ckpt.written - resumed_from
    return MigrationResult(src.display_url, tgt.display_url, info.count, ckpt.read, written, resumed_from, seconds,
                           written / seconds if seconds > 0 else None, field, bs, space.as_dict())


def _ranges_of(ckpt: Checkpoint) -> list[KeyRange]:
    """The key ranges a distributed migration planned, from its checkpoint."""
    ranges = [KeyRange.from_dict(d) for d in ckpt.state.get("ranges") or []]
    if not ranges:
        raise InputError(f"checkpoint {ckpt.path} holds no key ranges; remove it and the target to start over")
    return ranges


def preflight(src: Collection, tgt: Collection, alignment: Alignment, alignment_path, checkpoint_path, *, kind: str,
              field: str | None = None) -> tuple:
    """What a migration checks before it creates anything: the source matches the alignment, the checkpoint and the
    target can be written. Returns ``(source info, checkpoint path, the checkpoint's job identity)``."""
    info = check_source(src, alignment)
    ckpt_path = Path(checkpoint_path) if checkpoint_path else default_checkpoint_path(alignment_path, tgt)
    check_checkpoint_path(ckpt_path, [src, tgt], alignment_path)
    check_checkpoint_writable(ckpt_path)
    tgt.check_writable()
    identity = {"kind": kind, "source": str(src.identity), "target": str(tgt.identity),
                "alignment": alignment.fingerprint, "source_dim": info.dim, "field": field}
    return info, ckpt_path, identity


def open_checkpoint(path: Path, identity: dict, tgt: Collection, *, resume: bool, overwrite: bool, batch_size: int,
                    create: Callable[[], None], new_collection: bool = True) -> tuple[Checkpoint, bool, int]:
    """``(checkpoint, created, batch size)`` of a write job, called holding the target's writer lock: an existing
    checkpoint is resumed (``resume``: refused if its identity differs or the target is gone; its batch size is
    kept), started over (``overwrite``) or refused; otherwise ``create()`` makes the target and a new checkpoint
    begins.

    ``new_collection`` (the target is a collection the job creates, not a field of an existing one): the checkpoint
    is saved marked :meth:`~Checkpoint.mark_creating` before ``create()``, so a run stopped while the target was
    being made resumes by dropping what it made and creating it again."""
    ckpt = Checkpoint(path, identity)
    redo = False
    if ckpt.exists():
        if not resume and not overwrite:
            raise InputError(f"an interrupted migration into {tgt.display_url} exists (checkpoint {ckpt.path}): "
                             f"rerun with --resume to continue it, or --overwrite to start over")
        if resume:
            ckpt.load()
            if not (new_collection and ckpt.creating):
                if not tgt.exists():
                    raise StoreError(f"cannot resume: the target {tgt.display_url} no longer exists")
                return ckpt, False, ckpt.batch_size or batch_size
            batch_size, redo = ckpt.batch_size or batch_size, True
    if new_collection:
        if tgt.exists() and (redo or overwrite):
            tgt.drop()   # this run's own half-made target, or one the user asked to replace
        elif tgt.exists():
            raise StoreError(f"target already exists: {tgt.display_url} (choose a new collection, "
                             f"--resume an interrupted run, or --overwrite)")
    ckpt = Checkpoint(path, identity)
    ckpt.batch_size = batch_size
    if new_collection:
        ckpt.mark_creating()
    try:
        create()
    except Exception:
        if new_collection:
            ckpt.remove()   # nothing was made that a resume could continue
        raise
    return ckpt, True, batch_size


def create_target(tgt: Collection, dim: int, metric: str, *, overwrite: bool) -> None:
    """Create a migration's new collection (its vector index deferred where the store prefers that); one that exists
    is refused, or dropped first with ``overwrite``."""
    if tgt.exists():
        if not overwrite:
            raise StoreError(f"target already exists: {tgt.display_url} (choose a new collection, "
                             f"--resume an interrupted run, or --overwrite)")
        tgt.drop()
    deferred = {"index": False} if tgt.capabilities.deferred_index else {}
    tgt.create(dim=dim, metric=metric, **deferred)


def finish_target(tgt: Collection, ckpt: Checkpoint, *, build_index: bool, on_phase: Callable[[str], None] | None,
                  count: bool = True) -> int | None:
    """After the last write: build a deferred index, count the target (``count``), close the checkpoint; returns
    the count for :func:`check_counts`."""
    if build_index and tgt.capabilities.deferred_index:
        if on_phase:
            on_phase("index")
        tgt.build_index()
    held = tgt.info().count if count else None
    ckpt.finish()
    return held


def duplicate_id(source: Collection, batch_size: int = 10_000):
    """The first id that ``source`` yields twice in a scan (None if none does): a target holding fewer records than
    were written is explained by it (a table without a primary key, an ids file that repeats an id)."""
    seen: set = set()
    for batch in source.scan(batch_size=batch_size):
        dup = first_duplicate(batch.ids, seen)
        if dup is not None:
            return dup
    return None


def check_counts(target: Collection, *, read: int, written: int, held: int | None, expected: int | None = None,
                 source: Collection | None = None):
    """A job's last word: every record read was written and the target holds them all. Where the target holds
    fewer than were written, the ``source`` (if given) is searched for an id it holds twice, which is named."""
    expected = read if expected is None else expected
    if written != expected or (held is not None and held != written):
        if source is not None and held is not None and held < written:
            dup = duplicate_id(source)
            if dup is not None:
                raise InputError(f"duplicate id {dup!r} in the source {source.display_url}: {written:,} records "
                                 f"were written and {target.display_url} holds {held:,}, one per distinct id")
        holds = f", and {target.display_url} holds {held:,}" if held is not None else ""
        raise CheckFailed(f"record count mismatch: {read:,} records read, {written:,} written (expected "
                          f"{expected:,}){holds}; the source may have changed during the run: run `vecbridge "
                          f"verify`, or --overwrite to redo it")


def discard_target(tgt: Collection, ckpt: Checkpoint):
    """Drop a new target that holds nothing worth keeping, and its checkpoint."""
    try:
        tgt.drop()
    finally:
        ckpt.remove()

