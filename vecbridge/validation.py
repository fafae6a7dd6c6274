"""Input checks shared by every estimator and writer: refuse bad vectors early with one clear sentence."""
from __future__ import annotations

import numpy as np

from .errors import InputError


def check_vectors(X, name: str = "X", *, dim: int | None = None, allow_zero_rows: bool = False,
                  dtype=np.float64, ids=None) -> np.ndarray:
    """Return ``X`` as a 2-D finite array of ``dtype``; raise :class:`InputError` naming the first bad row.

    With ``ids`` (the record id of each row) the error names the record, which is what a user can look up
    (``"source record 'abc' has a NaN or inf vector"``); without them, the row number.

    Zero rows are refused by default: they carry no direction, so they cannot anchor an alignment and their cosine
    is undefined (a typical cause is a text with no known token, e.g. GloVe on an out-of-vocabulary string).
    """
    arr = np.asarray(X)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise InputError(f"{name}: expected numeric vectors, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise InputError(f"{name}: expected a 2-D array (n_vectors, dim), got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise InputError(f"{name}: no vectors (0 rows)")
    if arr.shape[1] == 0:
        raise InputError(f"{name}: vectors have dimension 0")
    if dim is not None and arr.shape[1] != dim:
        raise InputError(f"{name}: dimension {arr.shape[1]} does not match the expected {dim}")
    arr = arr.astype(dtype, copy=False)
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        n_bad = int((~finite).sum())
        if ids is not None:
            raise InputError(f"{name} record {_id_of(ids, row)!r} has a NaN or inf vector "
                             f"({n_bad} such record{'s' if n_bad != 1 else ''} in all)")
        raise InputError(f"{name}: row {row} contains NaN or inf ({n_bad} bad rows in all)")
    if not allow_zero_rows:
        zero = ~arr.any(axis=1)
        if zero.any():
            row = int(np.flatnonzero(zero)[0])
            n_zero = int(zero.sum())
            if ids is not None:
                raise InputError(f"{name} record {_id_of(ids, row)!r} is all zeros "
                                 f"({n_zero} such record{'s' if n_zero != 1 else ''} in all)")
            raise InputError(f"{name}: row {row} is all zeros ({n_zero} zero rows in all)")
    return arr


def _id_of(ids, row: int):
    i = ids[row]
    return i.item() if isinstance(i, np.generic) else i


def check_paired(X, Y, *, names=("X_src", "Y_tgt"), src_dim: int | None = None, tgt_dim: int | None = None,
                 ids=None):
    """Validate a pair of row-aligned matrices: same number of rows, each finite and non-zero.
    ``ids``: ``(source ids, target ids)`` of the rows, so that an error names the record."""
    X = check_vectors(X, names[0], dim=src_dim, ids=None if ids is None else ids[0])
    Y = check_vectors(Y, names[1], dim=tgt_dim, ids=None if ids is None else ids[1])
    if X.shape[0] != Y.shape[0]:
        raise InputError(f"{names[0]} has {X.shape[0]} rows but {names[1]} has {Y.shape[0]}: pairs must be row-aligned")
    return X, Y
