"""Nearest-neighbour machinery shared by every linking mode: chunked kNN, CSLS, mutual nearest neighbours.

Everything works block by block (``max_block_bytes`` of scores at a time) so 100k x 100k never materialises an
N x N matrix. When ``faiss`` is installed (``pip install "vecbridge[faiss]"``) exact inner-product search uses it;
otherwise numpy BLAS does the same computation. ``backend="torch"`` runs the blocks on a GPU when torch sees one
(CPU otherwise; ``pip install "vecbridge[torch]"``), and ``"auto"`` picks it only when torch is already imported and
a GPU is present, so nothing ever requires one. All give the same neighbours up to float32 ties.

CSLS (cross-domain similarity local scaling, Lample et al. 2018, as used by the Vector Linking paper's GEH):
``CSLS(x, y) = 2 cos(x, y) - r_Y(x) - r_X(y)``, where ``r_Y(x)`` is the mean cosine of x to its ``k`` nearest
neighbours in Y (and ``r_X(y)`` likewise). It penalises "hub" points that are close to everything.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..vectors import l2_normalize

DEFAULT_BLOCK_BYTES = 64 * 2**20
BACKENDS = ("auto", "faiss", "numpy", "torch")


def _faiss():
    try:
        import faiss  # noqa: F401

        return faiss
    except ImportError:
        return None


def _torch_device():
    """``(torch, device)`` for the torch backend, or None when torch is not installed."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return torch, ("cuda" if torch.cuda.is_available() else "cpu")


def _auto_gpu() -> bool:
    import sys

    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available())


def _knn_torch(Q, B, k_eff: int, max_block_bytes: int):
    found = _torch_device()
    if found is None:
        raise InputError('backend "torch" needs torch: pip install "vecbridge[torch]"')
    torch, device = found
    Bt = torch.from_numpy(np.ascontiguousarray(B, dtype=np.float32)).to(device)
    idx = np.empty((Q.shape[0], k_eff), dtype=np.int64)
    sims = np.empty((Q.shape[0], k_eff), dtype=np.float32)
    step = _rows_per_block(B.shape[0], max_block_bytes)
    for lo in range(0, Q.shape[0], step):
        Qt = torch.from_numpy(np.ascontiguousarray(Q[lo:lo + step], dtype=np.float32)).to(device)
        top = torch.topk(Qt @ Bt.T, k_eff, dim=1, largest=True, sorted=True)
        sims[lo:lo + step] = top.values.cpu().numpy()
        idx[lo:lo + step] = top.indices.cpu().numpy()
    return idx, sims


