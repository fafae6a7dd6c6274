"""Serving an upgrade at every stage: new-model queries over its vectors (mapped and native alike), optionally fused
with old-model queries over the old vectors and with the hub penalty (the formula of
:func:`vecbridge.quality.scoring.fuse`), the weights chosen on queries with known answers, and the quality served
measured against staying on the old model."""
from __future__ import annotations

import time
from functools import partial

import numpy as np

from ...connectors.base import VectorBatch
from ...errors import InputError
from ...quality.scoring import fuse
from ...runtime.open import open_collection
from ...serving.cascade import CandidateVectors, paired_candidates, tune_rerank
from ...serving.weights import CASCADE_BETA, best_setting, by_beta, weight_grid
from ...vectors import l2_normalize
from .base import UpgradeBase


def query_pairs(queries, old_queries) -> tuple[VectorBatch, VectorBatch]:
    """The same queries in the new and the old model (each query's id is its relevant record's id)."""
    new_q = VectorBatch.concat(list(open_collection(queries).scan(batch_size=2000)))
    old_q = open_collection(old_queries).get(list(new_q.ids))
    if len(old_q) < len(new_q):
        raise InputError(f"only {len(old_q):,} of the {len(new_q):,} queries are in the old-model query collection")
    by_id = dict(zip(old_q.ids, range(len(old_q))))
    return new_q, old_q.take(np.asarray([by_id[i] for i in new_q.ids]))


def _probes(queries_new, queries_old, relevant: list) -> tuple[np.ndarray, np.ndarray]:
    """Queries with known answers, normalised: the same queries in both models, one relevant id each."""
    q_new = l2_normalize(np.asarray(queries_new, dtype=np.float32))
    q_old = l2_normalize(np.asarray(queries_old, dtype=np.float32))
    if not (len(q_new) == len(q_old) == len(relevant)) or not len(relevant):
        raise InputError("measuring needs the same queries in both models and the id of each one's relevant record")
    return q_new, q_old


