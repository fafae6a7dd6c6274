"""Query-time options that keep more retrieval quality than the mapped vectors alone.

Three scorers, each usable on arrays (benchmarks, reports) and on a collection (wrapped or migrated search):

* **Re-ranking with the new model** (:func:`rerank_candidates`, :class:`RerankedSearch`): take the top ``K``
  candidates of the mapped (or wrapped) search and re-score them with the new model's vectors of their texts:
  stored ones where items were re-embedded, otherwise embedded at query time (and cached, so a popular item is
  embedded once). Recall@k after re-ranking is the native recall restricted to the candidates, so it rises to the
  full re-embed's as ``K`` grows; the price is ``K`` encoder calls per query for uncached items.
* **Hub penalty** (:func:`hub_penalty`, CSLS applied on the document side, Lample et al. 2018 as used by the Vector
  Linking paper (2026)):
  ``score(q, d) = cos(q, d) - w * r(d)`` where ``r(d)`` is the mean cosine of the mapped document to its ``k``
  nearest *reference queries* (a sample of new-model queries from the search log, or, without a log, new-model
  vectors of the anchors). A map adds noise, and noisy vectors of some documents become "hubs" that are near every
  query; the penalty demotes them. It is query-independent, so it can be stored with the documents:
  :func:`augment_documents` / :func:`augment_queries` append one coordinate so that a plain inner-product index
  computes the penalised score (dimension + 1, metric ``dot``).
* **Dual-query fusion** (:func:`fused_scores`, :func:`fused_search`): if the old model still runs at query time,
  encode each query with both models and score ``cos(q_new, T(x)) + beta * cos(q_old, x)``. The old vectors are
  exactly what the old index stores, so this needs no re-embedding and no extra storage for a wrapped collection;
  on wordnet it keeps more than a full re-embed's recall in two of the four directions (the two models' errors are
  partly independent). It costs one extra (old-model) query encoding.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from ..errors import InputError
from ..numeric.ranking import rank_candidates
from ..quality.scoring import fuse, hub_penalty
from ..vectors import l2_normalize


def fused_search(old_collection, alignment, q_new, q_old, k: int = 10, *, beta: float = 1.0,
                 k_candidates: int = 100):
    """Search an untouched old-model collection with both encodings of each query.

    Candidates: the top ``k_candidates`` for the translated new-model query (as :func:`~vecbridge.serving.wrap`
    does) and for the old-model query, merged; each candidate's stored old vector ``x`` is re-scored exactly as
    ``cos(q_new, T(x)) + beta * cos(q_old, x)``. Returns ``(ids, scores)`` like ``Collection.search``.
    """
    from ..runtime.open import load_alignment
    from .translate import translate_queries

    alignment, _ = load_alignment(alignment)
    Qn = np.asarray(q_new, dtype=np.float32)
    Qo = np.asarray(q_old, dtype=np.float32)
    if Qn.ndim != 2 or Qo.ndim != 2 or Qn.shape[0] != Qo.shape[0]:
        raise InputError("q_new and q_old must be 2-D with one row per query each")
    if Qn.shape[1] != alignment.target_dim or Qo.shape[1] != alignment.source_dim:
        raise InputError(f"q_new must be {alignment.target_dim}-d and q_old {alignment.source_dim}-d")
    ids_a, _ = old_collection.search(translate_queries(alignment, Qn, "cosine"), k_candidates)
    ids_b, _ = old_collection.search(Qo, k_candidates)
    cand = [list(dict.fromkeys(list(a) + list(b))) for a, b in zip(ids_a, ids_b)]
    flat = list(dict.fromkeys(i for row in cand for i in row))
    got = old_collection.get(flat)
    X = l2_normalize(got.vectors)
    M = l2_normalize(alignment.transform(got.vectors))
    Qn_u, Qo_u = l2_normalize(Qn), l2_normalize(Qo)
    return rank_candidates(cand, got.ids, k, lambda qi, rows: fuse(M[rows] @ Qn_u[qi], X[rows] @ Qo_u[qi], beta))


class FusedSearch:
    """A wrapped old collection searched with both encodings of each query (:func:`fused_search`), for
    ``vecbridge search --old-vectors``. Scores are ``(cos(q_new, T(x)) + beta cos(q_old, x)) / (1 + beta)``, a
    weighted mean of cosines, so they stay comparable with a native collection's cosine scores in a federated
    search. ``old_queries`` are the old model's vectors of the same queries, row for row."""

    def __init__(self, collection, alignment, old_queries, *, beta: float = 1.0, k_candidates: int = 100):
        if beta < 0:
            raise InputError("beta (the old query's weight) must be at least 0")
        self.collection, self.alignment, self.beta, self.k_candidates = collection, alignment, beta, k_candidates
        self.old_queries = np.asarray(old_queries, dtype=np.float32)

    @property
    def display_url(self) -> str:
        return self.collection.display_url

    def info(self):
        return self.collection.info()

    def search(self, queries, k: int = 10) -> tuple[list[list], np.ndarray]:
        if len(queries) != len(self.old_queries):
            raise InputError(f"{len(queries)} new-model queries but {len(self.old_queries)} old-model ones: give "
                             f"both encodings of the same queries, row for row")
        ids, scores = fused_search(self.collection, self.alignment, queries, self.old_queries, k, beta=self.beta,
                                   k_candidates=max(self.k_candidates, k))
        return ids, np.asarray(scores) / (1.0 + self.beta)


