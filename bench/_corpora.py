"""The shared corpora every quality benchmark reads: ``<corpus>/<model>_<kind>.npy`` under ``DATA`` (``kind``: docs
or queries; rows are the same items, in the same order, for every model of a corpus)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def embeddings(folder: Path, model: str, kind: str = "docs") -> np.ndarray:
    """One model's vectors of one corpus folder, float32."""
    return np.load(Path(folder) / f"{model}_{kind}.npy").astype(np.float32)
