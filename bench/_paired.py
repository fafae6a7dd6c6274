"""What every ``bench/connectors_<store>.py`` shares: the data, the alternating timer and the result row."""
from __future__ import annotations

import gc
import statistics
import time
from typing import Callable

import numpy as np


def data(n: int, dim: int, *, int_ids: bool = False) -> tuple[list, np.ndarray, list[dict]]:
    """``n`` seeded random vectors with string ids (or 0..n-1) and small JSON payloads."""
    vectors = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
    ids = list(range(n)) if int_ids else [f"doc-{i:07d}" for i in range(n)]
    return ids, vectors, [{"text": f"document {i}", "n": i} for i in range(n)]


def paired_vps(n: int, repeats: int, setup: Callable, ours: Callable, native: Callable, *,
               drop: bool = True) -> tuple[float, float]:
    """Median vectors/s of our job and of the native one, run alternately (so that load drifting on a shared
    machine hits both alike), each on a fresh collection (or a shared one, with ``drop=False``).

    Each job first runs once untimed: the first run of either paid for cold caches, lazily opened connections and
    first-call imports, and which job ran first decided who paid (seen as 10-20 point swings between reruns).
    The garbage collector is off while a job is timed (as ``timeit`` does) and run between jobs: with a store's
    whole collection held as Python objects (Qdrant local mode), a collection pass landing in one job's run moved
    that run by up to 20%.
    """
    rates: dict = {ours: [], native: []}
    for r in range(-1, repeats):
        for job in (ours, native) if r % 2 == 0 else (native, ours):
            coll = setup()
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                job(coll)
                elapsed = time.perf_counter() - start
            finally:
                gc.enable()
            if r >= 0:
                rates[job].append(n / elapsed)
            if drop:
                coll.drop()
    return statistics.median(rates[ours]), statistics.median(rates[native])


def result_row(store: str, op: str, ours: float, native: float) -> dict:
    """One table row; overhead = native / ours - 1 (negative: the connector is faster)."""
    return {"store": store, "op": op, "vecbridge_vps": round(ours), "native_vps": round(native),
            "overhead": round(native / ours - 1, 3)}
