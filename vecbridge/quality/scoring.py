"""Scores that keep more retrieval quality than mapped vectors alone, on arrays: the hub penalty,
dual-query fusion and re-ranking by the new model (used by benchmarks, reports and serving).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import InputError
from ..metrics import candidate_scorer, prepare_vectors
from ..numeric.neighbors import knn
from ..numeric.ranking import rank_candidate_rows
from ..vectors import l2_normalize


# --- hub penalty ------------------------------------------------------------------------------------------------------
def hub_penalty(docs, reference, k: int = 10, *, backend: str = "auto") -> np.ndarray:
    """``r(d)``: mean cosine of each document to its ``k`` nearest reference vectors (new-model queries from a log,
    or new-model anchor vectors). One exact kNN of the documents against the reference set (the shared helper)."""
    ref = np.asarray(reference)
    if ref.ndim != 2 or ref.shape[0] == 0:
        raise InputError("hub_penalty needs a non-empty 2-D array of reference vectors")
    return knn(docs, ref, min(k, ref.shape[0]), backend=backend)[1].mean(axis=1).astype(np.float32)


def augment_documents(docs, penalty, weight: float = 0.5) -> np.ndarray:
    """Unit-normalised documents with one more coordinate ``-weight * penalty``: with :func:`augment_queries`, an
    inner-product (``dot``) index scores ``cos(q, d) - weight * r(d)`` exactly."""
    D = l2_normalize(docs)
    p = np.asarray(penalty, dtype=D.dtype).reshape(-1, 1)
    if p.shape[0] != D.shape[0]:
        raise InputError(f"{D.shape[0]} documents but {p.shape[0]} penalties")
    return np.hstack([D, -weight * p])


def augment_queries(queries) -> np.ndarray:
    """Unit-normalised queries with one more coordinate equal to 1 (see :func:`augment_documents`)."""
    Q = l2_normalize(queries)
    return np.hstack([Q, np.ones((Q.shape[0], 1), dtype=Q.dtype)])


# --- dual-query fusion ------------------------------------------------------------------------------------------------
def fuse(cos_new, cos_old=None, beta: float = 1.0, penalty=None, weight: float = 0.0, *, mean: bool = False):
    """The fusion formula, written once, on cosines already computed (any shape; ``penalty``: one hub score per
    document, along the last axis): ``cos_new + beta cos_old - weight r(d)``; with ``mean``, the weighted mean
    ``(cos_new + beta cos_old) / (1 + beta) - weight r(d)`` (a cosine again, as ``upgrade search`` serves it).
    ``beta = inf`` is the old model alone: ``cos_old``, without the penalty (the hub score belongs to the new
    vectors); without ``cos_old``, or with ``beta = 0``, the new model alone."""
    if cos_old is not None and np.isinf(beta):
        return cos_old
    if cos_old is None or beta == 0:
        s = cos_new
    else:
        s = cos_new + beta * cos_old
        if mean:
            s = s / (1.0 + beta)
    if penalty is not None and weight:
        s = s - weight * np.asarray(penalty, dtype=s.dtype)
    return s


def fused_scores(q_new, mapped_docs, q_old, old_docs, beta: float = 1.0, penalty=None, weight: float = 0.0):
    """(n_queries, n_docs) scores ``cos(q_new, T(x)) + beta * cos(q_old, x) - weight * r(T(x))`` (:func:`fuse`): for
    benchmarks and small pools (a full score matrix)."""
    S = l2_normalize(q_new) @ l2_normalize(mapped_docs).T
    return fuse(S, l2_normalize(q_old) @ l2_normalize(old_docs).T if beta else None, beta, penalty, weight)


# --- re-ranking with the new model ------------------------------------------------------------------------------------
def rerank_candidates(queries, candidates, vectors_of: Callable[[np.ndarray], np.ndarray], k: int = 10, *,
                      metric: str = "cosine") -> tuple[np.ndarray, np.ndarray]:
    """Re-score each query's candidate rows (``candidates``: (n_queries, K) ints, -1 = none) with the vectors
    ``vectors_of(unique_rows)`` returns (the new model's vectors of those items) and keep the best ``k``.

    Returns ``(rows, scores)``, both (n_queries, k), best first (ties keep candidate order); missing entries are
    -1 / -inf.
    """
    C = np.asarray(candidates, dtype=np.int64)
    Q = prepare_vectors(queries, metric)
    if C.ndim != 2 or C.shape[0] != Q.shape[0]:
        raise InputError(f"candidates must be (n_queries, K), got {C.shape} for {Q.shape[0]} queries")
    uniq = np.unique(C[C >= 0])
    V = prepare_vectors(vectors_of(uniq), metric) if uniq.size else np.zeros((0, Q.shape[1]), np.float32)
    if V.shape[0] != uniq.size or (uniq.size and V.shape[1] != Q.shape[1]):
        raise InputError(f"vectors_of returned shape {V.shape} for {uniq.size} items of dimension {Q.shape[1]}")
    where = np.searchsorted(uniq, np.where(C >= 0, C, uniq[0] if uniq.size else 0))
    ok = C >= 0
    orders, out_s = rank_candidate_rows([where[qi][ok[qi]] for qi in range(C.shape[0])], k,
                                        candidate_scorer(Q, V, metric))
    out = np.full((C.shape[0], k), -1, dtype=np.int64)
    for qi, order in enumerate(orders):
        out[qi, :order.size] = C[qi][ok[qi]][order]
    return out, out_s

