"""Rewrite a collection into the new model's space: stream, map every vector, write a new collection (or a new
vector field), resumable after any crash and refused wherever it could damage the source."""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Callable

import numpy as np

from ..align.artifact import Alignment
from ..connectors import connect
from ..connectors.base import Collection, VectorBatch
from ..errors import InputError, StoreError
from .checkpoint import Checkpoint
from .pipeline import copy_stream

DEFAULT_BATCH = 1000


def load_alignment(alignment) -> tuple[Alignment, Path | None]:
    if isinstance(alignment, Alignment):
        return alignment, None
    path = Path(alignment)
    return Alignment.load(path), path


def default_checkpoint_path(alignment_path: Path | None, target: Collection, kind: str = "migrate") -> Path:
    """Beside the alignment artifact (where the user keeps it), named after the target collection."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", target.display_url.split("://", 1)[-1]).strip("_")[-80:]
    base = alignment_path.parent if alignment_path else Path.cwd()
    stem = alignment_path.name if alignment_path else "vecbridge"
    return base / f"{stem}.{name}.{kind}.json"


def store_batch_size(coll: Collection, requested: int | None) -> int:
    """The user's choice, else what the store's connector prefers, else 1,000."""
    if requested:
        if requested <= 0:
            raise InputError("--batch-size must be positive")
        return requested
    return int(getattr(coll, "preferred_batch_size", DEFAULT_BATCH))


def check_source(src: Collection, alignment: Alignment):
    info = src.info()
    if info.dim != alignment.source_dim:
        raise InputError(f"{src.display_url} holds {info.dim}-d vectors but the alignment maps "
                         f"{alignment.source_dim}-d vectors (wrong alignment or wrong collection?)")
    if info.count == 0:
        raise InputError(f"source collection is empty: {src.display_url}")
    return info


def mapper(alignment: Alignment) -> Callable[[VectorBatch], VectorBatch]:
    def transform(batch: VectorBatch) -> VectorBatch:
        if not len(batch):
            return batch
        vectors = np.asarray(batch.vectors, dtype=np.float32)
        if not np.isfinite(vectors).all():
            row = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
            raise InputError(f"source record {batch.ids[row]!r} has a NaN or inf vector")
        return batch.with_vectors(alignment.transform(vectors))
    return transform


@dataclass
class MigrationPlan:
    source: str
    target: str
    count: int
    source_dim: int
    target_dim: int
    metric: str
    batch_size: int
    field: str | None
    estimated_read_map_s: float
    estimated_target_bytes: int
    notes: list[str] = dc_field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _same_collection(a: Collection, b: Collection) -> bool:
    return type(a) is type(b) and a.display_url.rstrip("/") == b.display_url.rstrip("/")


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


def migrate(source, alignment, target=None, *, field: str | None = None, batch_size: int | None = None,
            resume: bool = False, overwrite: bool = False, dry_run: bool = False, checkpoint_path=None,
            metric: str | None = None, build_index: bool = True, on_progress: Callable[[int], None] | None = None,
            on_start: Callable[[int, int], None] | None = None) -> dict:
    """Rewrite ``source`` (old model) into ``target`` (new model's space) through ``alignment``.

    * New collection (default): ``target`` must not exist (``overwrite=True`` drops and recreates it; never the
      source). Same ids, payloads; vectors mapped.
    * ``field=NAME``: add a vector field/column to the source collection itself (where the store supports it) and
      write the mapped vectors there; the original vectors are never touched. ``target`` must be None or the source.
    * ``resume=True``: continue an interrupted run from its checkpoint (refused if anything differs).
    * ``dry_run=True``: return the plan and write nothing.
    * ``build_index=False``: where the store defers its vector index (pgvector), leave the new collection without
      one (the user builds it later, e.g. ``CREATE INDEX CONCURRENTLY`` in a maintenance window).
    """
    alignment, alignment_path = load_alignment(alignment)
    src = source if isinstance(source, Collection) else connect(source, read_only=True)
    src.read_only = True
    if field is not None:
        if target is not None and str(target) != str(getattr(source, "url", source)):
            raise InputError("--field writes into the source collection itself: do not also give --to")
        base = connect(src.url)
        tgt = base.with_vector_field(field)   # a clear StoreError where the store has no named vectors
    else:
        if target is None:
            raise InputError("a target collection is required (or --field NAME for an in-place vector field)")
        tgt = target if isinstance(target, Collection) else connect(target)
        if _same_collection(src, tgt):
            raise InputError("refusing to write into the source collection itself: choose a new target "
                             "(or --field NAME to add a vector field in place)")
    bs = store_batch_size(tgt, batch_size)
    if dry_run:
        return {"dry_run": True, "plan": plan_migration(src, alignment, tgt, batch_size=bs, field=field).as_dict()}

    info = check_source(src, alignment)
    ckpt_path = Path(checkpoint_path) if checkpoint_path else default_checkpoint_path(alignment_path, tgt)
    identity = {"kind": "migrate", "source": src.display_url, "target": tgt.display_url,
                "alignment": alignment.fingerprint, "source_dim": info.dim, "field": field}
    ckpt = Checkpoint(ckpt_path, identity)
    created = False
    if ckpt.exists():
        if not resume and not overwrite:
            previous = json.loads(ckpt.path.read_text()).get("status")
            if previous == "done":
                raise InputError(f"{tgt.display_url} was already migrated (checkpoint {ckpt.path}); use "
                                 f"--overwrite to redo it")
            raise InputError(f"an interrupted migration into {tgt.display_url} exists (checkpoint {ckpt.path}): "
                             f"rerun with --resume to continue it, or --overwrite to start over")
        if resume:
            ckpt.load()
            if not tgt.exists():
                raise StoreError(f"cannot resume: the target {tgt.display_url} no longer exists")
    if not resume or not ckpt.exists():
        if field is not None:
            base.add_vector_field(field, alignment.target_dim, metric or info.metric)
        else:
            if tgt.exists():
                if not overwrite:
                    raise StoreError(f"target already exists: {tgt.display_url} (choose a new collection, "
                                     f"--resume an interrupted run, or --overwrite)")
                tgt.drop()
            deferred = {"index": False} if tgt.supports_deferred_index else {}
            tgt.create(dim=alignment.target_dim, metric=metric or info.metric, **deferred)
            created = True
        ckpt = Checkpoint(ckpt_path, identity)
    ckpt.start()
    if on_start:
        on_start(info.count, ckpt.written)
    t0 = time.perf_counter()
    try:
        written = copy_stream(src, tgt, transform=mapper(alignment), checkpoint=ckpt, phase="main",
                              batch_size=bs, on_progress=on_progress)
    except InputError:
        if created:  # bad data in the source: never leave a half-written new collection behind
            _discard(tgt, ckpt)
        raise
    if build_index:
        tgt.build_index()
    ckpt.finish()
    seconds = time.perf_counter() - t0
    return {"source": src.display_url, "target": tgt.display_url, "count": info.count, "written": written,
            "resumed_from": ckpt.written - written, "seconds": seconds,
            "vectors_per_s": written / seconds if seconds > 0 else None, "checkpoint": str(ckpt.path),
            "field": field}


def _discard(tgt: Collection, ckpt: Checkpoint):
    try:
        tgt.drop()
    finally:
        if ckpt.path.exists():
            ckpt.path.unlink()
