"""Use an old collection with the new model without rewriting it: translate queries at search time.

``(x R) . q = x . (q R^T)`` ("When Embedding Models Meet: Procrustes Bounds and Applications", 2025), so searching
the untouched old index with ``q R^T`` ranks exactly as searching a rewritten index with ``q``. The wrapper returns
scores *in the new space* (what the rewritten collection would return), so they can be merged with a native
new-model collection (see :func:`federated_search`).

When is it exact? With ``x' = s (x - mu_x) M + mu_y`` the map of the old vectors:

* ``dot``: always (any linear or affine map): ``x'.q = s x.(q M^T) + c(q)``, the means add a per-query constant.
* ``cosine``: when M is orthogonal with ``d_src <= d_tgt`` and there is no centring (``||x'|| = s ||x||``): the
  store's cosine is rescaled by ``||q M^T|| / ||q||``. Centring breaks this (``||x'||`` then varies with x
  differently from ``||x||``), as does a projection (``d_src > d_tgt``) or a general linear map.
* ``l2``: the ranking is exact for orthogonal maps with ``d_src <= d_tgt`` (query ``mu_x + (q - mu_y) M^T / s``).

In every case that is not exact by these identities — and for l2, whose score conventions differ between stores —
the wrapper over-fetches ``overfetch * k`` candidates with the translated query, maps their stored vectors and
re-scores them exactly in the new space. That is exact whenever the true top-k is among the candidates.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..connectors.base import Collection
from ..errors import InputError
from ..metrics import candidate_scorer, prepare_vectors
from ..numeric.ranking import rank_candidates
from ..runtime.open import load_alignment, open_collection
from ..runtime.provenance import check_space
from .translate import _orthogonal_isometry, translate_queries


class WrappedCollection:
    """A read-only view of an old-model collection that accepts new-model query vectors.

    The collection must be in the alignment's source space (queries go target -> source): checked once, here
    (:func:`~vecbridge.runtime.provenance.check_space`; ``force`` overrides a refusal, ``check=False`` skips it
    where the caller has checked)."""

    def __init__(self, collection: Collection, alignment, *, overfetch: int = 4, force: bool = False,
                 check: bool = True):
        self.collection = collection
        self.alignment, _ = load_alignment(alignment)
        info = collection.info()
        if info.dim != self.alignment.source_dim:
            raise InputError(f"{collection.display_url} holds {info.dim}-d vectors but the alignment maps "
                             f"{self.alignment.source_dim}-d vectors")
        self.space = check_space(collection, self.alignment, "source", force=force) if check else None
        self.metric = info.metric
        self.overfetch = overfetch
        centred = bool(self.alignment.metadata.get("centered"))
        if self.metric == "dot":
            self.exact = True
        elif self.metric == "cosine":
            self.exact = _orthogonal_isometry(self.alignment) and not centred
        else:
            self.exact = False  # l2: re-scored from candidates (ranking exact for rotations; scores store-specific)

    @property
    def display_url(self) -> str:
        return f"wrap({self.collection.display_url})"

    def info(self):
        info = self.collection.info()
        info.dim = self.alignment.target_dim
        return info

    def search(self, queries, k: int = 10) -> tuple[list[list], np.ndarray]:
        """Nearest old records for new-model queries, with scores as the rewritten collection would give them."""
        Q = np.asarray(queries, dtype=np.float32)
        if Q.ndim != 2 or Q.shape[1] != self.alignment.target_dim:
            raise InputError(f"queries must be {self.alignment.target_dim}-d new-model vectors, got shape {Q.shape}")
        q_old = translate_queries(self.alignment, Q, self.metric)
        if self.exact:
            ids, store_scores = self.collection.search(q_old, k)
            return ids, self._exact_scores(Q, q_old, np.asarray(store_scores, dtype=np.float32))
        ids, _ = self.collection.search(q_old, k * self.overfetch)
        return self._rescore(Q, ids, k)

    def _exact_scores(self, Q, q_old, store_scores):
        a = self.alignment
        s = float(a.metadata["scale"])
        if self.metric == "dot":
            mu_x, mu_y = a.tensor("source_mean", np.float32), a.tensor("target_mean", np.float32)
            const = Q @ mu_y - s * (Q @ a.tensor("matrix", np.float32).T) @ mu_x
            return s * store_scores + const[:, None]
        # cosine, orthogonal isometry, no centring
        ratio = np.linalg.norm(q_old, axis=1) / np.maximum(np.linalg.norm(Q, axis=1), 1e-12)
        return store_scores * ratio[:, None]

    def _rescore(self, Q, candidate_ids: list[list], k: int):
        flat = list(dict.fromkeys(i for row in candidate_ids for i in row))
        got = self.collection.get(flat)
        mapped = self.alignment.transform(got.vectors) if len(got) else np.zeros((0, self.alignment.target_dim))
        D = prepare_vectors(mapped, self.metric)
        Qp = prepare_vectors(Q, self.metric)
        return rank_candidates(candidate_ids, got.ids, k, candidate_scorer(Qp, D, self.metric))


def wrap(collection: Collection, alignment, **kw) -> WrappedCollection:
    """``wrap(old_collection, "align.vb").search(new_model_queries, k)``."""
    return WrappedCollection(collection, alignment, **kw)


def federated_search(members: Sequence, queries, k: int = 10) -> list[list[dict]]:
    """One search over several collections in comparable spaces (e.g. a wrapped OLD and a native NEW), merged by
    score; a record present in several (same id) is returned once, with its best score and where it came from."""
    if not members:
        raise InputError("federated search needs at least one collection")
    metrics = {m.info().metric for m in members}
    if len(metrics) > 1:
        raise InputError(f"cannot merge scores of different metrics: {', '.join(sorted(metrics))}")
    Q = np.asarray(queries, dtype=np.float32)
    results = [m.search(Q, k) for m in members]
    merged = []
    for qi in range(len(Q)):
        best: dict = {}
        for mi, (ids, scores) in enumerate(results):
            for i, sc in zip(ids[qi], scores[qi]):
                sc = float(sc)
                if np.isfinite(sc) and (i not in best or sc > best[i]["score"]):
                    best[i] = {"id": i, "score": sc, "source": members[mi].display_url}
        merged.append(sorted(best.values(), key=lambda r: -r["score"])[:k])
    return merged


def search_collections(wrapped: Sequence[tuple[str, object]], native: Sequence[str], queries, k: int = 10, *,
                       old_queries=None, beta: float = 1.0, rerank_model: str | None = None,
                       text_field: str = "text", k_candidates: int = 50, hub_log=None, hub_weight: float = 0.5,
                       show_field: str | None = None, force: bool = False, models=None):
    """Federated search with new-model ``queries`` over old collections wrapped by their alignments (``(url,
    alignment)`` pairs) and collections already in the new model's space (URLs); see :func:`federated_search`.

    Serving options for the wrapped collections (the report measures both): ``old_queries``, the old model's
    vectors of the same queries, turns on dual-query fusion (:class:`~vecbridge.serving.rerank.FusedSearch`, weight
    ``beta``); ``rerank_model`` re-scores the top ``k_candidates`` with the new model's vectors of their stored
    texts (``payload[text_field]``; :class:`~vecbridge.serving.rerank.RerankedSearch`); ``hub_log``, new-model vectors
    of logged queries, makes every collection's candidates pay the hub penalty (weight ``hub_weight``;
    :class:`~vecbridge.serving.rerank.HubPenalizedSearch`) before any re-ranking. ``show_field``: each hit also
    carries that payload field of its record (e.g. its stored text) under ``"text"``, where the record has it.
    Each wrapped collection must be in its alignment's source space (refused before any search unless ``force``).
    ``models`` (:class:`~vecbridge.runtime.models.ModelOptions`) says where the re-ranking model runs, and keeps its
    throughput."""
    from ..runtime.models import ModelOptions
    from .rerank import FusedSearch, HubPenalizedSearch, RerankedSearch

    def penalized(member, records, alignment=None):
        if hub_log is None:
            return member
        return HubPenalizedSearch(member, hub_log, records=records, alignment=alignment, weight=hub_weight,
                                  k_candidates=k_candidates)

    embed = None
    if rerank_model:
        embed = (models if models is not None else ModelOptions()).load(rerank_model)
    queries = np.asarray(queries)
    queries = queries[None, :] if queries.ndim == 1 else queries
    if old_queries is not None:
        old_queries = np.asarray(old_queries)
        old_queries = old_queries[None, :] if old_queries.ndim == 1 else old_queries
    members, records = [], {}
    opened = [(open_collection(url), load_alignment(alignment)[0]) for url, alignment in wrapped]
    for coll, aligned in opened:   # every collection checked before any search
        check_space(coll, aligned, "source", force=force)
    for coll, aligned in opened:
        if old_queries is not None:
            member = FusedSearch(coll, aligned, old_queries, beta=beta, k_candidates=max(2 * k_candidates, k))
        else:
            member = wrap(coll, aligned, check=False)
        member = penalized(member, coll, aligned)
        if embed is not None:
            member = RerankedSearch(member, embed, text_field=text_field, k_candidates=k_candidates)
        members.append(member)
        records[member.display_url] = coll
    for url in native:
        coll = open_collection(url)
        members.append(penalized(coll, coll))
        records[members[-1].display_url] = coll
    results = federated_search(members, queries, k)
    if show_field:
        attach_field(results, records, show_field)
    return results


def attach_field(results: list[list[dict]], records: dict, field: str) -> None:
    """Add ``payload[field]`` of each hit's record as ``"text"`` (one ``get`` per collection), so a person reading
    the results sees what was found, not only ids."""
    for url, coll in records.items():
        ids = list(dict.fromkeys(r["id"] for rows in results for r in rows if r["source"] == url))
        if not ids:
            continue
        found = coll.get(ids)
        value = {i: p.get(field) for i, p in zip(found.ids, found.payloads)}
        for rows in results:
            for r in rows:
                if r["source"] == url and value.get(r["id"]) is not None:
                    r["text"] = value[r["id"]]
