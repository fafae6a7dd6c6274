"""Retrieval-quality metrics shared by reports, drift checks and benchmarks.

All of them score queries against a document matrix block by block (``max_block_bytes`` of similarity scores at a
time, 64 MB by default), so evaluating 10k x 10k or 100k x 100k never materialises the full score matrix.

Conventions: scores are cosine by default (rows L2-normalised; a zero row scores 0 against everything and so ranks
last), ``"dot"`` uses raw dot products and ``"l2"`` negative squared distances. Ties count against the true item
(a query whose relevant document ties with another is ranked behind it), as in the data set's own README; every
ordering and top-k here is :mod:`vecbridge.numeric.ranking`'s, whose docstring says how ties are broken.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .errors import InputError
from .numeric.ranking import ranks_of, shared_count, top_k_rows
from .vectors import l2_normalize

DEFAULT_BLOCK_BYTES = 64 * 2**20


def prepare_vectors(X, metric: str) -> np.ndarray:
    """``X`` as the float32 2-D array that the scores of ``metric`` are computed on: rows L2-normalised for
    ``"cosine"``, unchanged for ``"dot"`` and ``"l2"`` (InputError for another metric or an array that is not 2-D)."""
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise InputError(f"expected a 2-D array of vectors, got shape {X.shape}")
    if metric == "cosine":
        X = l2_normalize(X)
    elif metric not in ("dot", "l2"):
        raise InputError(f"metric must be cosine, dot or l2, got {metric!r}")
    return X


def _blocks(n_queries: int, n_docs: int, max_block_bytes: int):
    rows = max(1, min(n_queries, max_block_bytes // (4 * max(n_docs, 1))))
    for start in range(0, n_queries, rows):
        yield slice(start, min(start + rows, n_queries))


def score_block(Qb: np.ndarray, D: np.ndarray, metric: str, d_sq: np.ndarray | None) -> np.ndarray:
    """Scores (higher is better) of the queries ``Qb`` against the documents ``D``, both from
    :func:`prepare_vectors`: inner products, or for ``"l2"`` negative squared distances (``d_sq``: the documents'
    squared norms, None for the other metrics)."""
    S = Qb @ D.T
    if metric == "l2":
        S *= 2.0
        S -= d_sq[None, :]
        S -= np.einsum("ij,ij->i", Qb, Qb)[:, None]
    return S


def candidate_scorer(Q: np.ndarray, D: np.ndarray, metric: str):
    """``score(i, rows)``: the scores of query ``Q[i]`` against the documents ``D[rows]`` (both from
    :func:`prepare_vectors`), as :func:`score_block` gives them: the scorer that
    :func:`~vecbridge.numeric.ranking.rank_candidates` re-ranks candidate lists with."""
    d_sq = np.einsum("ij,ij->i", D, D) if metric == "l2" else None

    def score(qi: int, rows) -> np.ndarray:
        return score_block(Q[qi:qi + 1], D[rows], metric, d_sq[rows] if d_sq is not None else None)[0]

    return score


def _check_dims(Q: np.ndarray, D: np.ndarray):
    if Q.shape[1] != D.shape[1]:
        raise InputError(f"queries have dimension {Q.shape[1]} but documents have {D.shape[1]}")


def top_k(queries, docs, k: int, *, metric: str = "cosine", max_block_bytes: int = DEFAULT_BLOCK_BYTES,
          return_scores: bool = False):
    """Indices of the ``k`` best documents for every query, best first (n_queries x k); with ``return_scores``
    also their scores (higher is better). Ties: :func:`vecbridge.numeric.ranking.top_k_rows`."""
    Q, D = prepare_vectors(queries, metric), prepare_vectors(docs, metric)
    _check_dims(Q, D)
    k = min(k, D.shape[0])
    d_sq = np.einsum("ij,ij->i", D, D) if metric == "l2" else None
    out = np.empty((Q.shape[0], k), dtype=np.int64)
    scores = np.empty((Q.shape[0], k), dtype=np.float32)
    for sl in _blocks(Q.shape[0], D.shape[0], max_block_bytes):
        out[sl], scores[sl] = top_k_rows(score_block(Q[sl], D, metric, d_sq), k)
    return (out, scores) if return_scores else out


def partner_ranks(queries, docs, partners=None, *, metric: str = "cosine",
                  max_block_bytes: int = DEFAULT_BLOCK_BYTES) -> np.ndarray:
    """1-based rank of each query's true partner among all documents (ties count against the partner).

    ``partners[i]`` is the row of ``docs`` that belongs with ``queries[i]`` (default: row i).
    """
    Q, D = prepare_vectors(queries, metric), prepare_vectors(docs, metric)
    _check_dims(Q, D)
    partners = np.arange(Q.shape[0]) if partners is None else np.asarray(partners, dtype=np.int64)
    if partners.shape != (Q.shape[0],) or (partners.size and (partners.min() < 0 or partners.max() >= D.shape[0])):
        raise InputError("partners must give one valid document row per query")
    d_sq = np.einsum("ij,ij->i", D, D) if metric == "l2" else None
    ranks = np.empty(Q.shape[0], dtype=np.int64)
    for sl in _blocks(Q.shape[0], D.shape[0], max_block_bytes):
        ranks[sl] = ranks_of(score_block(Q[sl], D, metric, d_sq), partners[sl])
    return ranks


def recall_at_k(queries, docs, relevant=None, k: int = 10, *, metric: str = "cosine",
                max_block_bytes: int = DEFAULT_BLOCK_BYTES) -> float:
    """Fraction of queries whose relevant document (``relevant[i]``, default row i) ranks in the top ``k``.

    One relevant document per query (the wordnet protocol); a zero query vector counts as a miss.
    """
    ranks = partner_ranks(queries, docs, relevant, metric=metric, max_block_bytes=max_block_bytes)
    hits = ranks <= k
    q = np.asarray(queries)
    hits &= np.asarray(q, dtype=np.float32).any(axis=1)
    return float(hits.mean())


#: Floor on the denominator of every retention ratio in the tool (mapped recall / native recall). Below it the native
#: re-embed hardly finds the relevant documents at all, so the ratio is decided by a handful of hits and can read
#: anything (50x has been seen): it is then reported as unreliable (``None`` with a reason), never as a measurement.
#: A native Recall@k under 5% means the queries do not fit the collection (wrong model, ids that do not name their
#: relevant documents, a broken ingestion) rather than a map that lost quality.
MIN_NATIVE_RECALL = 0.05
#: ... and the native hits must be at least this many queries (5% of 40 queries is 2 hits: not a measurement either)
MIN_NATIVE_HITS = 5


def retention_ratio(recall_mapped: float, recall_native: float, n_queries: int | None = None, *, k: int | None = None
                    ) -> tuple[float | None, str | None]:
    """``recall_mapped / recall_native`` when the denominator is at least :data:`MIN_NATIVE_RECALL` (and, given
    ``n_queries``, at least :data:`MIN_NATIVE_HITS` native hits); otherwise ``(None, reason)``.

    Every retention the tool reports goes through this one guard (reports, options, drift checks, evaluation).
    """
    at = f"@{k}" if k is not None else ""
    hits = None if n_queries is None else round(recall_native * n_queries)
    if not recall_native >= MIN_NATIVE_RECALL or (hits is not None and hits < MIN_NATIVE_HITS):
        why = (f"unreliable: native recall{at} {recall_native:.3f} too low to compare (the ratio needs at least "
               f"{MIN_NATIVE_RECALL:.2f}")
        why += f" and {MIN_NATIVE_HITS} native hits; got {hits} of {n_queries} queries)" if hits is not None else ")"
        return None, why
    return recall_mapped / recall_native, None


def recall_retention(queries, mapped_docs, native_docs, relevant=None, k: int = 10, *, metric: str = "cosine",
                     max_block_bytes: int = DEFAULT_BLOCK_BYTES) -> dict:
    """Recall@k of new-model queries over the mapped old vectors, divided by Recall@k over a native re-embed.

    This is the number the field quotes (Drift-Adapter: 95-99% of a full re-embed; isotrieve: 0.871).
    Returns ``{"recall_mapped", "recall_native", "retention", "unreliable"}``: ``retention`` is None and
    ``unreliable`` says why when the native recall is below the floor of :func:`retention_ratio`.
    """
    r_mapped = recall_at_k(queries, mapped_docs, relevant, k, metric=metric, max_block_bytes=max_block_bytes)
    r_native = recall_at_k(queries, native_docs, relevant, k, metric=metric, max_block_bytes=max_block_bytes)
    retention, why = retention_ratio(r_mapped, r_native, int(np.asarray(queries).shape[0]), k=k)
    return {"recall_mapped": r_mapped, "recall_native": r_native, "retention": retention, "unreliable": why}


def topk_overlap(queries, mapped_docs, native_docs, k: int = 10, *, metric: str = "cosine",
                 max_block_bytes: int = DEFAULT_BLOCK_BYTES) -> float:
    """Mean |top-k over mapped old vectors ∩ top-k over the native re-embed| / k: needs no relevance labels."""
    A = top_k(queries, mapped_docs, k, metric=metric, max_block_bytes=max_block_bytes)
    B = top_k(queries, native_docs, k, metric=metric, max_block_bytes=max_block_bytes)
    if A.shape[1] == 0:
        return float("nan")
    return float(shared_count(A, B).mean() / A.shape[1])


def mean_cosine(A, B) -> float:
    """Mean cosine between paired rows (row i of A with row i of B); zero rows count as 0."""
    A = prepare_vectors(A, "cosine")
    B = prepare_vectors(B, "cosine")
    if A.shape != B.shape:
        raise InputError(f"paired arrays must have the same shape, got {A.shape} and {B.shape}")
    return float(np.einsum("ij,ij->i", A, B).mean())


@dataclass
class PairQuality:
    """How well mapped source vectors find their own partners among the target vectors."""

    n: int
    top1: float
    mean_rank: float
    mean_cosine: float

    def as_dict(self) -> dict:
        return asdict(self)


def pair_quality(mapped_src, tgt, *, metric: str = "cosine", max_block_bytes: int = DEFAULT_BLOCK_BYTES) -> PairQuality:
    """Top-1 accuracy and mean rank of the true partner (row i of ``tgt``), and mean paired cosine."""
    ranks = partner_ranks(mapped_src, tgt, metric=metric, max_block_bytes=max_block_bytes)
    return PairQuality(n=int(ranks.size), top1=float(np.mean(ranks == 1)), mean_rank=float(ranks.mean()),
                       mean_cosine=mean_cosine(mapped_src, tgt))
