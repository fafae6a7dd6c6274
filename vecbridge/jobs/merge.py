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

What is done to each batch lives in :class:`MergeSteps`, run by the copy body of :mod:`vecbridge.runtime.pipeline`
on any engine, so every engine writes the same records. On an engine whose bodies run in other processes (Ray), B
and A are each cut into key ranges (phases ``b-range-NNNN`` and ``a-range-NNNN``); A's slices start once every slice
of B is written, as in one process: keep-both sets A's mapped vector on the merged records phase B wrote.
"""
from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..align.artifact import Alignment
from ..connectors.base import Collection, KeyRange, VectorBatch
from ..errors import InputError, StoreError, VecbridgeError
from ..faultpoint import fault_point
from ..linking.pairspec import PairSpec
from ..pairing.table import pairing
from ..results import MergeResult
from ..runtime.checkpoint import Checkpoint
from ..runtime.engine import engine_of
from ..runtime.guard import check_checkpoint_path, check_checkpoint_writable, exclusive_writer, refuse_inputs_as_target
from ..runtime.open import load_alignment, open_collection
from ..runtime.pipeline import CopyJob, committer, copy_unit, pending, range_phases
from ..runtime.provenance import MapStamps, check_space, stamp_alignment_target
from .rewrite import check_counts, check_source, default_checkpoint_path, discard_target, mapper, store_batch_size

POLICIES = ("keep-b", "keep-a", "keep-both")
A_FIELD = "a_mapped"


def _merge_payload(pa: dict, pb: dict) -> dict:
    return {**(pa or {}), **(pb or {})}


class MergeSteps:
    """What a merge does to each batch, one piece of code for every engine.

    :meth:`phase_b` folds the linked A records into a batch of B; :meth:`phase_a` drops a batch of A's linked records,
    renames the unlinked ones whose id B also holds and maps the rest. ``a``, ``b`` and ``a_into`` (the merged
    collection: keep-both writes A's mapped vectors to its second field) are open collections, or URLs (a ``str`` or
    anything with ``.url``) that each process opens itself, so that a pickled copy travels to a Ray task without a
    connection in it. :attr:`stats` counts the ``linked`` and ``renamed`` records of the batches this copy
    transformed."""

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
            if given is None:
                coll = None
            elif role == "a_into":   # the merged collection: A's mapped vectors go to its second field
                coll = open_collection(given, read_only=False).with_vector_field(A_FIELD)
            else:
                coll = open_collection(given)
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
            return batch.with_stamps(self._native(batch))
        self.stats["linked"] += len(a_recs)
        a_by_id = {i: j for j, i in enumerate(a_recs.ids)}
        mapped = self._to_b(a_recs).vectors
        vectors = batch.vectors.copy()
        payloads = list(batch.payloads)
        stamps = list(self._native(batch))   # one per record, some replaced below
        for j, i in enumerate(batch.ids):
            if i in a_by_id:
                k = a_by_id[i]
                payloads[j] = _merge_payload(a_recs.payloads[k], payloads[j])
                if self.policy == "keep-a":
                    vectors[j] = mapped[k]
                    stamps[j] = self._mapped_stamps(a_recs.take([k]), mapped[k:k + 1])[0]
        return VectorBatch(batch.ids, vectors, payloads, stamps=stamps)

    def _native(self, batch: VectorBatch) -> Sequence[dict]:
        """B's records are in the merged collection's space already: stamped native."""
        if "native" not in self._open:
            self._open["native"] = MapStamps(self.alignment, origin="native")
        return self._open["native"](batch, batch.vectors)

    def _mapped_stamps(self, batch: VectorBatch, vectors) -> Sequence[dict]:
        if "stamps" not in self._open:
            self._open["stamps"] = MapStamps(self.alignment)
        return self._open["stamps"](batch, vectors)

    def counted(self, phase: str) -> Callable[[VectorBatch], tuple[VectorBatch, dict]]:
        """The transform of ``phase`` (``"a"`` or ``"b"``) returning each batch with the counts it added, which
        :func:`~vecbridge.runtime.pipeline.committer` keeps in the checkpoint (a resumed merge reports the whole job's
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
                mapped = self._to_b(a_recs)
                C_a.upsert(VectorBatch(list(a_recs.ids), mapped.vectors, [{}] * len(a_recs), stamps=mapped.stamps))
        keep = np.array([i not in linked for i in batch.ids], dtype=bool)
        batch = batch.take(keep)
        if self.explicit is not None and len(batch):
            clash = {i for i in B.get(list(batch.ids)).ids}
            if clash:
                self.stats["renamed"] += len(clash)
                batch.ids = [f"a:{i}" if i in clash else i for i in batch.ids]
        return self._to_b(batch)


def prepare(a, b, into, alignment, *, links: "str | PairSpec", policy: str, batch_size: int | None,
            checkpoint_path, kind: str = "merge", force: bool = False) -> dict:
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
    space = {"a": check_space(A, alignment, "source", force=force, mixed=True).as_dict(),
             "b": check_space(B, alignment, "target", force=force).as_dict()}

    spec = PairSpec.parse(links, allowed=("ids", "file"))
    row = pairing(spec)
    explicit = None
    if row.listed is not None:   # a file of pairs links exactly the pairs it lists; else the same id links
        pairs = row.listed(spec)
        explicit = {"a2b": {str(x): y for x, y in pairs}, "b2a": {str(y): x for x, y in pairs}}

    if policy == "keep-both":
        C.with_vector_field(A_FIELD)   # refuses before anything is written where the store has no second field
    bs = store_batch_size(C, batch_size)
    ckpt_path = Path(checkpoint_path) if checkpoint_path else default_checkpoint_path(alignment_path, C, "merge")
    check_checkpoint_path(ckpt_path, [A, B, C], alignment_path)
    check_checkpoint_writable(ckpt_path)
    C.check_writable()
    identity = {"kind": kind, "a": str(A.identity), "b": str(B.identity), "into": str(C.identity),
                "alignment": alignment.fingerprint, "links": row.name(spec),
                "policy": policy}
    return {"A": A, "B": B, "C": C, "alignment": alignment, "explicit": explicit, "bs": bs,
            "checkpoint": Checkpoint(ckpt_path, identity), "a_info": a_info, "b_info": b_info, "space": space}


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
        deferred = {"index": False} if C.capabilities.deferred_index else {}
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
          on_progress=None, engine=None, force: bool = False) -> MergeResult:
    """Merge A (mapped through ``alignment``) and B into the new collection ``into`` (see the module's notes).
    ``engine``: where the copying runs (None: here, B then A in one pass each; Ray: key ranges of each, B's first).
    ``linked`` and ``renamed`` count the whole job, also across a resume (they are kept in the checkpoint).
    A must look like the alignment's source space and B like its target space (refused before anything is written,
    unless ``force``: :func:`~vecbridge.runtime.provenance.check_space`)."""
    engine = engine_of(engine)
    job = prepare(a, b, into, alignment, links=links, policy=policy, batch_size=batch_size,
                  checkpoint_path=checkpoint_path, kind="merge-ranges" if engine.remote else "merge", force=force)
    A, B, C, ckpt = job["A"], job["B"], job["C"], job["checkpoint"]
    engine.require((A, "input A"), (B, "input B"), (C, "merged collection"))
    with exclusive_writer(C), engine.session():
        planned: dict = {}

        def plan():   # before the target is created: a store without key ranges refuses with nothing written
            if engine.remote:
                planned.update(b=[r.as_dict() for r in B.key_ranges(engine.units)],
                               a=[r.as_dict() for r in A.key_ranges(engine.units)])

        created, bs = begin(ckpt, C, job["alignment"], job["b_info"], policy, bs=job["bs"], resume=resume,
                            overwrite=overwrite, before_create=plan)
        if created and engine.remote:
            ckpt.state["ranges"] = planned
        parts = _parts(ckpt, ranged=engine.remote)
        ckpt.start()
        resumed_from = ckpt.written
        steps = MergeSteps(engine.portable(A), engine.portable(B), job["alignment"], explicit=job["explicit"],
                           policy=policy, a_into=engine.portable(C) if policy == "keep-both" else None)
        shared = CopyJob(engine.portable(C), bs, {p: partial(steps.counted, p) for p in ("b", "a")})

        def copy(phase: str, source: Collection) -> None:
            units = pending(ckpt, engine.portable(source), phase, parts[phase])
            engine.run(copy_unit, units, shared=shared, on_report=committer(ckpt, units, on_progress=on_progress))

        t0 = time.perf_counter()
        try:
            copy("b", B)
            fault_point("merge.between-phases")   # A after all of B: keep-both sets A's vectors on B's records
            copy("a", A)
        except (VecbridgeError, OSError) as exc:
            if created and (ckpt.written == 0 or isinstance(exc, InputError)):
                discard_target(C, ckpt)   # bad input data or a refused first write: no half-merged collection
            raise
        fault_point("merge.before-finish")
        stats = {k: ckpt.total(k) for k in ("linked", "renamed")}   # the whole job's, across resumes
        written = ckpt.written - resumed_from
        count = finish(C, ckpt)
        forced = "; ".join(c["reason"] for c in job["space"].values() if c["forced"]) or None
        stamp_alignment_target(C, job["alignment"], origin="merged", source=A.display_url, forced=forced)
    return MergeResult(A.display_url, B.display_url, C.display_url, policy, job["a_info"].count, job["b_info"].count,
                       written, stats["linked"], stats["renamed"], count, time.perf_counter() - t0, job["space"])


def _parts(ckpt: Checkpoint, *, ranged: bool) -> dict[str, list]:
    """``(phase, key range)`` of B's and of A's units: each whole (phases ``b``, ``a``), or the key ranges the
    checkpoint holds."""
    if not ranged:
        return {"b": [("b", None)], "a": [("a", None)]}
    ranges = ckpt.state.get("ranges")
    if not isinstance(ranges, dict) or not ranges.get("a") or not ranges.get("b"):
        raise InputError(f"checkpoint {ckpt.path} holds no key ranges; remove it and the target to start over")
    return {p: range_phases(f"{p}-", [KeyRange.from_dict(d) for d in ranges[p]]) for p in ("b", "a")}
