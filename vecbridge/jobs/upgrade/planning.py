"""``plan``: what an upgrade costs on this machine and, given queries with known answers in both models, the quality
it serves at each stage, predicted on a re-embedded pool of the collection. Writes nothing."""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ...align.methods import method as method_of
from ...connectors.base import Collection, VectorBatch
from ...errors import InputError
from ...pairing.reembed import _texts
from ...quality.pool import cascade_at_size, levels, pool_counts
from ...runtime.models import ModelOptions
from ...runtime.open import open_collection
from ...serving.weights import FUSION_BETAS, RERANK_LADDER, choose_rerank
from .serving import query_pairs

#: native fractions at which :func:`plan` predicts what the upgrade serves
PLAN_FRACTIONS = (0.0, 0.1, 0.25, 0.5, 1.0)
#: a plan's default pool and fit sample (each at most a quarter of the collection: :func:`plan_sizes`)
PLAN_POOL = PLAN_FIT_SAMPLE = 2000


def _with_text(batch: VectorBatch, text_field: str) -> tuple[VectorBatch, list[str]]:
    """The records of ``batch`` that hold a text, and their texts (:func:`vecbridge.pairing.reembed._texts`)."""
    keep, texts = _texts(batch, text_field)
    return batch.take(keep), texts


def _encode(embed, texts: list[str], on_progress: Callable[[int], None], chunk: int = 256) -> np.ndarray:
    """``embed(texts)`` in chunks, reporting each one done (a progress bar over minutes of encoding)."""
    parts = []
    for lo in range(0, len(texts), chunk):
        parts.append(np.asarray(embed(texts[lo:lo + chunk]), dtype=np.float32))
        on_progress(len(parts[-1]))
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)


