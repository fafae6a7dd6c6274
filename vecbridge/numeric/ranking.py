"""Ranking by score: the one place that orders candidates, takes the top k and computes the rank of a relevant item.

Used by :mod:`vecbridge.metrics` (``top_k``, ``partner_ranks``), :mod:`vecbridge.quality.options` (the measured
options), :mod:`vecbridge.serving.wrap` (wrapped search) and :mod:`vecbridge.quality.scoring` (re-ranking, fusion).
Higher scores are better everywhere (:func:`shared_count` compares two top-k lists). Pure numpy.

How ties are broken (the same rules for every caller, so that a figure does not change with the path that
computed it):

* Ordering (:func:`best_first`, and so :func:`rank_candidate_rows` and :func:`rank_candidates`): a stable sort
  by descending score; equal scores keep their input order (an earlier candidate, or a lower column, first).
* Selecting the top ``k`` of a score matrix (:func:`top_k_indices`, :func:`top_k_rows`): with ``k`` at least the
  number of columns every column is kept, in column order, and :func:`top_k_rows` orders them as above. With fewer,
  the ``k`` columns come from ``np.argpartition`` (introselect): when equal scores straddle the k-th place, which of
  them are kept, and the order :func:`top_k_rows` keeps them in among themselves, is numpy's, not necessarily the
  lowest columns first. Without a tie across the k-th place the selection is exact.
* The rank of a relevant item (:func:`ranks_of`): 1 + the number of *other* items scoring at least as high, so a
  tie counts against the relevant item (as in the wordnet data set's README).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def best_first(scores, k: int | None = None) -> np.ndarray:
    """Positions along the last axis of ``scores``, best first (a stable sort: ties keep input order); the first
    ``k`` of them when ``k`` is given."""
    order = np.argsort(-np.asarray(scores), axis=-1, kind="stable")
    return order if k is None else order[..., :k]


def top_k_indices(S: np.ndarray, k: int) -> np.ndarray:
    """Columns of the ``k`` best scores in every row of ``S``, in no particular order (all columns, in column order,
    when ``k`` is at least their number): (rows, min(k, columns)). Ties: see the module docstring."""
    if k < S.shape[1]:
        return np.argpartition(-S, k - 1, axis=1)[:, :k]
    return np.tile(np.arange(S.shape[1]), (S.shape[0], 1))


def top_k_rows(S: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(columns, scores)`` of the ``k`` best scores in every row of ``S``, best first; ties: see the module
    docstring."""
    idx = top_k_indices(S, k)
    part = np.take_along_axis(S, idx, axis=1)
    order = best_first(part)
    return np.take_along_axis(idx, order, axis=1), np.take_along_axis(part, order, axis=1)


def ranks_of(S: np.ndarray, cols) -> np.ndarray:
    """1-based rank of column ``cols[i]`` in row ``i`` of ``S``: 1 + the number of other columns scoring at least
    as high (ties count against it)."""
    true = S[np.arange(S.shape[0]), cols]
    return (S >= true[:, None]).sum(axis=1)


def shared_count(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """How many ids row ``i`` of ``A`` and row ``i`` of ``B`` have in common, for two top-k lists whose rows each hold
    distinct ids (after sorting their concatenation, every repeat is one shared id)."""
    both = np.sort(np.concatenate([A, B], axis=1), axis=1)
    return (both[:, 1:] == both[:, :-1]).sum(axis=1)


def rank_candidate_rows(candidate_rows: Sequence, k: int, score: Callable[[int, object], np.ndarray]
                        ) -> tuple[list[np.ndarray], np.ndarray]:
    """Re-score each query's candidates and keep the best ``k``: ``score(i, candidate_rows[i])`` gives the scores of
    query ``i``'s candidates (a query without candidates is not scored).

    Returns, per query, the positions in ``candidate_rows[i]`` of the kept candidates, best first (ties keep
    candidate order), and their scores, (n_queries, k) float32 padded with -inf.
    """
    orders, out_scores = [], np.full((len(candidate_rows), k), -np.inf, dtype=np.float32)
    for qi, rows in enumerate(candidate_rows):
        if len(rows) == 0:
            orders.append(np.zeros(0, dtype=np.int64))
            continue
        sc = score(qi, rows)
        order = best_first(sc, k)
        orders.append(order)
        out_scores[qi, :len(order)] = sc[order]
    return orders, out_scores


def rank_candidates(candidate_ids: list[list], ids: list, k: int,
                    score: Callable[[int, list[int]], np.ndarray]) -> tuple[list[list], np.ndarray]:
    """Re-rank each query's candidates: ``score(query_index, rows)`` scores the rows of ``ids`` that are among the
    query's candidates; candidates not in ``ids`` are dropped. Returns the top ``k`` ids per query and their scores
    (padded with -inf); ties keep candidate order (:func:`rank_candidate_rows`). Shared by wrapped search, dual-query
    fusion and new-model re-ranking."""
    pos = {i: j for j, i in enumerate(ids)}
    rows = [[pos[i] for i in row if i in pos] for row in candidate_ids]
    orders, out_scores = rank_candidate_rows(rows, k, score)
    return [[ids[r[j]] for j in order] for r, order in zip(rows, orders)], out_scores
