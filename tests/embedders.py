"""Deterministic ``module:function`` embedders for tests: the real MPNet vectors of the bundled sample, by text."""
from __future__ import annotations

import numpy as np

from vecbridge.sample import load_wordnet_sample

_s = load_wordnet_sample()
_TABLE = {it["doc"]: v for it, v in zip(_s.items, _s.docs_new)}


def mpnet_lookup(texts):
    """all-mpnet-base-v2's stored embedding of each known gloss (what the real model returned for it)."""
    return np.stack([_TABLE[t] for t in texts])


_OLD = {it["doc"]: v for it, v in zip(_s.items, _s.docs_old)}


def minilm_lookup(texts):
    """all-MiniLM-L6-v2's stored embedding of each known gloss (the sample's old model)."""
    return np.stack([_OLD[t] for t in texts])