class Serving(UpgradeBase):
    """:meth:`search`, :meth:`tune_fusion` and :meth:`measure`."""

    def _candidates(self, q_new: np.ndarray, q_old: np.ndarray | None, k_candidates: int):
        """:func:`~vecbridge.serving.cascade.paired_candidates` of the upgrade's vectors and the old ones."""
        return paired_candidates(self.target, self.source, q_new, q_old, k_candidates)

    @staticmethod
    def _score(cos_new: np.ndarray, cos_old: np.ndarray | None, hub: np.ndarray, beta: float, weight: float):
        """``(cos_new + beta cos_old) / (1 + beta) - weight r(d)``; ``beta = inf`` is the old model alone (staying,
        no penalty: the hub score belongs to the new vectors)."""
        return fuse(cos_new, cos_old, beta, hub, weight, mean=True)

    def _recalls(self, queries_new, queries_old, relevant: list, settings, *, k: int, k_candidates: int) -> dict:
        """Recall@k of each ``(beta, hub weight)`` setting on queries with known answers (``relevant[i]`` is the id of
        query i's relevant record), all from one candidate pool per query."""
        q_new, q_old = _probes(queries_new, queries_old, relevant)
        cands = self._candidates(q_new, q_old, k_candidates)
        out = {}
        for beta, w in settings(any(h.any() for _, _, _, h in cands)):
            hits = 0
            for (ids, cn, co, hub), rel in zip(cands, relevant):
                order = np.argsort(-self._score(cn, co, hub, beta, w), kind="stable")[:k]
                hits += rel in {ids[j] for j in order}
            out[beta, w] = hits / len(relevant)
        return out

    def tune_fusion(self, queries_new, queries_old, relevant: list, *, k: int = 10, k_candidates: int = 100) -> dict:
        """Choose the old query's weight ``beta`` and the hub penalty's weight on queries with known answers
        (``relevant[i]`` is the id of query i's relevant record): the grid includes the old model alone (``inf``),
        so the choice serves at least as well as staying on the old model on these queries. Saved in the state;
        ``search`` uses them by default. The penalty is tried once records have hub scores (from the start's
        re-embedded sample, or a query log: :meth:`learn_queries`)."""
        recall = self._recalls(queries_new, queries_old, relevant, weight_grid, k=k, k_candidates=k_candidates)
        best_beta, best_w = best_setting(recall)
        stays = bool(np.isinf(best_beta))
        self.meta = self.state.update(fusion_beta=None if stays else best_beta, fusion_stays=stays,
                                      hub_weight=best_w)
        self.state.event("tuned", f"beta {best_beta}, hub weight {best_w} on {len(relevant):,} queries")
        return {"beta": "old model alone" if stays else best_beta, "hub_weight": best_w,
                "recall": recall[best_beta, best_w], "staying": recall[np.inf, 0.0],
                "new_model_only": recall[0.0, 0.0], "n_queries": len(relevant), "recall_by_beta": by_beta(recall),
                "hub_weights_tried": sorted({w for _, w in recall})}

    def tune_cascade(self, queries_new, queries_old, relevant: list, *, k: int = 10, rerank: int | str = 100,
                     embed=None) -> dict:
        """Choose the old model's weight and the hub penalty's in the cascade (``search --rerank``) on queries with
        known answers: each query's top ``rerank`` candidates of the served ranking get their native vectors
        (embedded and written back where they have none yet, as a served cascade would), then every setting of the
        fusion's grid (the old model alone included; the penalty where the candidates have hub scores) ranks them.
        ``rerank="auto"``: the number of candidates too (:func:`~vecbridge.serving.cascade.tune_rerank`). Saved in
        the state; the cascade uses them from then on."""
        q_new, q_old = _probes(queries_new, queries_old, relevant)
        chosen, recalls, held = tune_rerank(rerank, lambda n: self._top(q_new, q_old, n), relevant, q_new, q_old, k,
                                            partial(self._candidate_vectors, embed=embed or self.model, with_old=True))
        recall = recalls[chosen]
        best, w = best_setting(recall)
        self.meta = self.state.update(cascade_beta="inf" if np.isinf(best) else best, cascade_hub_weight=w,
                                      cascade_k=chosen)
        self.state.event("tuned-cascade", f"beta {best}, hub weight {w}, top {chosen}; {len(relevant):,} queries")
        return {"cascade_beta": "old model alone" if np.isinf(best) else best, "hub_weight": w, "rerank": chosen,
                "recall": recall[best, w], "recall_by_beta": by_beta(recall),
                "recall_without_penalty": max(r for (_, ww), r in recall.items() if ww == 0),
                "recall_by_rerank": {str(n): max(r.values()) for n, r in recalls.items()},
                "candidates_hold_relevant": held[chosen], "written_back": self.written_back,
                "larger_k_would_hold": {str(n): share for n, share in held.items() if n > chosen}}

    def _top(self, q_new: np.ndarray, q_old: np.ndarray, n: int) -> list[list]:
        """Each query's top ``n`` of the served ranking, 256 queries per request."""
        return [row for lo in range(0, len(q_new), 256)
                for row in self._ranked(q_new[lo:lo + 256], n, old_queries=q_old[lo:lo + 256], beta=None,
                                        hub_weight=None, k_candidates=max(n, 100))[0]]

    def _cascade_beta(self) -> float:
        """The cascade's old-model weight :meth:`tune_cascade` chose, else :data:`CASCADE_BETA`."""
        chosen = self.meta.get("cascade_beta")
        if chosen is None:
            return CASCADE_BETA
        return np.inf if chosen == "inf" else float(chosen)

    def _tuned_rerank(self) -> int:
        """The candidates :meth:`tune_cascade` re-scored: searches run the cascade it tuned unless told otherwise
        (none before it ran, and none once the old vectors are dropped: every candidate is native then)."""
        return 0 if self.meta.get("dropped") else int(self.meta.get("cascade_k") or 0)

    def _tuned_beta(self) -> float:
        """The old query's weight :meth:`tune_fusion` chose (``inf``: the old model alone). Before any tuning, what
        serves at least as well as what the application had: the old model alone while it is served (fused
        serving with untuned weights measured below staying on most model pairs: docs/design.md), the new model
        alone once the upgrade is cut over."""
        if self.meta.get("fusion_stays"):
            return np.inf
        if self.meta.get("fusion_beta") is not None:
            return float(self.meta["fusion_beta"])
        return np.inf if self.meta.get("serving", "old") == "old" else 0.0

    def measure(self, queries_new, queries_old, relevant: list, *, k: int = 10, k_candidates: int = 100) -> dict:
        """Recall@k on queries with known answers as served now (the tuned weights; before any tuning the old model
        alone until cutover, the new model alone after it), against the new model alone and staying on the old
        model. Kept in the state as the latest probe (``status`` shows it)."""
        beta = self._tuned_beta()
        w = float(self.meta.get("hub_weight") or 0.0)
        r = self._recalls(queries_new, queries_old, relevant, lambda _: [(beta, w), (0.0, 0.0), (np.inf, 0.0)],
                          k=k, k_candidates=k_candidates)
        counts = self.counts()
        probe = {"k": k, "served": r[beta, w], "new_model_only": r[0.0, 0.0], "staying": r[np.inf, 0.0],
                 "n_queries": len(relevant), "native_fraction": counts["native"] / max(1, sum(counts.values())),
                 "at": time.time()}
        self.meta = self.state.update(probe=probe)
        self.state.event("probe", f"Recall@{k} served {probe['served']:.3f}, staying {probe['staying']:.3f}")
        return self.status()

    def search(self, texts: list[str], k: int = 10, *, old_model: str | None = None, beta: float | None = None,
               hub_weight: float | None = None, k_candidates: int = 100, rerank: int | None = None,
               models=None) -> tuple[list[list], np.ndarray]:
        """New-model queries over the upgrade's vectors (mapped and native alike). With ``old_model``, each query is
        also encoded by the old model and every candidate scored ``(cos(q_new, v_new) + beta cos(q_old, v_old)) /
        (1 + beta)`` over the union of both searches' candidates (dual-query fusion); ``hub_weight`` subtracts
        ``weight * r(d)``, the record's hub score (the hub penalty). Both default to what :meth:`tune_fusion`
        chose (before any tuning: the old model alone until cutover, the new model alone after it; no penalty).
        ``rerank``: the cascade, see :meth:`search_vectors`. ``models``: where both models run
        (:class:`~vecbridge.runtime.models.ModelOptions`)."""
        self.run_models(models)
        q_new = self.model(texts)
        q_old = self.models.load(old_model)(texts) if old_model is not None else None
        return self.search_vectors(q_new, k, old_queries=q_old, beta=beta, hub_weight=hub_weight,
                                   k_candidates=k_candidates, rerank=rerank)

    def search_vectors(self, queries, k: int = 10, *, old_queries=None, beta: float | None = None,
                       hub_weight: float | None = None, k_candidates: int = 100, rerank: int | None = None,
                       embed=None) -> tuple[list[list], np.ndarray]:
        """:meth:`search` with the queries encoded already (a service that loaded its models once): the new model's
        vectors, and the old model's vectors of the same queries, row for row, for dual-query fusion.

        ``rerank`` K > 0: the cascade (default: the K :meth:`tune_cascade` tuned, none before; 0: off). The
        search's top K candidates are scored again with the new model's own vectors of their stored texts
        (``embed``, the upgrade's model by default): by the new model alone, or, with old-model queries, fused with
        the old model's cosine (the weight :meth:`tune_cascade` chose, else :data:`CASCADE_BETA`), less the hub
        penalty it chose (none before). Each candidate embedded for it is written back as its native vector,
        stamped ``native`` in the same upsert, so the records users retrieve become native first and ``reembed``
        skips them."""
        rerank = self._tuned_rerank() if rerank is None else rerank
        if rerank < 0:
            raise InputError("rerank is a number of candidates, at least 0")
        ids, scores = self._ranked(queries, max(k, rerank), old_queries=old_queries, beta=beta,
                                   hub_weight=hub_weight, k_candidates=k_candidates)
        if not rerank:
            return [row[:k] for row in ids], scores[:, :k]
        q_new = l2_normalize(np.asarray(queries, dtype=np.float32))
        q_old = None if old_queries is None else l2_normalize(np.asarray(old_queries, dtype=np.float32))
        return self._cascade(q_new, q_old, [row[:rerank] for row in ids], k, embed or self.model)

    def _cascade(self, q_new: np.ndarray, q_old: np.ndarray | None, rows: list[list], k: int,
                 embed) -> tuple[list[list], np.ndarray]:
        """Candidates re-scored with both models' own vectors (:mod:`vecbridge.serving.cascade`)."""
        got = self._candidate_vectors(rows, embed, with_old=q_old is not None)
        out_ids, out_scores = [], np.full((len(q_new), k), -np.inf, dtype=np.float32)
        beta, w = self._cascade_beta(), float(self.meta.get("cascade_hub_weight") or 0.0)
        for qi, row in enumerate(rows):
            ids, scores = got.rank(q_new[qi], None if q_old is None else q_old[qi], row, beta, k, w)
            out_ids.append(ids)
            out_scores[qi, :len(ids)] = scores
        return out_ids, out_scores

    def _candidate_vectors(self, rows: list[list], embed, *, with_old: bool) -> CandidateVectors:
        text_field = self.meta["text_field"]
        got = CandidateVectors(self.target, self.source, list(dict.fromkeys(i for row in rows for i in row)),
                               text_field=text_field, embed=embed, with_old=with_old,
                               stamps=self.native_stamps())
        self.written_back += got.written
        return got

    #: records the cascade embedded and wrote back as native through this handle
    written_back = 0

    def _ranked(self, queries, k: int, *, old_queries, beta, hub_weight, k_candidates) -> tuple[list[list], np.ndarray]:
        """The served ranking's top ``k``: the store's own search, or fusion and the hub penalty over candidates."""
        q_new = l2_normalize(np.asarray(queries, dtype=np.float32))
        weight = float(self.meta.get("hub_weight") or 0.0) if hub_weight is None else float(hub_weight)
        q_old = None
        if old_queries is not None:
            if beta is None:
                beta = self._tuned_beta()
            q_old = l2_normalize(np.asarray(old_queries, dtype=np.float32))
        if q_old is None and not weight:
            return self._store_search(q_new, k)
        out_ids, out_scores = [], np.full((len(q_new), k), -np.inf, dtype=np.float32)
        for qi, (ids, cn, co, hub) in enumerate(self._candidates(q_new, q_old, max(k, k_candidates))):
            scores = self._score(cn, co, hub, beta or 0.0, weight)
            order = np.argsort(-scores, kind="stable")[:k]
            out_ids.append([ids[j] for j in order])
            out_scores[qi, :len(order)] = scores[order]
        return out_ids, out_scores

    def _store_search(self, q_new: np.ndarray, k: int) -> tuple[list[list], np.ndarray]:
        """The store's own search over the upgrade's vectors (one request: records gone from the source left the
        upgrade's collection at the last sync, their stamps with them)."""
        ids, scores = self.target.search(q_new, k)
        out = np.full((len(q_new), k), -np.inf, dtype=np.float32)
        for qi, row in enumerate(ids):
            out[qi, :len(row)] = np.asarray(scores[qi], dtype=np.float32)[:len(row)]
        return [list(row) for row in ids], out
