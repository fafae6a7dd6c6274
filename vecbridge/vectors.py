"""Small vector utilities used across the package (one place, so every module normalises the same way)."""
from __future__ import annotations

import numpy as np


def l2_normalize(X, dtype=None) -> np.ndarray:
    """Rows scaled to unit L2 norm; zero rows stay zero (they have no direction to keep).

    ``dtype`` defaults to float64 for float64 input and float32 otherwise.
    """
    X = np.asarray(X)
    if dtype is None:
        dtype = np.float64 if X.dtype == np.float64 else np.float32
    X = X.astype(dtype, copy=False)
    norms = np.linalg.norm(X, axis=-1, keepdims=True)
    return X / np.where(norms > 0, norms, 1.0)
