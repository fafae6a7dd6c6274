"""``vecbridge link``: obtain correspondences between two collections with any mode, as a :class:`Links` file."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..connectors.base import Collection, VectorBatch
from ..errors import InputError
from .keys import pairs_by_field, pairs_by_ids, pairs_from_list, read_pairs_file
from .links import Links

MODES = ("ids", "field:NAME", "pairs:FILE", "reembed", "reference:FILE", "geh", "unsupervised")


def _optional(module: str, name: str):
    """A linking estimator that may not be part of this build yet: a clear error instead of an ImportError."""
    import importlib

    try:
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)
    except ImportError:
        raise InputError(f"{name} is not available in this version of vecbridge yet") from None


def _id_links(parts, mode: str) -> Links:
    src = [i for a, _ in parts for i in a.ids]
    tgt = [i for _, b in parts for i in b.ids]
    return Links(src, tgt, np.ones(len(src), dtype=np.float32), mode)


def _with_seeds(coll: Collection, sample: int, seed: int, seed_ids: list) -> VectorBatch:
    """The seed records first (in the seed file's order), then a uniform sample of the rest."""
    seeds = coll.get(seed_ids)
    if len(seeds) != len(seed_ids):
        missing = [i for i in seed_ids if i not in set(seeds.ids)][:3]
        raise InputError(f"{len(seed_ids) - len(seeds)} seed ids are missing from {coll.display_url} "
                         f"(e.g. {missing})")
    rest = coll.sample(sample, seed=seed)
    keep = np.array([i not in set(seed_ids) for i in rest.ids], dtype=bool)
    return VectorBatch.concat([seeds, rest.take(keep)])


def link(source: Collection, target: Collection | None, mode: str, *, seeds: str | None = None,
         model: str | None = None, old_model: str | None = None, text_field: str = "text", sample: int = 10_000,
         seed: int = 0, on_step: Callable[[str], None] = lambda s: None) -> Links:
    """Correspondences between ``source`` (old model) and ``target`` (new model) by ``mode`` (see :data:`MODES`)."""
    if mode == "ids":
        return _id_links(list(pairs_by_ids(source, target, limit=sample, seed=seed)), "ids")
    if mode.startswith("field:"):
        return _id_links(list(pairs_by_field(source, target, mode[6:], limit=sample, seed=seed)), mode)
    if mode.startswith("pairs:"):
        return _id_links(list(pairs_from_list(source, target, read_pairs_file(mode[6:]))), "pairs")
    if mode == "reembed":
        from .reembed import load_model, reembed_pairs

        if not model:
            raise InputError("--mode reembed needs --model (the new model: name, local path or module:function)")
        on_step(f"re-embedding up to {sample:,} stored texts ({text_field!r}) with {model}")
        olds, news = reembed_pairs(source, load_model(model), text_field=text_field, n=sample, seed=seed)
        return Links(list(olds.ids), [f"reembed:{i}" for i in olds.ids], np.ones(len(olds), np.float32), "reembed",
                     olds.vectors, news, {"model": model, "text_field": text_field})
    if mode.startswith("reference:"):
        from .reembed import load_model, read_texts, reference_pairs

        if not (model and old_model):
            raise InputError("--mode reference:FILE needs --old-model and --model (both encoders)")
        texts = read_texts(mode[10:], limit=sample)
        on_step(f"embedding {len(texts):,} reference texts with both models")
        X, Y = reference_pairs(texts, load_model(old_model), load_model(model))
        ids = [f"ref:{j}" for j in range(len(texts))]
        return Links(ids, ids, np.ones(len(ids), np.float32), "reference", X, Y,
                     {"model": model, "old_model": old_model})
    if target is None:
        raise InputError(f"--mode {mode} needs a target collection")
    if mode == "geh":
        GEH = _optional("geh", "GEH")

        if not seeds:
            raise InputError("--mode geh needs --seeds FILE (15-30 known id pairs)")
        pairs = read_pairs_file(seeds)
        a = _with_seeds(source, sample, seed, [p[0] for p in pairs])
        b = _with_seeds(target, sample, seed, [p[1] for p in pairs])
        on_step(f"growing {len(pairs)} seed pairs with GEH over {len(a):,} x {len(b):,} vectors")
        idx = np.arange(len(pairs))
        geh = GEH(random_state=seed).fit(a.vectors, b.vectors, np.stack([idx, idx], axis=1))
        return Links([a.ids[i] for i in geh.links_[:, 0]], [b.ids[j] for j in geh.links_[:, 1]],
                     np.asarray(geh.confidence_, np.float32), "geh", meta={"n_seeds": len(pairs)})
    if mode == "unsupervised":
        from .neighbors import mutual_nearest_neighbours

        MiniVec2Vec = _optional("minivec2vec", "MiniVec2Vec")

        a, b = source.sample(sample, seed=seed), target.sample(sample, seed=seed + 1)
        on_step(f"unsupervised alignment (mini-vec2vec) of {len(a):,} and {len(b):,} vectors")
        est = MiniVec2Vec(random_state=seed).fit(a.vectors, b.vectors)
        pairs, scores = mutual_nearest_neighbours(est.transform(a.vectors), b.vectors)
        conf = np.clip((scores + 1) / 2, 0, 1).astype(np.float32)     # CSLS in [-1, 1] -> [0, 1]
        return Links([a.ids[i] for i in pairs[:, 0]], [b.ids[j] for j in pairs[:, 1]], conf, "unsupervised")
    raise InputError(f"unknown --mode {mode!r} (choose from {', '.join(MODES)})")
