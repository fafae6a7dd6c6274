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
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..connectors.base import VectorBatch
from ..errors import InputError, StoreError, VecbridgeError
from ..linking.pairspec import PairSpec
from ..results import MergeResult
from .checkpoint import Checkpoint
from .guard import check_checkpoint_writable, exclusive_writer, refuse_inputs_as_target
from .open import load_alignment, open_collection
from .pairs import read_pairs_file
from .pipeline import copy_stream
from .rewrite import _discard, check_counts, check_source, default_checkpoint_path, mapper, store_batch_size

POLICIES = ("keep-b", "keep-a", "keep-both")
A_FIELD = "a_mapped"


def _merge_payload(pa: dict, pb: dict) -> dict:
    return {**(pa or {}), **(pb or {})}


def merge(a, b, into, alignment, *, links: "str | PairSpec" = "ids", policy: str = "keep-b",
          batch_size: int | None = None, resume: bool = False, overwrite: bool = False, checkpoint_path=None,
          on_progress=None) -> MergeResult:
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
    check_checkpoint_writable(ckpt_path)
    C.check_writable()
    identity = {"kind": "merge", "a": str(A.identity), "b": str(B.identity), "into": str(C.identity),
                "alignment": alignment.fingerprint, "links": str(spec) if spec.kind == "ids" else Path(spec.value).name,
                "policy": policy}
    with exclusive_writer(C):
        return _merge(A, B, C, C_a, alignment, explicit, policy, bs, resume, overwrite,
                      Checkpoint(ckpt_path, identity), a_info, b_info, on_progress)


def _merge(A, B, C, C_a, alignment, explicit, policy, bs, resume, overwrite, ckpt, a_info, b_info, on_progress):
    created = False
    if ckpt.exists() and resume:
        ckpt.load()
        bs = ckpt.batch_size or bs
    else:
        if ckpt.exists() and not overwrite:
            raise InputError(f"a merge into {C.display_url} was already started (checkpoint {ckpt.path}): "
                             f"use --resume or --overwrite")
        if C.exists():
            if not overwrite:
                raise StoreError(f"target already exists: {C.display_url} (choose a new collection or --overwrite)")
            C.drop()
        deferred = {"index": False} if C.supports_deferred_index else {}
        C.create(dim=alignment.target_dim, metric=b_info.metric, **deferred)
        if policy == "keep-both":
            C.add_vector_field(A_FIELD, alignment.target_dim, b_info.metric)
        created = True
        ckpt.batch_size = bs
    ckpt.start()
    to_b = mapper(alignment)
    stats = {"linked": 0, "renamed": 0}

    def linked_a_for(b_ids: list) -> VectorBatch:
        if explicit is None:
            return A.get(b_ids)
        wanted = [explicit["b2a"][str(i)] for i in b_ids if str(i) in explicit["b2a"]]
        got = A.get(wanted)
        got.ids = [explicit["a2b"][str(i)] for i in got.ids]  # re-key A's records by their B id
        return got

    def phase_b(batch: VectorBatch) -> VectorBatch:
        a_recs = linked_a_for(list(batch.ids))
        if not len(a_recs):
            return batch
        stats["linked"] += len(a_recs)
        a_by_id = {i: j for j, i in enumerate(a_recs.ids)}
        mapped = to_b(a_recs).vectors
        vectors = batch.vectors.copy()
        payloads = list(batch.payloads)
        for j, i in enumerate(batch.ids):
            if i in a_by_id:
                k = a_by_id[i]
                payloads[j] = _merge_payload(a_recs.payloads[k], payloads[j])
                if policy == "keep-a":
                    vectors[j] = mapped[k]
        out = VectorBatch(batch.ids, vectors, payloads)
        if C_a is not None:
            C_a.upsert(VectorBatch(list(a_recs.ids), mapped, [{}] * len(a_recs)))
        return out

    def phase_a(batch: VectorBatch) -> VectorBatch:
        if explicit is None:
            linked = {i for i in B.get(list(batch.ids)).ids}
        else:
            linked = {i for i in batch.ids if str(i) in explicit["a2b"]}
        keep = np.array([i not in linked for i in batch.ids], dtype=bool)
        batch = batch.take(keep)
        if explicit is not None and len(batch):
            clash = {i for i in B.get(list(batch.ids)).ids}
            if clash:
                stats["renamed"] += len(clash)
                batch.ids = [f"a:{i}" if i in clash else i for i in batch.ids]
        return to_b(batch)

    t0 = time.perf_counter()
    try:
        written = copy_stream(B, C, transform=phase_b, checkpoint=ckpt, phase="b", batch_size=bs,
                              on_progress=on_progress)
        written += copy_stream(A, C, transform=phase_a, checkpoint=ckpt, phase="a", batch_size=bs,
                               on_progress=on_progress)
    except (VecbridgeError, OSError) as exc:
        if created and (ckpt.written == 0 or isinstance(exc, InputError)):
            _discard(C, ckpt)   # bad input data or a refused first write: no half-merged collection left behind
        raise
    C.build_index()
    count = C.info().count
    ckpt.finish()
    # linked A records are merged into their B record, not written: the target must hold exactly what was written
    check_counts(C, read=ckpt.read, written=ckpt.written, held=count, expected=ckpt.written)
    return MergeResult(A.display_url, B.display_url, C.display_url, policy, a_info.count, b_info.count, written,
                       stats["linked"], stats["renamed"], count, time.perf_counter() - t0)