# --- the hub penalty at query time ------------------------------------------------------------------------------------
class HubPenalizedSearch:
    """A search over new-space vectors whose candidates pay the hub penalty: ``score - weight * r(d)``, where
    ``r(d)`` is the mean cosine of the candidate's new-space vector to its ``hub_k`` nearest queries of ``log``
    (new-model vectors of a query-log sample; :func:`hub_penalty`). Mapped vectors that sit near many queries
    (hubs) crowd others out of the top k; the penalty (CSLS, "Word Translation Without Parallel Data", Conneau et
    al., 2018, on the document side) pushes them back. ``r`` is computed for the candidates only, at query time.

    ``inner`` is what is searched (a wrapped or fused old collection, a migrated or native one); ``records`` the
    collection holding the candidates' stored vectors, mapped by ``alignment`` when they are old-model vectors."""

    def __init__(self, inner, log, *, records, alignment=None, weight: float = 0.5, hub_k: int = 10,
                 k_candidates: int = 50):
        if weight < 0:
            raise InputError("the hub penalty's weight must be at least 0")
        if k_candidates < 1 or hub_k < 1:
            raise InputError("k_candidates and hub_k must be at least 1")
        L = np.asarray(log, dtype=np.float32)
        if L.ndim != 2 or not len(L):
            raise InputError("the query log must be a non-empty 2-D array of new-model query vectors")
        self.inner, self.collection, self.alignment = inner, records, alignment
        self.log, self.weight, self.hub_k, self.k_candidates = l2_normalize(L), weight, hub_k, k_candidates

    @property
    def display_url(self) -> str:
        return self.inner.display_url

    def info(self):
        return self.inner.info()

    def penalties(self, ids: Sequence) -> dict:
        """``{id: r(d)}`` for the records among ``ids`` that exist."""
        got = self.collection.get(list(ids))
        if not len(got):
            return {}
        V = got.vectors if self.alignment is None else self.alignment.transform(got.vectors)
        if V.shape[1] != self.log.shape[1]:
            raise InputError(f"the query log is {self.log.shape[1]}-d but the searched vectors are {V.shape[1]}-d: "
                             f"give new-model query vectors")
        return dict(zip(got.ids, hub_penalty(V, self.log, self.hub_k)))

    def search(self, queries, k: int = 10) -> tuple[list[list], np.ndarray]:
        cand, scores = self.inner.search(queries, max(self.k_candidates, k))
        pen = self.penalties(list(dict.fromkeys(i for row in cand for i in row)))
        out_ids, out_scores = [], np.full((len(cand), k), -np.inf, dtype=np.float32)
        for qi, row in enumerate(cand):
            s = np.asarray(scores[qi][:len(row)], dtype=np.float32) - self.weight * np.array(
                [pen.get(i, 0.0) for i in row], dtype=np.float32)
            order = np.argsort(-s, kind="stable")[:k]
            out_ids.append([row[j] for j in order])
            out_scores[qi, :len(order)] = s[order]
        return out_ids, out_scores


