"""Nearest-neighbour machinery shared by every linking mode: chunked kNN, CSLS, mutual nearest neighbours.

Everything works block by block (``max_block_bytes`` of scores at a time) so 100k x 100k never materialises an
N x N matrix. When ``faiss`` is installed (``pip install "vecbridge[faiss]"``) exact inner-product search uses it;
otherwise numpy BLAS does the same computation. Both give the same neighbours up to float32 ties.

CSLS (cross-domain similarity local scaling, Lample et al. 2018, as used by seed 003's GEH):
``CSLS(x, y) = 2 cos(x, y) - r_Y(x) - r_X(y)``, where ``r_Y(x)`` is the mean cosine of x to its ``k`` nearest
neighbours in Y (and ``r_X(y)`` likewise). It penalises "hub" points that are close to everything.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..vectors import l2_normalize

DEFAULT_BLOCK_BYTES = 64 * 2**20


def _faiss():
    try:
        import faiss  # noqa: F401

        return faiss
    except ImportError:
        return None


def _rows_per_block(n_cols: int, max_block_bytes: int) -> int:
    return max(1, max_block_bytes // (4 * max(n_cols, 1)))


def knn(queries, base, k: int, *, normalize: bool = True, exclude_self: bool = False, backend: str = "auto",
        max_block_bytes: int = DEFAULT_BLOCK_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most similar rows of ``base`` for every query by inner product (cosine when ``normalize``).

    Returns ``(indices, similarities)``, both (n_queries, k), best first. ``exclude_self`` drops index i from
    query i's list (for kNN within one set). ``backend``: ``"auto"`` (faiss if installed), ``"faiss"``, ``"numpy"``.
    """
    Q = l2_normalize(queries) if normalize else np.asarray(queries, dtype=np.float32)
    B = l2_normalize(base) if normalize else np.asarray(base, dtype=np.float32)
    if Q.ndim != 2 or B.ndim != 2 or Q.shape[1] != B.shape[1]:
        raise InputError(f"knn: incompatible shapes {Q.shape} and {B.shape}")
    k_eff = min(k + int(exclude_self), B.shape[0])
    faiss = _faiss() if backend in ("auto", "faiss") else None
    if backend == "faiss" and faiss is None:
        raise InputError('backend "faiss" needs faiss: pip install "vecbridge[faiss]"')
    if faiss is not None:
        index = faiss.IndexFlatIP(B.shape[1])
        index.add(np.ascontiguousarray(B, dtype=np.float32))
        sims, idx = index.search(np.ascontiguousarray(Q, dtype=np.float32), k_eff)
    else:
        idx = np.empty((Q.shape[0], k_eff), dtype=np.int64)
        sims = np.empty((Q.shape[0], k_eff), dtype=np.float32)
        step = _rows_per_block(B.shape[0], max_block_bytes)
        for lo in range(0, Q.shape[0], step):
            S = Q[lo:lo + step] @ B.T
            part = np.argpartition(-S, k_eff - 1, axis=1)[:, :k_eff] if k_eff < B.shape[0] else \
                np.tile(np.arange(B.shape[0]), (S.shape[0], 1))
            ps = np.take_along_axis(S, part, axis=1)
            order = np.argsort(-ps, axis=1, kind="stable")
            idx[lo:lo + step] = np.take_along_axis(part, order, axis=1)
            sims[lo:lo + step] = np.take_along_axis(ps, order, axis=1)
    if exclude_self:
        keep = idx != np.arange(idx.shape[0])[:, None]
        keep[keep.all(axis=1), -1] = False  # self not among them: drop the worst instead
        idx = idx[keep].reshape(idx.shape[0], -1)[:, :k]
        sims = sims[keep].reshape(sims.shape[0], -1)[:, :k]
    return idx.astype(np.int64), sims.astype(np.float32)


def mean_knn_similarity(queries, base, k: int, **kw) -> np.ndarray:
    """r_B(q): the mean cosine of each query to its ``k`` nearest rows of ``base`` (CSLS's hubness term)."""
    return knn(queries, base, k, **kw)[1].mean(axis=1)


def csls_best(X, Y, k: int = 10, *, max_block_bytes: int = DEFAULT_BLOCK_BYTES, r_x=None, r_y=None):
    """For every row of X, its best row of Y under CSLS, and for every row of Y its best row of X.

    Returns ``(best_y_for_x, score_x, best_x_for_y, score_y)``. ``r_x``/``r_y`` (the hubness terms) can be passed in
    when already known. X and Y must live in one space (cosine is taken after L2 normalisation).
    """
    Xn, Yn = l2_normalize(X), l2_normalize(Y)
    if r_y is None:
        r_y = mean_knn_similarity(Xn, Yn, k, normalize=False)     # r_Y(x) for every x
    if r_x is None:
        r_x = mean_knn_similarity(Yn, Xn, k, normalize=False)     # r_X(y) for every y
    best_y = np.empty(len(Xn), dtype=np.int64)
    score_x = np.empty(len(Xn), dtype=np.float32)
    best_x = np.full(len(Yn), -1, dtype=np.int64)
    score_y = np.full(len(Yn), -np.inf, dtype=np.float32)
    step = _rows_per_block(len(Yn), max_block_bytes)
    for lo in range(0, len(Xn), step):
        S = 2.0 * (Xn[lo:lo + step] @ Yn.T) - r_x[None, :] - r_y[lo:lo + step, None]
        j = S.argmax(axis=1)
        best_y[lo:lo + step] = j
        score_x[lo:lo + step] = S[np.arange(len(j)), j]
        i = S.argmax(axis=0)
        col = S[i, np.arange(S.shape[1])]
        better = col > score_y
        best_x[better] = i[better] + lo
        score_y[better] = col[better]
    return best_y, score_x, best_x, score_y


def mutual_nearest_neighbours(X, Y, *, k_csls: int | None = 10, max_block_bytes: int = DEFAULT_BLOCK_BYTES):
    """Pairs (i, j) where Y[j] is X[i]'s best match and X[i] is Y[j]'s best match (CSLS, or plain cosine if
    ``k_csls`` is None). Returns ``(pairs (m, 2), scores (m,))``."""
    if k_csls:
        best_y, score_x, best_x, _ = csls_best(X, Y, k_csls, max_block_bytes=max_block_bytes)
    else:
        zeros_x, zeros_y = np.zeros(len(X), np.float32), np.zeros(len(Y), np.float32)
        best_y, score_x, best_x, _ = csls_best(X, Y, 1, max_block_bytes=max_block_bytes, r_x=zeros_y, r_y=zeros_x)
    i = np.arange(len(best_y))
    mutual = best_x[best_y] == i
    return np.stack([i[mutual], best_y[mutual]], axis=1), score_x[mutual]
