"""Searching an upgrade under way: the candidates of fused serving (:func:`paired_candidates`), and the cascade, where
a served ranking's top candidates are scored again with both models' own vectors and every candidate embedded for it
is written back as native, so what users retrieve is re-embedded first.

The new model's vector of a candidate is the stored one where the record is native already, else the model run on
its stored text now; that vector is upserted with its ``native`` stamp (one write), so the next query finds it
stored and ``reembed`` skips it. With old-model queries the score fuses the two exact cosines,
``(cos(q_new, y) + beta cos(q_old, x)) / (1 + beta)``; without, it is the new model's cosine alone. A hub weight ``w``
subtracts ``w r(y)``, the candidate's hub score as its stamp keeps it (the mean cosine of its native vector to its
nearest queries of the upgrade's log: the hub penalty of "Word Translation Without Parallel Data", Conneau et al.,
2018, on the document side), a signal the two cosines lack.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..connectors.base import Collection
from ..errors import InputError
from ..quality.scoring import fuse
from ..vectors import l2_normalize
from .weights import RERANK_LADDER, RERANK_TIE, choose_rerank, weight_grid


def paired_candidates(target: Collection, source: Collection, q_new: np.ndarray, q_old: np.ndarray | None,
                      k_candidates: int) -> list[tuple]:
    """Per query (vectors normalised): ``(ids, cos_new, cos_old, hub)`` over its candidates, the union of the new
    vectors' search (``target``) and, with old-model queries, the old vectors' (``source``) top ``k_candidates``, in
    the order returned. Records without a stamp (not the upgrade's) are left out; ``hub`` is the stamp's hub score,
    0 where it has none."""
    ids_n, _ = target.search(q_new, k_candidates)
    ids_o = source.search(q_old, k_candidates)[0] if q_old is not None else [[]] * len(q_new)
    cands = [list(dict.fromkeys(list(n) + list(o))) for n, o in zip(ids_n, ids_o)]
    new_v = target.get(list(dict.fromkeys(i for row in cands for i in row)))   # vectors and stamps at once
    held = {i: s.get("hubness") for i, s in zip(new_v.ids, new_v.stamps or []) if s is not None}
    vn = {i: v for i, v in zip(new_v.ids, l2_normalize(new_v.vectors)) if i in held}
    vo = {}
    if q_old is not None:
        old_v = source.get([i for i in new_v.ids if i in held])
        vo = dict(zip(old_v.ids, l2_normalize(old_v.vectors)))
    out = []
    for qi, cand in enumerate(cands):
        both = [i for i in cand if i in vn and (q_old is None or i in vo)]
        out.append((both, np.array([vn[i] @ q_new[qi] for i in both], dtype=np.float32),
                    np.array([vo[i] @ q_old[qi] for i in both], dtype=np.float32) if q_old is not None else None,
                    np.array([held[i] or 0.0 for i in both], dtype=np.float32)))
    return out


#: tuning queries whose candidates are embedded and written back at a time: a tuning stopped midway keeps what it
#: wrote, and the next one embeds only the rest
TUNE_CHUNK = 256


def tune_rerank(rerank: int | str, top: Callable[[int], list], relevant: Sequence, q_new: np.ndarray,
                q_old: np.ndarray, k: int, vectors: Callable[[list], "CandidateVectors"]) -> tuple[int, dict, dict]:
    """How many candidates the cascade re-scores, and each tried count's Recall@k per weight setting, on queries
    with known answers. ``rerank``: a count, or ``"auto"``: each of :data:`RERANK_LADDER`, the smallest within
    :data:`RERANK_TIE` of the best (:func:`choose_rerank`), a larger pool embedded only where its candidates hold
    more relevant records than the smallest. ``top(n)``: each query's top ``n`` of the served ranking;
    ``vectors(rows)``: the candidates' :class:`CandidateVectors` (embedding and writing back what is not native).
    The candidates are embedded :data:`TUNE_CHUNK` queries at a time, each chunk written back before the next.
    Returns ``(chosen, {n: {(beta, w): recall}}, {n: share of queries whose top n held the relevant record})``;
    for a fixed count the shares include twice and four times as many (nothing embedded for them)."""
    ladder = RERANK_LADDER if rerank == "auto" else (int(rerank),)
    if min(ladder) < 1:
        raise InputError("the cascade re-scores at least one candidate per query")
    rows = {n: top(n) for n in ladder}
    held = {n: held_share(relevant, rows[n], (n,))[n] for n in ladder}
    if rerank != "auto":   # what a larger count would hold, from one wider ranking (nothing embedded for it)
        held.update(held_share(relevant, top(4 * ladder[0]), (2 * ladder[0], 4 * ladder[0])))
    tried = [n for n in ladder if n == ladder[0] or held[n] - held[ladder[0]] > RERANK_TIE]
    grid = weight_grid(True)   # every setting; those with a penalty are dropped below if no candidate had a hub score
    hits, has_hub = {n: dict.fromkeys(grid, 0.0) for n in tried}, False
    for lo in range(0, len(relevant), TUNE_CHUNK):   # each chunk's candidates written back before the next
        part = slice(lo, lo + TUNE_CHUNK)
        got = vectors([r for n in tried for r in rows[n][part]])
        has_hub = has_hub or got.has_hub
        for n in tried:
            for s, r in got.recalls(q_new[part], q_old[part], rows[n][part], relevant[part], grid, k).items():
                hits[n][s] += r * len(relevant[part])
    recalls = {n: {s: hits[n][s] / len(relevant) for s in weight_grid(has_hub)} for n in tried}
    return choose_rerank({n: max(r.values()) for n, r in recalls.items()}), recalls, held


def held_share(relevant: Sequence, rows: Sequence, sizes: Sequence[int]) -> dict[int, float]:
    """For each candidate count in ``sizes``: the share of queries whose relevant record (``relevant[i]``) is among
    the first that many of their ranked candidates ``rows[i]``. No re-scoring ranks a record the candidates lack, so
    this bounds the cascade at that K, and says what a larger K would buy before anything is embedded for it."""
    return {n: sum(rel in set(row[:n]) for rel, row in zip(relevant, rows)) / max(1, len(relevant)) for n in sizes}


class CandidateVectors:
    """Both models' vectors of a set of candidates: ``new`` (native, stored or embedded and written back here),
    ``old`` (normalised; only when asked) and ``hub`` (each one's hub score from its stamp, where it has one).
    ``written``: the records this embedded and wrote back."""

    def __init__(self, target: Collection, source: Collection, ids: Sequence, *, text_field: str, embed: Callable,
                 stamps: Callable, with_old: bool):
        held = target.get(list(ids))
        self.new = dict(zip(held.ids, held.vectors))
        self.hub = {i: st.get("hubness") for i, st in zip(held.ids, held.stamps or []) if st}
        self.old = {}
        if with_old:
            got = source.get(list(ids))
            self.old = dict(zip(got.ids, l2_normalize(got.vectors)))
        todo = [i for i, st in zip(held.ids, held.stamps or [None] * len(held))
                if st is None or st.get("origin") != "native"]
        self.written = 0
        if not todo:
            return
        records = source.get(todo)
        has = [j for j, p in enumerate(records.payloads) if isinstance(p.get(text_field), str) and p[text_field]]
        if has:   # a record without text keeps the vector it has
            part = records.take(np.asarray(has))
            native = np.asarray(embed([p[text_field] for p in part.payloads]), dtype=np.float32)
            made = stamps(part, native)
            target.upsert(part.with_vectors(native, made))
            self.written = len(part)
            self.new.update(zip(part.ids, native))
            self.hub.update((i, st.get("hubness")) for i, st in zip(part.ids, made))

    @property
    def has_hub(self) -> bool:
        """Whether any candidate has a hub score (the penalty is worth tuning)."""
        return any(self.hub.values())

    def rank(self, q_new: np.ndarray, q_old: np.ndarray | None, row: Sequence, beta: float, k: int,
             weight: float = 0.0):
        """``(ids, scores)``: the best ``k`` of ``row`` by the cascade's score (the query vectors normalised), less
        ``weight`` times each candidate's hub score (0 where it has none)."""
        cand = [i for i in row if i in self.new and (q_old is None or i in self.old)]
        if not cand:
            return [], np.zeros(0, dtype=np.float32)
        cos = l2_normalize(np.stack([self.new[i] for i in cand])) @ q_new
        cos_old = None if q_old is None else np.stack([self.old[i] for i in cand]) @ q_old
        hub = np.array([self.hub.get(i) or 0.0 for i in cand], dtype=np.float32) if weight else None
        cos = fuse(cos, cos_old, beta if q_old is not None else 0.0, hub, weight, mean=True)
        order = np.argsort(-cos, kind="stable")[:k]
        return [cand[j] for j in order], cos[order]

    def recalls(self, q_new: np.ndarray, q_old: np.ndarray, rows: list, relevant: list, settings, k: int) -> dict:
        """Recall@k of each ``(beta, hub weight)`` setting: how often ``relevant[i]`` is in the best ``k`` of query
        i's candidates ``rows[i]``."""
        return {(beta, w): sum(relevant[qi] in self.rank(q_new[qi], q_old[qi], row, beta, k, w)[0]
                               for qi, row in enumerate(rows)) / len(relevant) for beta, w in settings}
