"""Check a migration: same ids on both sides, and a sample of mapped vectors recomputed from the source (every record
on an engine spread over processes)."""
from __future__ import annotations

from functools import partial
from typing import Any, Iterator

from ..align.artifact import Alignment
from ..connectors.base import Collection
from ..pairing.units import Records, key_ranges
from ..quality.fidelity import RecordTally, compare_records, full_checks, shape_checks
from ..results import Check, VerifyResult
from ..runtime.engine import engine_of
from ..runtime.open import load_alignment, open_collection
from ..runtime.provenance import check_space


def _ids(coll: Collection, batch_size: int = 5000) -> set:
    return {str(i) for batch in coll.scan(batch_size=batch_size) for i in batch.ids}


def compare_unit(unit: Records, job: tuple[Any, Any, str | None], *, alignment: Alignment, batch_size: int,
                 tolerance: float, metric: str) -> Iterator[int]:
    """The body of ``verify`` (:mod:`vecbridge.runtime.engine`): the unit's source records (a seeded sample of
    ``unit.limit`` of them, or every record of a key range) looked up in the target and compared; reports the records
    compared so far, returns their :class:`RecordTally`."""
    source, target, field = open_collection(job[0]), open_collection(job[1]), job[2]
    if field is not None:
        target = target.with_vector_field(field)
    if unit.limit is not None:
        batches = [source.sample(unit.limit, seed=unit.seed)]
    else:
        batches = source.scan(batch_size, after=unit.range.after, until=unit.range.until)
    tally = RecordTally()
    for batch in batches:
        tally.merge(compare_records(alignment, batch, target.get(list(batch.ids)), metric=metric,
                                    tolerance=tolerance, payloads=field is None))
        yield tally.checked
    return tally


def sample_checks(src: Collection, tgt: Collection, tally: RecordTally, tolerance: float) -> list[Check]:
    """The ``ids`` check (every id of both collections, as sets) and the checks of a sample's tally."""
    s_ids, t_ids = _ids(src), _ids(tgt)
    missing, extra = s_ids - t_ids, t_ids - s_ids
    return [Check("ids", not missing and not extra,
                  f"{len(missing):,} missing in target, {len(extra):,} not in source"
                  + (f" (e.g. {sorted(missing)[:3] or sorted(extra)[:3]})" if missing or extra else "")),
            Check("vectors", tally.vectors_bad == 0 and tally.missing == 0,
                  f"{tally.matched:,} sampled records recomputed, {tally.vectors_bad} differ by more than "
                  f"{tolerance:g} (max {tally.max_error:.2e})"),
            Check("payloads", tally.payloads_bad == 0,
                  f"{tally.payloads_bad} of {tally.matched:,} sampled payloads differ")]


def verify(source, target, alignment, *, sample: int = 1000, seed: int = 0, tolerance: float = 1e-5,
           field: str | None = None, batch_size: int = 2000, engine=None, force: bool = False) -> VerifyResult:
    """Whether ``target`` holds ``source`` mapped through ``alignment``: counts, dimension, ids, a sample of vectors
    recomputed, payloads (:class:`VerifyResult`: ``ok`` and the ``checks``); nothing is written anywhere.

    Vectors are compared relative to their norm (float32 storage); in cosine collections, stores that normalise on
    insert (Qdrant) are compared by direction. On an engine spread over processes (Ray) every record is checked
    instead of a sample: each unit compares one key range of the source, and the counts add up (no id set is held
    anywhere: ids are unique in a collection, so the target's ids that are not in the source number ``target count -
    matched``); each check then says it is a full check.

    First the source must look like the alignment's source space and the target like its target space
    (:func:`~vecbridge.runtime.provenance.check_space`): a mismatch is refused in one line (exit 1) unless ``force``;
    both answers are in the result's ``space``.
    """
    engine = engine_of(engine)
    alignment, _ = load_alignment(alignment)
    src, tgt = open_collection(source), open_collection(target)
    view = tgt.with_vector_field(field) if field is not None else tgt
    s_info, t_info = src.info(), view.info()
    engine.require((src, "source"), (tgt, "target"))
    spaces = {side: check_space(coll, alignment, side, force=force).as_dict()
              for side, coll in (("source", src), ("target", view))} \
        if s_info.dim == alignment.source_dim and t_info.dim == alignment.target_dim else None
    units = [Records(r) for r in key_ranges(src, engine.units)] if engine.remote else \
        [Records(limit=sample, seed=seed)]
    body = partial(compare_unit, alignment=alignment, batch_size=batch_size, tolerance=tolerance,
                   metric=t_info.metric)
    with engine.session():
        tallies = engine.run(body, units, shared=(engine.portable(src), engine.portable(tgt), field))
    tally = RecordTally()
    for part in tallies:
        tally.merge(part)
    checks = full_checks(s_info, t_info, alignment, tally, tolerance) if engine.remote else \
        shape_checks(s_info, t_info, alignment) + sample_checks(src, view, tally, tolerance)
    return VerifyResult(all(c.ok for c in checks), src.display_url, view.display_url, checks, spaces)


