"""The main job on an embedded default: upgrade a small real collection from MiniLM to MPNet without re-embedding it.

Story (all real vectors from the bundled WordNet sample, nothing synthetic):

1. OLD: a ``file://`` collection of 1,500 glosses embedded with all-MiniLM-L6-v2 (384-d), texts in the payloads.
2. The team re-embeds a small sample (the first 1,000 items) with all-mpnet-base-v2 (768-d).
3. vecbridge fits an orthogonal map on those 1,000 pairs (shared ids) and saves ``align.vb``.
4. It then measures what a user keeps on the 500 items it never saw: MPNet queries searched over the *mapped* old
   vectors versus over a full MPNet re-embed (recall retention@10, top-10 overlap), next to staying on MiniLM.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from . import metrics
from .align.artifact import Alignment
from .align.workflow import fit_alignment
from .connectors import VectorBatch, connect
from .sample import N_ITEMS, N_QUERIES, NEW_MODEL, OLD_MODEL, load_wordnet_sample

N_FIT = N_ITEMS - N_QUERIES


def _write(url: str, ids, vectors, payloads=None):
    coll = connect(url)
    if coll.exists():
        coll.drop()
    coll.create(dim=vectors.shape[1], metric="cosine")
    coll.upsert(VectorBatch(ids, vectors, payloads))
    return coll


def run_demo(workdir, *, step: Callable[[str], None] = lambda s: None) -> dict:
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    s = load_wordnet_sample()
    step("building the embedded OLD collection (1,500 real MiniLM vectors)")
    old = _write(f"file://{workdir / 'old'}", s.ids, s.docs_old,
                 [{"text": it["doc"], "pos": it["pos"]} for it in s.items])
    step(f"taking the paired sample: {N_FIT} items already re-embedded with the new model (MPNet, precomputed)")
    sample_new = _write(f"file://{workdir / 'new_sample'}", s.ids[:N_FIT], s.docs_new[:N_FIT])
    step("fitting the orthogonal map on shared ids")
    alignment = fit_alignment(old, sample_new, pairs="ids", source_model=OLD_MODEL, target_model=NEW_MODEL)
    path = alignment.save(workdir / "align.vb")
    alignment = Alignment.load(path)

    step("measuring retrieval on the 500 held-out items")
    mapped = alignment.transform(s.docs_old)
    rel = s.query_rows
    held = np.arange(N_FIT, N_ITEMS)
    stay = metrics.recall_at_k(s.queries_old, s.docs_old, rel, 10)
    native = metrics.recall_at_k(s.queries_new, s.docs_new, rel, 10)
    upgraded = metrics.recall_at_k(s.queries_new, mapped, rel, 10)
    unmapped = metrics.recall_at_k(s.queries_new, np.pad(s.docs_old, ((0, 0), (0, 384))), rel, 10)
    pq = metrics.pair_quality(mapped[held], s.docs_new[held])
    return {
        "workdir": str(workdir),
        "old_collection": old.display_url,
        "alignment": str(path),
        "fit": {k: alignment.metadata["fit"][k] for k in ("n_pairs", "residual", "delta", "bound")},
        "held_out_pairs": pq.as_dict(),
        "recall_at_10": {"stay_on_old_model": stay, "new_queries_no_map": unmapped,
                         "new_queries_mapped_old_vectors": upgraded, "full_re_embed": native},
        "recall_retention_at_10": upgraded / native,
        "top10_overlap": metrics.topk_overlap(s.queries_new, mapped, s.docs_new, 10),
        "items_re_embedded": N_FIT,
        "items_total": N_ITEMS,
    }