def _rows_per_block(n_cols: int, max_block_bytes: int) -> int:
    return max(1, max_block_bytes // (4 * max(n_cols, 1)))


def knn(queries, base, k: int, *, normalize: bool = True, exclude_self: bool = False, backend: str = "auto",
        max_block_bytes: int = DEFAULT_BLOCK_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most similar rows of ``base`` for every query by inner product (cosine when ``normalize``).

    Returns ``(indices, similarities)``, both (n_queries, k), best first. ``exclude_self`` drops index i from
    query i's list (for kNN within one set). ``backend``: ``"auto"`` (torch on a GPU if torch is loaded and sees
    one, else faiss if installed, else numpy), ``"faiss"``, ``"numpy"``, ``"torch"`` (GPU if present, else CPU).
    """
    Q = l2_normalize(queries) if normalize else np.asarray(queries, dtype=np.float32)
    B = l2_normalize(base) if normalize else np.asarray(base, dtype=np.float32)
    if Q.ndim != 2 or B.ndim != 2 or Q.shape[1] != B.shape[1]:
        raise InputError(f"knn: incompatible shapes {Q.shape} and {B.shape}")
    k_eff = min(k + int(exclude_self), B.shape[0])
    if backend not in BACKENDS:
        raise InputError(f"unknown knn backend {backend!r} ({', '.join(BACKENDS)})")
    use_torch = backend == "torch" or (backend == "auto" and _auto_gpu())
    faiss = _faiss() if backend in ("auto", "faiss") and not use_torch else None
    if backend == "faiss" and faiss is None:
        raise InputError('backend "faiss" needs faiss: pip install "vecbridge[faiss]"')
    if use_torch:
        idx, sims = _knn_torch(Q, B, k_eff, max_block_bytes)
    elif faiss is not None:
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


def _list_csls(idx, sim, r_own, r_other) -> np.ndarray:
    """CSLS of each entry of top-k lists, ``2 cos - r_own(row) - r_other(entry)``; -inf at padding (index -1).
    ``r_own`` holds one hubness term per list, ``r_other`` one per row of the other side."""
    return np.where(idx >= 0, 2.0 * sim - r_other[np.maximum(idx, 0)] - r_own[:, None], -np.inf)


def csls_mutual_from_knn(idx_xy, sim_xy, idx_yx, sim_yx, k_csls: int = 10):
    """CSLS mutual nearest neighbours from precomputed top-k lists in both directions (pad: index -1).

    ``idx_xy``/``sim_xy`` (n_x, K) hold each x's best rows of Y, best first; ``idx_yx``/``sim_yx`` (n_y, K) the reverse.
    The hubness terms are the mean of the first ``min(k_csls, found)`` similarities of each list (the usual CSLS with
    the neighbour search restricted to the lists), and every row's CSLS argmax is taken over its own list:
    ``CSLS(x, y) = 2 cos(x, y) - r_Y(x) - r_X(y)``. Ties go to the earlier (more similar) list entry.
    Returns ``(pairs (m, 2) [x, y], csls scores (m,), r_Y(x) (n_x,), r_X(y) (n_y,))``.
    """
    def hub(idx, sim):
        kk = max(1, min(int(k_csls), idx.shape[1]))
        valid = idx[:, :kk] >= 0
        total = np.where(valid, sim[:, :kk], 0.0).sum(axis=1)
        return (total / np.maximum(valid.sum(axis=1), 1)).astype(np.float32)

    idx_xy, idx_yx = np.asarray(idx_xy), np.asarray(idx_yx)
    sim_xy, sim_yx = np.asarray(sim_xy, dtype=np.float32), np.asarray(sim_yx, dtype=np.float32)
    n_x, n_y = idx_xy.shape[0], idx_yx.shape[0]
    r_y, r_x = hub(idx_xy, sim_xy), hub(idx_yx, sim_yx)       # r_Y(x) for every x, r_X(y) for every y
    empty = (np.empty((0, 2), np.int64), np.empty(0, np.float32), r_y, r_x)
    if n_x == 0 or n_y == 0 or idx_xy.shape[1] == 0 or idx_yx.shape[1] == 0:
        return empty
    cs_x, cs_y = _list_csls(idx_xy, sim_xy, r_y, r_x), _list_csls(idx_yx, sim_yx, r_x, r_y)
    jx = cs_x.argmax(axis=1)
    best_y = idx_xy[np.arange(n_x), jx]
    best_x = idx_yx[np.arange(n_y), cs_y.argmax(axis=1)]
    x = np.flatnonzero(best_y >= 0)
    x = x[best_x[best_y[x]] == x]
    return (np.stack([x, best_y[x]], axis=1).astype(np.int64), cs_x[x, jx[x]].astype(np.float32), r_y, r_x)


def runner_up_margin(idx_xy, sim_xy, idx_yx, sim_yx, pairs, r_y, r_x) -> np.ndarray:
    """How far each CSLS mutual pair ``(x, y)`` beats its runner-ups: the smaller of ``CSLS(x, y) - CSLS(x, y')``
    (``y'`` x's second-best list entry) and ``CSLS(x, y) - CSLS(x', y)``; 0 where a list has one entry. The lists and
    hubness terms are those of :func:`csls_mutual_from_knn`. The second-nearest-neighbour test of "Distinctive Image
    Features from Scale-Invariant Keypoints" (Lowe, 2004) in CSLS form: a row with no partner on the other side
    often pairs with one of several near-equals, a partnered row stands out."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if len(pairs) == 0:
        return np.empty(0, np.float32)

    def gap(idx, sim, rows, r_own, r_other):
        cs = _list_csls(np.asarray(idx)[rows], np.asarray(sim, dtype=np.float32)[rows], r_own[rows], r_other)
        if cs.shape[1] < 2:
            return np.zeros(len(rows), np.float32)
        top2 = -np.partition(-cs, 1, axis=1)[:, :2]
        return np.where(np.isfinite(top2[:, 1]), top2[:, 0] - top2[:, 1], 0.0)

    gx = gap(idx_xy, sim_xy, pairs[:, 0], r_y, r_x)
    gy = gap(idx_yx, sim_yx, pairs[:, 1], r_x, r_y)
    return np.minimum(gx, gy).astype(np.float32)


class KnnIndex:
    """A nearest-neighbour index over ``base`` built once and queried many times (inner product; cosine when
    ``normalize``). Exact (faiss ``IndexFlatIP``, or numpy through :func:`knn`) up to ``exact_max`` rows; above it an
    inverted file (faiss ``IndexIVFFlat``: ``nlist`` k-means cells, default ~4 sqrt(n), trained on a seeded sample;
    ``nprobe`` cells scanned per query), which returns approximate neighbours. Without faiss it is always exact.
    """

    def __init__(self, base, *, normalize: bool = True, exact_max: int = 50_000, nlist: int | None = None,
                 nprobe: int = 32, seed: int = 0):
        B = l2_normalize(base) if normalize else np.asarray(base, dtype=np.float32)
        if B.ndim != 2 or B.shape[0] == 0:
            raise InputError(f"KnnIndex: expected a non-empty 2-D array, got shape {B.shape}")
        self.normalize = normalize
        self.base = np.ascontiguousarray(B, dtype=np.float32)
        self.index = None
        faiss = _faiss()
        if faiss is not None and len(B) > exact_max:
            nlist = int(nlist or max(16, min(int(4 * np.sqrt(len(B))), len(B) // 39)))
            quantizer = faiss.IndexFlatIP(B.shape[1])
            index = faiss.IndexIVFFlat(quantizer, B.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
            rng = np.random.default_rng(seed)
            train = self.base[rng.choice(len(B), min(len(B), 64 * nlist), replace=False)]
            index.cp.seed = int(seed)
            index.train(train)
            index.add(self.base)
            index.nprobe = int(nprobe)
            self._quantizer = quantizer          # keep the coarse quantizer alive as long as the index
            self.index = index

    def search(self, queries, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, similarities)`` of the ``k`` best base rows per query, best first (-1 / -inf pads)."""
        Q = l2_normalize(queries) if self.normalize else np.asarray(queries, dtype=np.float32)
        if self.index is None:
            return knn(Q, self.base, k, normalize=False)
        scores, idx = self.index.search(np.ascontiguousarray(Q, dtype=np.float32), k)
        scores = np.where(idx >= 0, scores, -np.inf).astype(np.float32)
        return idx.astype(np.int64), scores