def plan_sizes(count: int, pool: int | None, fit_sample: int | None) -> tuple[int, int, str | None]:
    """The pool and fit sample a plan re-embeds: the user's, else 2,000 each but at most a quarter of the
    collection each, so that predicting costs at most half a full re-embed (with the defaults alone, a 3,000-record
    collection would be re-embedded whole to predict). The note says when the defaults were reduced."""
    cap = max(100, count // 4)
    p = pool if pool is not None else min(PLAN_POOL, cap)
    f = fit_sample if fit_sample is not None else min(PLAN_FIT_SAMPLE, cap)
    reduced = (pool is None and p < PLAN_POOL) or (fit_sample is None and f < PLAN_FIT_SAMPLE)
    note = (f"predicting on a pool of {p:,} and a fit sample of {f:,} re-embedded records (a quarter of the "
            f"{count:,} records each, not {PLAN_POOL:,}, so the plan costs at most half a full re-embed; --pool "
            f"and --fit-sample choose)" if reduced else None)
    return p, f, note


def _others(src: Collection, n: int, held: set, text_field: str, seed: int) -> tuple[VectorBatch, list[str]]:
    """Up to ``n`` sampled records with text, none of them in ``held``, and their texts."""
    batch, texts = _with_text(src.sample(n + len(held), seed=seed), text_field)
    keep = np.asarray([j for j, i in enumerate(batch.ids) if i not in held][:n], dtype=np.int64)
    return batch.take(keep), [texts[j] for j in keep]


def _stages(M, Y, docs, Qn, Qo, rel, staying, fractions, k: int, seed: int, counts, level, cascade) -> list[dict]:
    """What each stage serves: the pool with a ``fraction`` of it native (random order), new-model queries alone
    and fused with old-model ones (the best weight on these queries), against staying on the old model; each in
    the pool and at the collection's size (``counts``: :func:`~vecbridge.quality.pool.pool_counts`, ``level`` its
    two figures; ``staying``: both of staying's); and at that size with the cascade re-scoring the served ranking's
    top candidates (``cascade(counts)``, None for staying's: the prediction and its old-model weight)."""
    order = np.random.default_rng(seed).permutation(len(docs))
    stages = []
    for f in fractions:
        served = M.copy()
        native = order[:int(round(f * len(docs)))]
        served[native] = Y[native]
        alone = level(counts(Qn, served))
        ranked = {b: counts(Qn, served, Q_old=Qo, old_docs=docs.vectors, beta=b)
                  for b in FUSION_BETAS if 0 < b < np.inf}
        fused = {b: level(c) for b, c in ranked.items()}
        best = max(fused, key=lambda b: (fused[b][0], -b))
        fuses = fused[best][0] >= staying[0]
        use = fused[best] if fuses else staying
        casc = cascade(ranked[best] if fuses else None)
        stages.append({"native_fraction": f, "recall": alone[0], "recall_fused": max(fused[best][0], staying[0]),
                       "beta": best if fuses else "old model alone", "recall_at_size": alone[1],
                       "recall_fused_at_size": use[1], "recall_cascade_at_size": casc[0],
                       "cascade_beta": "inf" if np.isinf(casc[1]) else casc[1], "cascade_rerank": casc[2]})
    return stages


def predict_stages(src: Collection, embed, *, text_field: str, queries, old_queries, pool: int = 2000,
                   fit_sample: int = 2000, method: str = "orthogonal", seed: int = 0, k: int = 10, rerank=100,
                   fractions=PLAN_FRACTIONS, others_only: bool = True, on_step: Callable[[str], None] = lambda s: None,
                   on_start: Callable[[int], None] = lambda n: None, on_progress=lambda n: None) -> dict:
    """Recall@k the upgrade serves at each stage, simulated on a pool of the collection: the queries' relevant
    records plus ``pool`` others, all re-embedded, and a map fitted on ``fit_sample`` further re-embedded records
    (as ``start`` does). Each stage serves the pool with a ``fraction`` of it native (random order), new-model
    queries alone and fused with old-model ones (the weight chosen on these queries, as ``upgrade tune`` does),
    against staying. Each is also predicted at the collection's size (``*_at_size``, :mod:`~vecbridge.quality.at_size`,
    the pool's others as distractors, or every other pool record without ``others_only``), and so is the cascade
    (``search --rerank``: the top ``rerank`` re-scored with both models' own vectors, the weight best at that size;
    ``"auto"``: the count of :data:`RERANK_LADDER` ``upgrade tune --rerank auto`` would keep, ``cascade_rerank``)."""
    chosen = method_of(method)
    new_q, old_q = query_pairs(queries, old_queries)
    relevant, rel_texts = _with_text(src.get(list(dict.fromkeys(new_q.ids))), text_field)
    if not len(relevant):
        raise InputError(f"none of the queries' relevant records is in {src.display_url} with text in "
                         f"{text_field!r}")
    others, other_texts = _others(src, pool, set(relevant.ids), text_field, seed)
    docs = VectorBatch.concat([relevant, others])
    fit, fit_texts = _others(src, fit_sample, set(docs.ids), text_field, seed + 1)
    if len(fit) < 2:
        raise InputError(f"{src.display_url} has too few records with text beyond the pool to fit a map")
    on_step(f"re-embedding {len(docs) + len(fit):,} stored texts to predict each stage")
    on_start(len(docs) + len(fit))
    t0 = time.perf_counter()
    Y = _encode(embed, rel_texts + other_texts, on_progress)
    Y_fit = _encode(embed, fit_texts, on_progress)
    seconds = time.perf_counter() - t0
    M = chosen.build(seed=seed).fit(fit.vectors, Y_fit).transform(docs.vectors)
    row = {i: j for j, i in enumerate(docs.ids)}
    use = np.asarray([qi for qi, i in enumerate(new_q.ids) if i in row], dtype=np.int64)
    Qn, Qo = new_q.vectors[use], old_q.vectors[use]
    rel = np.asarray([row[new_q.ids[qi]] for qi in use], dtype=np.int64)
    size = src.info().count

    def counts(Q, D, **fused):
        return pool_counts(Q, D, rel, len(relevant), others_only, **fused)

    def level(c):
        return levels(c, size, k)

    rescored = {0.0: counts(Qn, Y), np.inf: counts(Qo, docs.vectors), **{
        b: counts(Qn, Y, Q_old=Qo, old_docs=docs.vectors, beta=b) for b in FUSION_BETAS if 0 < b < np.inf}}

    def cascade(served):   # (Recall@k, weight, count) on the served ranking (None: staying's); auto: tune's count
        by_n = {n: cascade_at_size(rescored[np.inf] if served is None else served, rescored, size, rerank=n, k=k)
                for n in (RERANK_LADDER if rerank == "auto" else (rerank,))}
        n = choose_rerank({n: got[0] for n, got in by_n.items()})
        return (*by_n[n], n)

    staying = level(rescored[np.inf])
    stages = _stages(M, Y, docs, Qn, Qo, rel, staying, fractions, k, seed, counts, level, cascade)
    alone_ok = [st["native_fraction"] for st in stages if st["recall"] >= staying[0]]
    return {"k": k, "rerank": rerank, "queries": len(use), "pool": len(docs), "fit_sample": len(fit),
            "method": chosen.name, "staying": staying[0], "staying_at_size": staying[1], "collection_size": size,
            "stages": stages, "texts_encoded": len(docs) + len(fit), "encode_seconds": seconds,
            "new_model_alone_from": alone_ok[0] if alone_ok else None}


def plan(source, *, model: str, text_field: str, sample: int = 64, seed: int = 0, queries=None, old_queries=None,
         pool: int | None = None, fit_sample: int | None = None, rerank=100, method: str = "orthogonal",
         on_step: Callable[[str], None] = lambda s: None, on_start: Callable[[int], None] = lambda n: None,
         on_progress: Callable[[int], None] = lambda n: None, models: ModelOptions | None = None) -> dict:
    """What an upgrade of ``source`` to ``model`` costs on this machine, measured on ``sample`` stored texts, and,
    given queries with known answers in both models (``queries``, ``old_queries``), the Recall@10 it serves at each
    stage (:func:`predict_stages`, on the pool and fit sample of :func:`plan_sizes`). Writes nothing. The model
    runs where ``models`` says (the cost is this device's); ``model_run`` is its throughput."""
    if (queries is None) != (old_queries is None):
        raise InputError("predicting quality needs the queries in both models: give --queries and --old-queries")
    src = open_collection(source)
    info = src.info()
    if info.count == 0:
        raise InputError(f"collection is empty: {src.display_url}")
    models = models or ModelOptions()
    embed = models.load(model)
    records = src.sample(sample, seed=seed)
    texts = [p.get(text_field) for p in records.payloads]
    texts = [t for t in texts if isinstance(t, str) and t]
    if not texts:
        raise InputError(f"no sampled record of {src.display_url} has text in payload field {text_field!r}: name it "
                         f"with --text-field (if the texts are gone, nothing is re-embedded and the mapped vectors are "
                         f"final: `vecbridge report` with --pairs unsupervised or geh:SEEDS and --queries predicts "
                         f"what they serve)")
    embed(texts[:2])                          # model warm-up, not timed
    t0 = time.perf_counter()
    embed(texts)
    per_text = (time.perf_counter() - t0) / len(texts)
    with_text = len(texts) / len(records)
    predicted = None
    if queries is not None:
        pool, fit_sample, note = plan_sizes(info.count, pool, fit_sample)
        if note:
            on_step(note)
        predicted = predict_stages(src, embed, text_field=text_field, queries=queries, old_queries=old_queries,
                                   pool=pool, fit_sample=fit_sample, method=method, seed=seed, rerank=rerank,
                                   on_step=on_step, on_start=on_start, on_progress=on_progress)
        per_text = predicted["encode_seconds"] / predicted["texts_encoded"]   # the larger measurement
    return {"source": src.display_url, "count": info.count, "dim": info.dim, "model": model,
            "texts_sampled": len(records), "with_text": with_text, "seconds_per_text": per_text,
            "full_reembed_seconds": per_text * info.count * with_text, "predicted": predicted,
            "stages": ["start: fit the map on a re-embedded sample, write mapped vectors beside the old ones",
                       "reembed: replace mapped vectors by native ones in the background (resumable)",
                       "cutover: serve the new model's vectors; rollback at any time until finalize"],
            "model_run": models.summary()}
