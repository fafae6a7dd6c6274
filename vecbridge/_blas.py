"""Thread limits for small dense linear algebra.

OpenBLAS splits even a 384 x 768 SVD over every core; on a 2-core machine that is already busy (the normal state of
a CI runner or a shared box) the threads wait on each other and the call runs 4-30x slower than on one thread
(measured: 0.74 s vs 0.16 s for that SVD at a load average of 3.5). Large matrix products still scale, so only the
small LAPACK calls (SVD, eigh) are pinned to one thread.
"""
from __future__ import annotations

import contextlib

from threadpoolctl import threadpool_limits


def one_blas_thread():
    """Context manager: BLAS/LAPACK on one thread for the duration (restored after)."""
    return threadpool_limits(1)


@contextlib.contextmanager
def thread_limit(n: int | None):
    """Limit BLAS and faiss's OpenMP threads to ``n`` for the duration (``None`` or 0: no limit); restore after."""
    if not n:
        yield
        return
    from .numeric.neighbors import _faiss

    faiss = _faiss()
    old = faiss.omp_get_max_threads() if faiss is not None else None
    try:
        if faiss is not None:
            faiss.omp_set_num_threads(int(n))
        with threadpool_limits(int(n)):
            yield
    finally:
        if faiss is not None:
            faiss.omp_set_num_threads(old)
