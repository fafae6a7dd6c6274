"""A record's mapped vector is a function of that record alone: the same bits whatever batch it falls in, whatever
BLAS thread count and whatever BLAS kernel (OPENBLAS_CORETYPE) computes it. A resumed or distributed migration
relies on this to write what a single pass writes."""
from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from vecbridge.align import Alignment, ClusteredProcrustes, OrthogonalProcrustes
from vecbridge.numeric.rowwise import AffineRows

SPLITS = (1, 2, 7, 128, 1000)
OFFSETS = (0, 3, 501)
N = 1500


def _data(d_in=96, d_out=160, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, d_in)).astype(np.float32)
    Y = (np.tanh(X @ rng.normal(size=(d_in, d_out)) / 8) + 0.3).astype(np.float32)   # centred maps need a mean
    return X, Y


def _alignments():
    X, Y = _data()
    yield "orthogonal", Alignment.from_estimator(OrthogonalProcrustes().fit(X, Y)), X
    yield "centred+scaled", Alignment.from_estimator(OrthogonalProcrustes(center=True, scale=True).fit(X, Y)), X
    yield "l2", Alignment.from_estimator(OrthogonalProcrustes(center=True).fit(X, Y), normalization="l2"), X
    yield "clustered", Alignment.from_estimator(ClusteredProcrustes(n_clusters=4, min_cluster_size=10).fit(X, Y)), X


def _pieces(f, X, size, offset):
    """``f`` over the rows of ``X`` cut into a head of ``offset`` rows, then batches of ``size``."""
    cuts = [0, offset] + list(range(offset + size, len(X), size)) + [len(X)]
    return np.concatenate([f(X[lo:hi]) for lo, hi in zip(cuts, cuts[1:]) if hi > lo])


@pytest.mark.parametrize("name,alignment,X", list(_alignments()), ids=lambda v: v if isinstance(v, str) else "")
def test_rows_map_alike_in_any_batch_and_thread_count(name, alignment, X):
    whole = alignment.transform(X)
    assert whole.dtype == np.float32
    for threads in (1, 2):
        with threadpool_limits(threads):
            for size in SPLITS:
                for offset in OFFSETS:
                    got = _pieces(alignment.transform, X, size, offset)
                    assert got.tobytes() == whole.tobytes(), (name, threads, size, offset)
            one = np.stack([alignment.transform(row) for row in X[:40]])     # 1-D input: one vector
            assert one.tobytes() == whole[:40].tobytes(), (name, threads)
    # the other direction (queries translated for a wrapped search) too
    Q = alignment.transform(X[:300])
    back = alignment.inverse_transform(Q)
    assert _pieces(alignment.inverse_transform, Q, 7, 3).tobytes() == back.tobytes()


def test_mapping_is_as_accurate_as_a_float32_product():
    """Rounding the inputs before the exact product costs about what float32 accumulation costs BLAS."""
    X, Y = _data(d_in=384, d_out=768)
    est = OrthogonalProcrustes(center=True).fit(X, Y)
    exact = (X.astype(np.float64) - est.source_mean_) @ est.matrix_ + est.target_mean_
    ours = Alignment.from_estimator(est).transform(X)
    blas = est.transform(X)
    err = lambda Z: np.linalg.norm(Z - exact, axis=1) / np.linalg.norm(exact, axis=1)
    assert err(ours).max() < 4 * max(err(blas).max(), 2 ** -24)
    assert err(ours).max() < 2e-6


def test_affine_rows_is_exact_on_integers():
    """Small integers are represented exactly: the product is the exact one."""
    rng = np.random.default_rng(0)
    X = rng.integers(-50, 50, size=(64, 33)).astype(np.float32)
    M = rng.integers(-50, 50, size=(33, 20)).astype(np.float64)
    c = rng.integers(-5, 5, size=20).astype(np.float64)
    assert np.array_equal(AffineRows(M, c)(X), (X.astype(np.int64) @ M.astype(np.int64) + c).astype(np.float32))


def _kernels() -> list[str]:
    """OpenBLAS kernels this processor can run (OPENBLAS_CORETYPE names), the machine's own choice first."""
    kernels = [""]
    if platform.machine() not in ("x86_64", "AMD64"):
        return kernels
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    kernels.append("Nehalem")
    if " avx2" in flags:
        kernels.append("Haswell")
    if " avx512f" in flags:
        kernels.append("SkylakeX")
    return kernels


_DIGEST = """
import hashlib, sys
import numpy as np
from vecbridge.align import Alignment
a = Alignment.load(sys.argv[1])
X = np.load(sys.argv[2])
print(hashlib.sha256(np.concatenate([a.transform(X[i:i + 7]) for i in range(0, len(X), 7)]).tobytes()).hexdigest())
"""


def test_rows_map_alike_under_every_blas_kernel(tmp_path):
    """The same bits from every BLAS kernel the processor offers (each in a fresh process, where OpenBLAS reads
    OPENBLAS_CORETYPE), and from this process's own."""
    X, Y = _data(d_in=384, d_out=256)
    path = Alignment.from_estimator(OrthogonalProcrustes(center=True).fit(X, Y)).save(tmp_path / "a.vb")
    np.save(tmp_path / "x.npy", X)
    here = hashlib.sha256(Alignment.load(path).transform(X).tobytes()).hexdigest()
    for kernel in _kernels():
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
        if kernel:
            env["OPENBLAS_CORETYPE"] = kernel
        out = subprocess.run([sys.executable, "-c", _DIGEST, str(path), str(tmp_path / "x.npy")], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == here, kernel or "default kernel"
