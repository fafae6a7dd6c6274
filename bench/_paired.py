"""What every ``bench/connectors_<store>.py`` shares: the data, the alternating timer and the result row."""
from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np


def data(n: int, dim: int, *, int_ids: bool = False) -> tuple[list, np.ndarray, list[dict]]:
    """``n`` seeded random vectors with string ids (or 0..n-1) and small JSON payloads."""
    vectors = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
    ids = list(range(n)) if int_ids else [f"doc-{i:07d}" for i in range(n)]
    return ids, vectors, [{"text": f"document {i}", "n": i} for i in range(n)]


@dataclass
class Paired:
    """Vectors/s of every timed run of our job and of the native one, in the order the pairs ran."""
    ours: list[float]
    native: list[float]


def paired_vps(n: int, repeats: int, setup: Callable, ours: Callable, native: Callable, *,
               drop: bool = True) -> Paired:
    """Vectors/s of our job and of the native one over ``repeats`` pairs, run alternately (so that load drifting on a shared
    machine hits both alike), each on a fresh collection (or a shared one, with ``drop=False``).

    Each job first runs once untimed: the first run of either paid for cold caches, lazily opened connections and
    first-call imports, and which job ran first decided who paid (seen as 10-20 point swings between reruns).
    The garbage collector is off while a job is timed (as ``timeit`` does) and run between jobs: with a store's
    whole collection held as Python objects (Qdrant local mode), a collection pass landing in one job's run moved
    that run by up to 20% (a one-off 8-pair experiment on 100k points, 2026-11-22: medians 13.5 s / 13.2 s with the
    collector on, 10.7 s / 10.7 s with it off).
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
    return Paired(rates[ours], rates[native])


def result_row(store: str, op: str, runs: Paired) -> dict:
    """One table row: median rates; overhead = native / ours - 1 of the medians (negative: the connector is
    faster), with the range of the per-pair overheads (each pair ran back to back) to show the noise."""
    ours, native = statistics.median(runs.ours), statistics.median(runs.native)
    per_pair = [b / a - 1 for a, b in zip(runs.ours, runs.native)]
    return {"store": store, "op": op, "vecbridge_vps": round(ours), "native_vps": round(native),
            "overhead": round(native / ours - 1, 3), "pair_range": [round(min(per_pair), 3), round(max(per_pair), 3)],
            "runs": len(per_pair)}
