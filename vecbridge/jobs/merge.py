"""Merge two indexes built with different encoders into one collection in B's space.

A (old encoder) is mapped into B's space with a fitted alignment; B's records are copied as they are; records
linked across the two (same id, or an explicit links file of ``a_id,b_id`` pairs, e.g. from GEH) become one record.
Policies for a linked pair:

* ``keep-b`` (default): B's vector (native in the target space); payloads merged, B's values win on conflicts;
* ``keep-a``: A's mapped vector, payloads merged the same way;
* ``keep-both``: B's vector, and A's mapped vector in a second vector field ``a_mapped`` (stores with named
  vector fields only).

Unlinked A records keep their ids; with a links file, an unlinked A id that is also a B id is written as
``"a:<id>"`` so that neither record overwrites the other (the summary counts them). Two resumable phases
(B, then A), checkpointed like ``migrate``.

What is done to each batch lives in :class:`MergeSteps`, and the checks and the target's creation in
:func:`prepare` and :func:`begin`: ``merge --engine ray`` (:func:`vecbridge.jobs.distributed.merge_on_ray`) runs
the same code in its tasks, so both engines write the same records.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np

from ..align.artifact import Alignment
from ..connectors import connect
from ..connectors.base import Collection, VectorBatch
from ..errors import InputError, StoreError, VecbridgeError
from ..faultpoint import fault_point
from ..linking.pairspec import PairSpec
from ..pairing.pairs import read_pairs_file
from ..results import MergeResult
from ..runtime.checkpoint import Checkpoint
from ..runtime.engine import engine_of
from ..runtime.guard import check_checkpoint_path, check_checkpoint_writable, exclusive_writer, refuse_inputs_as_target
from ..runtime.open import load_alignment, open_collection
from ..runtime.pipeline import copy_stream
from .rewrite import _discard, check_counts, check_source, default_checkpoint_path, mapper, store_batch_size

POLICIES = ("keep-b", "keep-a", "keep-both")
A_FIELD = "a_mapped"


def _merge_payload(pa: dict, pb: dict) -> dict:
    return {**(pa or {}), **(pb or {})}


class MergeSteps:
    """What a merge does to each batch, one piece of code for the single-process run and for the Ray tasks.

    :meth:`phase_b` folds the linked A records into a batch of B; :meth:`phase_a` drops a batch of A's linked records,
    renames the unlinked ones whose id B also holds and maps the rest. ``a``, ``b`` and ``a_into`` (where keep-both
    writes A's mapped vectors) are open collections, or URLs (a ``str`` or anything with ``.url``) that each process
    opens itself, so that a pickled copy travels to a Ray task without a connection in it. :attr:`stats` counts
    the ``linked`` and ``renamed`` records of the batches this copy transformed."""

    def __init__(self, a, b, alignment: Alignment, *, explicit: dict | None = None, policy: str = "keep-b",
                 a_into=None):
        self.a, self.b, self.a_into = a, b, a_into
        self.alignment, self.explicit, self.policy = alignment, explicit, policy
        self.stats = {"linked": 0, "renamed": 0}
        self._open: dict = {}

    def __getstate__(self) -> dict:
        """A copy for another process: no open connection, its counts from zero."""
        return {**self.__dict__, "stats": {"linked": 0, "renamed": 0}, "_open": {}}

    def _coll(self, role: str) -> Collection | None:
        if role not in self._open:
            given = getattr(self, role)
            if given is None or isinstance(given, Collection):
                coll = given
            elif role == "a_into":   # the merged collection's URL: A's mapped vectors go to its second field
                coll = connect(getattr(given, "url", given)).with_vector_field(A_FIELD)
            else:
                coll = connect(getattr(given, "url", given), read_only=True)
            self._open[role] = coll
        return self._open[role]

    def _to_b(self, batch: VectorBatch) -> VectorBatch:
        if "map" not in self._open:
            self._open["map"] = mapper(self.alignment)
        return self._open["map"](batch)

    def _linked_a_for(self, b_ids: list) -> VectorBatch:
        A = self._coll("a")
        if self.explicit is None:
            return A.get(b_ids)
        wanted = [self.explicit["b2a"][str(i)] for i in b_ids if str(i) in self.explicit["b2a"]]
        got = A.get(wanted)
        got.ids = [self.explicit["a2b"][str(i)] for i in got.ids]  # re-key A's records by their B id
        return got

    def phase_b(self, batch: VectorBatch) -> VectorBatch:
        """A batch of B with its linked A records folded in (payloads merged, B's values win; keep-a: A's mapped
        vector; keep-both: :meth:`phase_a` writes A's mapped vector to the second field, once the record exists)."""
        a_recs = self._linked_a_for(list(batch.ids))
        if not len(a_recs):
            return batch
        self.stats["linked"] += len(a_recs)
        a_by_id = {i: j for j, i in enumerate(a_recs.ids)}
        mapped = self._to_b(a_recs).vectors
        vectors = batch.vectors.copy()
        payloads = list(batch.payloads)
        for j, i in enumerate(batch.ids):
            if i in a_by_id:
                k = a_by_id[i]
                payloads[j] = _merge_payload(a_recs.payloads[k], payloads[j])
                if self.policy == "keep-a":
                    vectors[j] = mapped[k]
        return VectorBatch(batch.ids, vectors, payloads)

    def counted(self, phase: str) -> Callable[[VectorBatch], tuple[VectorBatch, dict]]:
        """The transform of ``phase`` (``"a"`` or ``"b"``) returning each batch with the counts it added, which
        :func:`~vecbridge.runtime.pipeline.copy_stream` keeps in the checkpoint (a resumed merge reports the whole job's
        linked and renamed records, not only its own)."""
        step = getattr(self, f"phase_{phase}")

        def transform(batch: VectorBatch) -> tuple[VectorBatch, dict]:
            before = dict(self.stats)
            out = step(batch)
            return out, {k: v - before[k] for k, v in self.stats.items()}
        return transform

    def phase_a(self, batch: VectorBatch) -> VectorBatch:
        """A batch of A without its linked records (phase B wrote them), clashing ids renamed, mapped. keep-both:
        the linked records' mapped vectors go to the second field of their merged records, which exist by now (a
        second field is written in place: it only updates records that exist)."""
        B = self._coll("b")
        if self.explicit is None:
            linked = {i for i in B.get(list(batch.ids)).ids}
        else:
            linked = {i for i in batch.ids if str(i) in self.explicit["a2b"]}
        C_a = self._coll("a_into")
        if C_a is not None and linked:   # the records phase B merged these into, linked as phase B linked them
            b_ids = list(linked) if self.explicit is None else \
                B.get([self.explicit["a2b"][str(i)] for i in linked]).ids
            a_recs = self._linked_a_for(b_ids)
            if len(a_recs):
                C_a.upsert(VectorBatch(list(a_recs.ids), self._to_b(a_recs).vectors, [{}] * len(a_recs)))
        keep = np.array([i not in linked for i in batch.ids], dtype=bool)
        batch = batch.take(keep)
        if self.explicit is not None and len(batch):
            clash = {i for i in B.get(list(batch.ids)).ids}
            if clash:
                self.stats["renamed"] += len(clash)
                batch.ids = [f"a:{i}" if i in clash else i for i in batch.ids]
        return self._to_b(batch)


def prepare(a, b, into, alignment, *, links: "str | PairSpec", policy: str, batch_size: int | None,
            checkpoint_path, kind: str = "merge") -> dict:
    """Everything a merge checks before it writes anything (the local and the Ray engine alike): the policy, the
    alignment, that the target is neither input, the dimensions, the links, a second vector field for keep-both,
    that the checkpoint and the target can be written. Returns what the run needs."""
    if policy not in POLICIES:
        raise InputError(f"policy must be one of {', '.join(POLICIES)}")
    alignment, alignment_path = load_alignment(alignment)
    A, B = open_collection(a), open_collection(b)   # never written: the identity check below makes sure
    C = open_collection(into, read_only=False)
    hint = "choose a new collection for --into"
    refuse_inputs_as_target(C, [(A, "one of the inputs (A)"), (B, "one of the inputs (B)")], hint)
    a_info = check_source(A, alignment)
    b_info = B.info()
    if b_info.dim != alignment.target_dim:
        raise InputError(f"{B.display_url} holds {b_info.dim}-d vectors but the alignment maps into "
                         f"{alignment.target_dim}-d space")

    spec = PairSpec.parse(links, allowed=("ids", "file"))
    explicit = None
    if spec.kind == "file":
        pairs = read_pairs_file(spec.value)
        explicit = {"a2b": {str(x): y for x, y in pairs}, "b2a": {str(y): x for x, y in pairs}}

    C_a = C.with_vector_field(A_FIELD) if policy == "keep-both" else None  # refuses before anything is written
    bs = store_batch_size(C, batch_size)
    ckpt_path = Path(checkpoint_path) if checkpoint_path else default_checkpoint_path(alignment_path, C, "merge")
    check_checkpoint_path(ckpt_path, [A, B, C], alignment_path)
    check_checkpoint_writable(ckpt_path)
    C.check_writable()
    identity = {"kind": kind, "a": str(A.identity), "b": str(B.identity), "into": str(C.identity),
                "alignment": alignment.fingerprint, "links": str(spec) if spec.kind == "ids" else Path(spec.value).name,
                "policy": policy}
    return {"A": A, "B": B, "C": C, "C_a": C_a, "alignment": alignment, "explicit": explicit, "bs": bs,
            "checkpoint": Checkpoint(ckpt_path, identity), "a_info": a_info, "b_info": b_info}


def begin(ckpt: Checkpoint, C: Collection, alignment: Alignment, b_info, policy: str, *, bs: int, resume: bool,
          overwrite: bool, before_create: Callable[[], None] | None = None) -> tuple[bool, int]:
    """Resume the checkpoint (its batch size kept), or create the merged collection (an existing one refused unless
    ``overwrite``) after ``before_create()``; called holding the target's writer lock. Returns ``(created, batch
    size)``. As for a migration (:func:`~vecbridge.jobs.rewrite.open_checkpoint`), the checkpoint is saved marked
    as creating before the merged collection is made, so a run stopped meanwhile resumes by making it again."""
    redo = False
    if ckpt.exists() and resume:
        ckpt.load()
        if not ckpt.creating:
            return False, ckpt.batch_size or bs
        bs, redo = ckpt.batch_size or bs, True
        ckpt.state = Checkpoint(ckpt.path, ckpt.identity).state   # nothing was written: start the phases afresh
    elif ckpt.exists() and not overwrite:
        raise InputError(f"a merge into {C.display_url} was already started (checkpoint {ckpt.path}): "
                         f"use --resume or --overwrite")
    if before_create is not None:
        before_create()
    if C.exists():
        if not (overwrite or redo):
            raise StoreError(f"target already exists: {C.display_url} (choose a new collection or --overwrite)")
        C.drop()   # this run's own half-made collection, or one the user asked to replace
    ckpt.batch_size = bs
    ckpt.mark_creating()
    try:
        deferred = {"index": False} if C.supports_deferred_index else {}
        C.create(dim=alignment.target_dim, metric=b_info.metric, **deferred)
        if policy == "keep-both":
            C.add_vector_field(A_FIELD, alignment.target_dim, b_info.metric)
    except Exception:
        ckpt.remove()   # nothing was made that a resume could continue
        raise
    fault_point("merge.target-created")
    return True, bs


def finish(C: Collection, ckpt: Checkpoint) -> int:
    """After the last write: build the index, close the checkpoint, check the counts; returns what C holds."""
    C.build_index()
    count = C.info().count
    ckpt.finish()
    # linked A records are merged into their B record, not written: the target must hold exactly what was written
    check_counts(C, read=ckpt.read, written=ckpt.written, held=count, expected=ckpt.written)
    return count


def merge(a, b, into, alignment, *, links: "str | PairSpec" = "ids", policy: str = "keep-b",
          batch_size: int | None = None, resume: bool = False, overwrite: bool = False, checkpoint_path=None,
          on_progress=None, engine=None) -> MergeResult:
    engine = engine_of(engine)
    if engine.name == "ray":  # temporary: the Ray twin, until this job runs its body through the engine seam
        from .distributed import merge_on_ray

        return merge_on_ray(a, b, into, alignment, links=links, policy=policy, workers=engine.workers,
                            ray_address=engine.address, ranges_per_worker=engine.units_per_worker,
                            batch_size=batch_size, resume=resume, overwrite=overwrite,
                            checkpoint_path=checkpoint_path, on_progress=on_progress)
    job = prepare(a, b, into, alignment, links=links, policy=policy, batch_size=batch_size,
                  checkpoint_path=checkpoint_path)
    with exclusive_writer(job["C"]):
        return _merge(**job, policy=policy, resume=resume, overwrite=overwrite, on_progress=on_progress)


def _merge(A, B, C, C_a, alignment, explicit, policy, bs, resume, overwrite, checkpoint, a_info, b_info,
           on_progress):
    ckpt = checkpoint
    created, bs = begin(ckpt, C, alignment, b_info, policy, bs=bs, resume=resume, overwrite=overwrite)
    ckpt.start()
    steps = MergeSteps(A, B, alignment, explicit=explicit, policy=policy, a_into=C_a)
    t0 = time.perf_counter()
    try:
        written = copy_stream(B, C, transform=steps.counted("b"), checkpoint=ckpt, phase="b", batch_size=bs,
                              on_progress=on_progress)
        fault_point("merge.between-phases")
        written += copy_stream(A, C, transform=steps.counted("a"), checkpoint=ckpt, phase="a", batch_size=bs,
                               on_progress=on_progress)
    except (VecbridgeError, OSError) as exc:
        if created and (ckpt.written == 0 or isinstance(exc, InputError)):
            _discard(C, ckpt)   # bad input data or a refused first write: no half-merged collection left behind
        raise
    fault_point("merge.before-finish")
    stats = {k: ckpt.total(k) for k in ("linked", "renamed")}   # the whole job's, across resumes
    count = finish(C, ckpt)
    return MergeResult(A.display_url, B.display_url, C.display_url, policy, a_info.count, b_info.count, written,
                       stats["linked"], stats["renamed"], count, time.perf_counter() - t0)
