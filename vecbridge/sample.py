"""The small real sample bundled with vecbridge (see ``scripts/make_sample.py`` for its provenance).

1,500 WordNet 3.0 synsets: the gloss ("doc") of each embedded by all-MiniLM-L6-v2 (384-d, the *old* model) and
all-mpnet-base-v2 (768-d, the *new* model), raw float16 outputs; the lemma-list query of the last 500 items under
both models (query i is relevant to doc ``1000 + i``). Used by ``vecbridge demo`` and by the tests that must pass
on a fresh clone.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

import numpy as np

from .errors import InputError

N_ITEMS = 1500
N_QUERIES = 500
OLD_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
NEW_MODEL = "sentence-transformers/all-mpnet-base-v2"


@dataclass
class WordnetSample:
    ids: list[str]
    items: list[dict]
    docs_old: np.ndarray          # (1500, 384) all-MiniLM-L6-v2
    docs_new: np.ndarray          # (1500, 768) all-mpnet-base-v2
    queries_old: np.ndarray       # (500, 384) queries of items 1000..1499
    queries_new: np.ndarray       # (500, 768)

    @property
    def query_rows(self) -> np.ndarray:
        """Row of the relevant doc for each query."""
        return np.arange(N_ITEMS - N_QUERIES, N_ITEMS)


def load_wordnet_sample(dtype=np.float32) -> WordnetSample:
    root = resources.files("vecbridge") / "data" / "wordnet_sample"
    with (root / "vectors.npz").open("rb") as fh, np.load(fh, allow_pickle=False) as z:
        arrays = {k: z[k].astype(dtype) for k in z.files}
    with (root / "items.jsonl").open("r", encoding="utf-8") as fh:
        items = [json.loads(line) for line in fh]
    return WordnetSample(ids=[it["id"] for it in items], items=items, docs_old=arrays["docs_minilm6"],
                         docs_new=arrays["docs_mpnet"], queries_old=arrays["queries_minilm6"],
                         queries_new=arrays["queries_mpnet"])


@functools.lru_cache(maxsize=1)
def _recorded_outputs() -> tuple[dict, dict]:
    s = load_wordnet_sample()
    old = {it["doc"]: v for it, v in zip(s.items, s.docs_old)}
    new = {it["doc"]: v for it, v in zip(s.items, s.docs_new)}
    for row, q_old, q_new in zip(s.query_rows, s.queries_old, s.queries_new):
        old.setdefault(s.items[row]["query"], q_old)
        new.setdefault(s.items[row]["query"], q_new)
    return old, new


def _lookup(table: dict, texts, model: str) -> np.ndarray:
    try:
        return np.stack([table[t] for t in texts])
    except KeyError as exc:
        raise InputError(f"{model} (the bundled sample's recorded outputs) knows only the sample's own texts and "
                         f"queries, not {exc.args[0]!r}") from None


def recorded_old_model(texts) -> np.ndarray:
    """all-MiniLM-L6-v2's recorded output for each text of the bundled sample (its glosses and queries): the demo's
    old model as a ``module:function`` (``vecbridge.sample:recorded_old_model``), offline and instant."""
    return _lookup(_recorded_outputs()[0], texts, OLD_MODEL)


def recorded_new_model(texts) -> np.ndarray:
    """all-mpnet-base-v2's recorded output for each text of the bundled sample: the demo's new model."""
    return _lookup(_recorded_outputs()[1], texts, NEW_MODEL)
