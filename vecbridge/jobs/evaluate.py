"""Measure a fitted alignment on pairs it has not seen, and (given queries) the retrieval quality a user keeps."""
from __future__ import annotations

import math

import numpy as np

from .. import metrics
from ..align.artifact import Alignment
from ..connectors.base import Collection, VectorBatch
from ..errors import InputError
from ..linking.pairspec import PairSpec
from ..pairing.sampling import sample_pairs
from ..pairing.table import STORED, pairing
from ..quality.verdict import threshold_failures as threshold_failures  # evaluate's pass/fail rule
from ..results import Evaluation, EvaluationRetrieval, PairScores
from ..runtime.engine import engine_of
from ..runtime.open import load_alignment, open_collection


def collect_pairs(source: Collection, target: Collection, pairs: str = "ids", *, holdout: float = 0.0,
                  max_pairs: int = 10000, seed: int = 1, engine=None) -> tuple[VectorBatch, VectorBatch]:
    """Up to ``max_pairs`` pairs, only from the held-out side of the fit's id-hash split when it had one.

    In one process, a seeded sample of source records (enough for ``max_pairs`` held-out pairs) is paired in stream
    order; on an engine spread over processes, a uniform sample of all the (held-out) pairs, drawn over every key
    range of the source (:mod:`vecbridge.pairing.sampling` says why the two differ)."""
    engine = engine_of(engine)
    limit = None
    info = source.info()
    if info.count > max_pairs:
        limit = min(info.count, int(math.ceil(max_pairs / holdout * 1.2)) if holdout > 0 else max_pairs)
    spec = PairSpec.parse(pairs, allowed=STORED)
    engine.require((source, "source"), (target, "target"))
    with engine.session():
        plan = pairing(spec).plan(source, target, spec, engine, limit=limit, seed=seed)
        s, t, _ = sample_pairs(plan, engine, k=max_pairs, seed=seed, holdout=holdout)
    if len(s) == 0:
        raise InputError("no evaluation pairs found" + (" in the held-out split" if holdout > 0 else ""))
    return s, t


def evaluate_alignment(alignment: Alignment, source, target, *, pairs: str = "ids", queries=None, k: int = 10,
                       max_pairs: int = 10000, use_holdout: bool = True, seed: int = 1, engine=None) -> Evaluation:
    """Quality of ``alignment`` on corresponding records of ``source`` (old model) and ``target`` (new model).

    * pair quality: top-1 accuracy and mean rank of each mapped source vector's true partner among all evaluated
      target vectors, and their mean cosine; the same for "no map" when the dimensions agree (the do-nothing baseline);
    * with ``queries`` (a collection of new-model query vectors whose ids equal the id of their relevant document in
      ``source``, whatever ``pairs`` links the collections by):
      recall retention@k (Recall@k over mapped old vectors / over the native new vectors) and top-k overlap;
      ``retention`` is None, and ``unreliable`` says why, when the native recall is too low for the ratio to mean
      anything (:func:`vecbridge.metrics.retention_ratio`).

    ``engine`` gathers the pairs (:func:`collect_pairs`); the measures are then taken on this machine.

    Returns an :class:`~vecbridge.results.Evaluation` (``result.as_dict()`` is the JSON).
    """
    engine = engine_of(engine)
    alignment, _ = load_alignment(alignment)
    src, tgt = open_collection(source), open_collection(target)
    holdout = float(alignment.metadata.get("anchors", {}).get("holdout") or 0.0) if use_holdout else 0.0
    s, t = collect_pairs(src, tgt, pairs, holdout=holdout, max_pairs=max_pairs, seed=seed, engine=engine)
    mapped = alignment.transform(s.vectors)
    metric = alignment.metadata.get("metric", "cosine")
    result = Evaluation(n_pairs=len(s), held_out=holdout > 0, metric=metric,
                        pairs=PairScores.of(metrics.pair_quality(mapped, t.vectors, metric=metric)))
    if s.dim == t.dim:
        result.no_map = PairScores.of(metrics.pair_quality(s.vectors, t.vectors, metric=metric))
    if queries is not None:
        # a query's id is its relevant document's id in the source (old) collection: the rule of `report` and of
        # the upgrade commands too, whatever --pairs links the two collections by
        q_coll = open_collection(queries)
        qb = q_coll.get(list(s.ids))
        if len(qb) == 0:
            raise InputError(f"none of the evaluated source ids has a query in {q_coll.display_url} (a query's id "
                             f"must be the id of its relevant document in the source collection)")
        pos = {i: j for j, i in enumerate(s.ids)}
        relevant = np.array([pos[i] for i in qb.ids])
        ret = metrics.recall_retention(qb.vectors, mapped, t.vectors, relevant, k=k, metric=metric)
        result.retrieval = EvaluationRetrieval(
            **ret, overlap=metrics.topk_overlap(qb.vectors, mapped, t.vectors, k=k, metric=metric), k=k,
            n_queries=len(qb))
    return result
