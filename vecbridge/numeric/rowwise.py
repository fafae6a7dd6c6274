"""Matrix products whose every row is a function of that row alone: the same bits whatever batch the row falls in,
whatever BLAS kernel, thread count or processor computes it.

A float32 ``X @ M`` from BLAS rounds differently depending on how the kernel blocks the rows (a tail block of 7 rows
takes another code path than a full one), on the thread count, and on which kernel the processor selects, so a
record's mapped vector would depend on its neighbours in its batch, and a resumed migration or one split over Ray
tasks would write other bits than a single pass. :class:`AffineRows` removes the rounding instead of hoping the
kernel does not round differently: each row of ``X`` is scaled by a power of two (so its largest entry lies in
[2^(B-1), 2^B)) and rounded to integers, each column of ``M`` likewise with ``C`` bits, and ``B + C + log2(d) <= 53``.
Every product and every partial sum of the float64 matrix product is then an integer below 2^53, so BLAS computes
it *exactly*, in any order, blocking or thread split. Scaling back by powers of two is exact too, and the offset is
added and the result rounded to float32 element by element. The rounding of the inputs to ``B`` and ``C`` bits
(21-22 for 384-1,024 dimensions) costs about what float32 accumulation costs a plain BLAS product (measured in
``bench/rowwise.py``), at about twice a float32 product's time.
"""
from __future__ import annotations

import math

import numpy as np

_CHUNK = 4096            # rows per BLAS call: bounds the float64 temporaries


def exact_offset(matrix: np.ndarray, mean_in: np.ndarray, mean_out: np.ndarray) -> np.ndarray:
    """``mean_out - mean_in @ matrix`` with each element a correctly rounded sum (``math.fsum``): the same bits on
    every machine, unlike a BLAS product whose rounding depends on the kernel."""
    M = np.asarray(matrix, dtype=np.float64)
    mu = np.asarray(mean_in, dtype=np.float64)
    out = np.asarray(mean_out, dtype=np.float64)
    if not mu.any():
        return out.copy()
    terms = -(mu[:, None] * M)          # (d, k): every product rounded once, IEEE
    return np.array([math.fsum([out[k], *terms[:, k].tolist()]) for k in range(M.shape[1])])


def _round_bits(A: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """``A`` rounded to multiples of ``2^(e - bits)``, ``e`` the exponent of the largest entry along ``axis`` (so
    every entry is an integer of at most ``bits`` bits times a power of two shared along ``axis``). Round half to
    even via ``(a + K) - K`` with ``K = 1.5 * 2^(e - bits + 52)``: two exact IEEE steps, no library rounding."""
    peak = np.max(np.abs(A), axis=axis, keepdims=True)
    _, exponent = np.frexp(peak)                   # peak < 2^exponent (0 for a zero row or column)
    K = np.ldexp(1.5, exponent.astype(np.int32) + (52 - bits))
    out = A + K
    out -= K
    return out


class AffineRows:
    """``float32(X @ matrix + offset)`` with each output row a function of its input row alone (see the module).

    ``matrix``: (d, k); ``offset``: (k,) or None. Call with (n, d) float32 or float16 rows (float64 rows are taken
    as given); returns (n, k) float32. Non-finite rows are the caller's to refuse.
    """

    def __init__(self, matrix: np.ndarray, offset: np.ndarray | None = None):
        M = np.asarray(matrix, dtype=np.float64)
        if M.ndim != 2 or not np.isfinite(M).all():
            raise ValueError("matrix must be a finite 2-D array")
        d, k = M.shape
        budget = 53 - max(1, math.ceil(math.log2(max(d, 2))))
        self.row_bits = budget // 2 + budget % 2
        self.col_bits = budget // 2
        self.matrix = _round_bits(M, self.col_bits, axis=0)
        self.offset = np.zeros(k) if offset is None else np.asarray(offset, dtype=np.float64).reshape(k)
        self.shape = (d, k)

    def __call__(self, X) -> np.ndarray:
        X = np.asarray(X)
        n = X.shape[0]
        out = np.empty((n, self.shape[1]), dtype=np.float32)
        for start in range(0, n, _CHUNK):
            Xr = _round_bits(X[start:start + _CHUNK].astype(np.float64), self.row_bits, axis=1)
            Y = Xr @ self.matrix      # exact: each term and partial sum an integer below 2^53 times 2^(e_i + f_k)
            Y += self.offset          # one rounding per element
            out[start:start + _CHUNK] = Y
        return out


class RowStableProducts:
    """``product(V, M, offset=None)``: float32 rows through one :class:`AffineRows` per matrix, built once and kept
    (the matrices are an artifact's fixed tensors), anything else by BLAS. For maps made of several products (the
    clustered map), whose other steps already work row by row."""

    def __init__(self):
        self._maps: dict = {}

    def __call__(self, V: np.ndarray, M: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        if V.dtype != np.float32:
            out = V @ M
            return out if offset is None else out + offset
        key = (_where(M), None if offset is None else _where(offset))
        if key not in self._maps:   # the arrays are kept with their map, so their memory is never reused
            self._maps[key] = (M, offset, AffineRows(M, offset))
        return self._maps[key][2](V)


def _where(a: np.ndarray) -> tuple:
    return a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str
