"""The shared corpora every quality benchmark reads: ``<corpus>/<model>_<kind>.npy`` under ``DATA`` (``kind``: docs
or queries; rows are the same items, in the same order, for every model of a corpus)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
#: the corpora every quality figure is measured on
CORPORA = ("wordnet", "foldoc")
#: the sentence-encoder pairs the upgrade benchmarks run: both directions of MiniLM-L6 <-> MPNet and MiniLM-L6 <-> L3
UPGRADE_PAIRS = [("minilm6", "mpnet"), ("mpnet", "minilm6"), ("minilm6", "minilm3"), ("minilm3", "minilm6")]
#: every ordered pair of the three sentence encoders
SENTENCE_PAIRS = UPGRADE_PAIRS + [("minilm3", "mpnet"), ("mpnet", "minilm3")]


def embeddings(folder: Path, model: str, kind: str = "docs") -> np.ndarray:
    """One model's vectors of one corpus folder, float32."""
    return np.load(Path(folder) / f"{model}_{kind}.npy").astype(np.float32)
