"""How many candidates the cascade re-scores when a tuning chooses it (``upgrade tune --rerank auto``): every count
of the ladder is measured, a larger pool is embedded only where it holds more relevant records, and the smallest
count within the tie of the best is kept."""
from __future__ import annotations

import numpy as np
import pytest

from vecbridge.errors import InputError
from vecbridge.serving import cascade
from vecbridge.serving.weights import RERANK_TIE


class Pool:
    """Candidate vectors where query i's relevant record ranks first if it is among the first ``sees`` candidates
    re-scored (a stand-in for both models' vectors: this tests the choice, not the scoring)."""

    def __init__(self, rows, embedded):
        embedded.append(sorted({i for row in rows for i in row}))
        self.has_hub = False

    def recalls(self, q_new, q_old, rows, relevant, settings, k):
        return {s: float(np.mean([rel in row for rel, row in zip(relevant, rows)])) for s in settings}


def ranking(relevant_at):
    """``top(n)``: query i's candidates 1000 i + j, its relevant one at position ``relevant_at[i]``."""
    def top(n):
        return [[1000 * i + j for j in range(n)] for i in range(len(relevant_at))]
    return top


def tune(relevant_at, rerank, monkeypatch, embedded):
    monkeypatch.setattr(cascade, "RERANK_LADDER", (10, 20, 40))
    relevant = [1000 * i + at for i, at in enumerate(relevant_at)]
    q = np.zeros((len(relevant), 4), dtype=np.float32)
    return cascade.tune_rerank(rerank, ranking(relevant_at), relevant, q, q, 10,
                               lambda rows: Pool(rows, embedded))


def test_auto_takes_a_larger_pool_where_it_ranks_more_relevant_records(monkeypatch):
    embedded = []
    # 1,000 queries: 60% relevant in the top 10, 10% more in 10-19, none in 20-39
    at = [0] * 600 + [15] * 100 + [50] * 300
    chosen, recalls, held = tune(at, "auto", monkeypatch, embedded)
    assert held == {10: 0.6, 20: 0.7, 40: 0.7}
    assert set(recalls) == {10, 20, 40} and chosen == 20, "40 adds nothing over 20: the smaller wins"
    assert len(set().union(*embedded)) == 1000 * 40, "the union of the pools tried"
    assert len(embedded) == -(-1000 // cascade.TUNE_CHUNK), "a chunk of queries at a time"


def test_auto_embeds_no_larger_pool_that_holds_no_more_relevant_records(monkeypatch):
    embedded = []
    at = [0] * 600 + [80] * 400   # beyond every pool
    chosen, recalls, held = tune(at, "auto", monkeypatch, embedded)
    assert chosen == 10 and set(recalls) == {10}
    assert held[40] - held[10] <= RERANK_TIE
    assert set().union(*embedded) == {1000 * i + j for i in range(1000) for j in range(10)}, "only the top 10"


def test_a_fixed_count_is_kept_and_larger_ones_only_counted(monkeypatch):
    embedded = []
    chosen, recalls, held = tune([0] * 50 + [15] * 50, 10, monkeypatch, embedded)
    assert chosen == 10 and set(recalls) == {10} and held == {10: 0.5, 20: 1.0, 40: 1.0}
    assert sum(map(len, embedded)) == 100 * 10
    with pytest.raises(InputError, match="at least one candidate"):
        tune([0], 0, monkeypatch, [])


def test_each_chunk_of_queries_is_embedded_on_its_own_and_recall_adds_up_over_them(monkeypatch):
    monkeypatch.setattr(cascade, "TUNE_CHUNK", 7)
    embedded = []
    at = [0, 15, 50] * 10   # 30 queries: a third found in the top 10, a third more in the top 20
    chosen, recalls, held = tune(at, "auto", monkeypatch, embedded)
    assert len(embedded) == 5 and [len(e) for e in embedded] == [7 * 40] * 4 + [2 * 40]
    assert {1000 * i + j for i in range(7) for j in range(40)} == set(embedded[0]), "queries 0-6 first"
    assert recalls[10][0.0, 0.0] == pytest.approx(1 / 3) and recalls[20][0.0, 0.0] == pytest.approx(2 / 3)
    assert chosen == 20