class RerankedSearch:
    """Search a collection (migrated, or a :class:`~vecbridge.serving.wrap.WrappedCollection`) with new-model
    queries, then re-score the top ``k_candidates`` with the new model's vectors of the candidates' texts.

    ``embed`` maps a list of texts to new-model vectors (e.g. ``SentenceTransformer.encode``); the text of a record
    is ``payload[text_field]``. Vectors are cached by id (``cache=True``), so each item is embedded at most once;
    ``native`` may pre-fill the cache with items that were already re-embedded (``{id: vector}``).
    ``stats`` counts what was embedded, what came from the cache and the time spent encoding.
    """

    def __init__(self, collection, embed: Callable[[list[str]], np.ndarray], *, text_field: str = "text",
                 k_candidates: int = 50, cache: bool = True, native: dict | None = None):
        if k_candidates < 1:
            raise InputError("k_candidates must be at least 1")
        self.collection = collection
        # records (texts) come from the stored collection, also behind a wrapper
        self._records = getattr(collection, "collection", collection)
        self.embed = embed
        self.text_field = text_field
        self.k_candidates = k_candidates
        self.cache_enabled = cache
        self.cache: dict = dict(native or {})
        self.stats = {"queries": 0, "embedded": 0, "cached": 0, "missing_text": 0, "encode_s": 0.0,
                      "search_s": 0.0}

    @property
    def display_url(self) -> str:
        return self.collection.display_url

    def info(self):
        return self.collection.info()

    def _vectors(self, ids: Sequence) -> tuple[list, np.ndarray]:
        need = [i for i in ids if i not in self.cache]
        self.stats["cached"] += len(ids) - len(need)
        known: dict = {}
        if need:
            got = self._records.get(need)
            have = [(i, p.get(self.text_field)) for i, p in zip(got.ids, got.payloads)]
            texts = [(i, t) for i, t in have if isinstance(t, str) and t]
            self.stats["missing_text"] += len(need) - len(texts)
            if texts:
                t0 = time.perf_counter()
                V = np.asarray(self.embed([t for _, t in texts]), dtype=np.float32)
                self.stats["encode_s"] += time.perf_counter() - t0
                self.stats["embedded"] += len(texts)
                if V.shape[0] != len(texts):
                    raise InputError(f"embed returned {V.shape[0]} vectors for {len(texts)} texts")
                known = {i: v for (i, _), v in zip(texts, V)}
                if self.cache_enabled:
                    self.cache.update(known)
        keep = [i for i in ids if i in self.cache or i in known]
        if not keep:
            return [], np.zeros((0, 0), np.float32)
        return keep, np.stack([self.cache[i] if i in self.cache else known[i] for i in keep])

    def search(self, queries, k: int = 10) -> tuple[list[list], np.ndarray]:
        """Top ``k`` records by the new model's own score among the first stage's ``k_candidates``. Candidates
        without a text keep no score and are dropped (their first-stage score is in another space)."""
        Q = np.asarray(queries, dtype=np.float32)
        t0 = time.perf_counter()
        cand, _ = self.collection.search(Q, max(self.k_candidates, k))
        self.stats["search_s"] += time.perf_counter() - t0
        flat = list(dict.fromkeys(i for row in cand for i in row))
        ids, V = self._vectors(flat)
        Qn = l2_normalize(Q)
        Vn = l2_normalize(V) if len(ids) else V
        out_ids, out_scores = rank_candidates(cand, ids, k, lambda qi, rows: Vn[rows] @ Qn[qi])
        self.stats["queries"] += len(Q)
        return out_ids, out_scores
