"""The main job on an embedded default: upgrade a real collection from MiniLM to MPNet without re-embedding it.

Story (real vectors from the bundled WordNet sample, nothing synthetic):

1. OLD: a ``file://`` collection of 1,500 glosses embedded with all-MiniLM-L6-v2 (384-d), texts in the payloads.
2. The team re-embeds a small sample (1,000 items) with all-mpnet-base-v2 (768-d); vecbridge fits an orthogonal
   map on those pairs (shared ids) and saves ``align.vb``.
3. ``migrate`` rewrites OLD into NEW (768-d, same ids and payloads), resumably; ``verify`` checks it.
4. Retrieval with MPNet queries for the 500 items the fit never saw, through the stores' own search: over NEW
   (migrated), over OLD wrapped (queries translated, nothing rewritten), against a full MPNet re-embed (the
   reference a user would otherwise pay for) and against staying on MiniLM. Recall retention@10 and top-10 overlap
   are as defined in :mod:`vecbridge.metrics`.
5. The safe path: ``vecbridge upgrade`` on OLD in stages — start (map everything, re-embed a fit sample), then
   re-embed 50%, 75%, 100% of the texts — with the served Recall@10 at each stage, new-model queries alone and
   fused with old-model queries, ending at the full re-embed's level. The models are the sample's recorded outputs
   (:func:`vecbridge.sample.recorded_new_model`), so the demo runs offline in seconds.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ..align.artifact import Alignment
from ..connectors import VectorBatch, connect
from ..sample import N_ITEMS, N_QUERIES, NEW_MODEL, OLD_MODEL, load_wordnet_sample
from ..serving.wrap import wrap
from .fit import fit_alignment
from .rewrite import migrate
from .upgrade import Upgrade, start
from .verify import verify

N_FIT = N_ITEMS - N_QUERIES


def _write(url: str, ids, vectors, payloads=None):
    coll = connect(url)
    if coll.exists():
        coll.drop()
    coll.create(dim=vectors.shape[1], metric="cosine")
    coll.upsert(VectorBatch(ids, vectors, payloads))
    return coll


def _recall(ids_per_query: list[list], relevant: list, k: int = 10) -> float:
    return float(np.mean([rel in row[:k] for row, rel in zip(ids_per_query, relevant)]))


def _overlap(a: list[list], b: list[list], k: int = 10) -> float:
    return float(np.mean([len(set(x[:k]) & set(y[:k])) / k for x, y in zip(a, b)]))


def run_demo(workdir, *, step: Callable[[str], None] = lambda s: None) -> dict:
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    for stale in workdir.glob("align.vb*"):
        stale.unlink()
    s = load_wordnet_sample()
    step(f"writing the demo's collections, alignment and upgrade state into {workdir} (about 35 MB; delete the "
         f"folder when done)")
    step("building the embedded OLD collection: 1,500 real all-MiniLM-L6-v2 vectors with their texts")
    old = _write(f"file://{workdir / 'old'}", s.ids, s.docs_old,
                 [{"text": it["doc"], "pos": it["pos"]} for it in s.items])
    step(f"paired sample: {N_FIT} of the items re-embedded with all-mpnet-base-v2 (precomputed)")
    sample_new = _write(f"file://{workdir / 'new_sample'}", s.ids[:N_FIT], s.docs_new[:N_FIT])
    step("fitting the orthogonal map on shared ids")
    alignment = fit_alignment(old, sample_new, pairs="ids", source_model=OLD_MODEL, target_model=NEW_MODEL)
    path = alignment.save(workdir / "align.vb")
    step("migrating OLD -> NEW (768-d) and verifying")
    new_url = f"file://{workdir / 'new'}"
    if connect(new_url).exists():
        connect(new_url).drop()
    migration = migrate(old.url, path, new_url)
    check = verify(old.url, new_url, path)

    step("searching with MPNet queries for the 500 held-out items")
    reference = _write(f"file://{workdir / 'reference_full_reembed'}", s.ids, s.docs_new)
    relevant = [s.ids[r] for r in s.query_rows]
    new = connect(new_url)
    k = 10
    via_new, _ = new.search(s.queries_new, k)
    via_wrap, _ = wrap(connect(old.url, read_only=True), Alignment.load(path)).search(s.queries_new, k)
    via_ref, _ = reference.search(s.queries_new, k)
    via_old, _ = old.search(s.queries_old, k)
    via_nomap, _ = old.search(s.queries_new[:, :384], k)   # what happens if nothing is done (dims truncated)
    recall = {"stay_on_old_model": _recall(via_old, relevant), "new_queries_no_map": _recall(via_nomap, relevant),
              "new_queries_migrated": _recall(via_new, relevant), "new_queries_wrapped": _recall(via_wrap, relevant),
              "full_re_embed": _recall(via_ref, relevant)}
    stages = _upgrade_in_stages(workdir, old.url, s, relevant, step)
    return {
        "workdir": str(workdir),
        "old_collection": old.display_url,
        "new_collection": new.display_url,
        "alignment": str(path),
        "fit": {k_: alignment.metadata["fit"][k_] for k_ in ("n_pairs", "residual", "delta", "bound")},
        "migration": {"written": migration["written"], "seconds": migration["seconds"], "verified": check["ok"]},
        "recall_at_10": recall,
        "recall_retention_at_10": recall["new_queries_migrated"] / recall["full_re_embed"],
        "top10_overlap": _overlap(via_new, via_ref),
        "wrapped_equals_migrated": via_wrap == via_new,
        "items_re_embedded": N_FIT,
        "items_total": N_ITEMS,
        "upgrade_stages": stages,
        "workdir_bytes": sum(f.stat().st_size for f in workdir.rglob("*") if f.is_file()),
    }


def _upgrade_in_stages(workdir: Path, old_url: str, s, relevant: list, step) -> list[dict]:
    """Run ``vecbridge upgrade`` on OLD and measure what it serves after each stage."""
    state = workdir / "upgrade.sqlite"
    for stale in [state, *workdir.glob("upgrade.sqlite*"), *workdir.glob("upgrade.align.vb")]:
        stale.unlink(missing_ok=True)
    if connect(f"file://{workdir / 'upgraded'}").exists():
        connect(f"file://{workdir / 'upgraded'}").drop()
    step("upgrade: start (fit on 500 re-embedded texts, map the rest), then re-embed in the background")
    start(old_url, model="vecbridge.sample:recorded_new_model", text_field="text", state_path=state,
          to=f"file://{workdir / 'upgraded'}", fit_sample=500)
    queries = [s.items[r]["query"] for r in s.query_rows]
    stages = []
    with Upgrade.open(state) as up:
        for until in (None, 0.5, 0.75, 1.0):
            if until is not None:
                up.reembed(until=until)
            served, _ = up.search(queries, 10)
            fused, _ = up.search(queries, 10, old_model="vecbridge.sample:recorded_old_model")
            stages.append({"native_fraction": up.status()["native_fraction"], "recall_new_queries": _recall(
                served, relevant), "recall_fused": _recall(fused, relevant)})
    return stages
