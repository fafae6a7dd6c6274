"""Scheduled drift checks: is the alignment in production still working?

A check is a small TOML file (:mod:`vecbridge.runtime.drift_store` says its fields).

Each run samples random items of ``new`` (and their old-model vectors by id), measures the alignment's residual on
those fresh pairs against the stored fit, the probe retention, and the centroid shift and MMD of the sampled
new-space vectors against the reference sample saved by the first run; it appends the measurement to the SQLite
history and reports a breach with a one-line reason (the CLI then exits 1).
"""
from __future__ import annotations

import time
from typing import Iterator

import numpy as np

from .. import metrics
from ..align.artifact import Alignment
from ..connectors import connect
from ..errors import InputError, SpaceMismatch
from ..quality.drift import centroid_shift, mmd_test
from ..runtime.drift_store import DEFAULT_THRESHOLDS, DriftConfig, History, parse_every
from ..runtime.provenance import check_space

__all__ = ["DEFAULT_THRESHOLDS", "DriftConfig", "History", "parse_every", "run_check", "watch", "centroid_shift",
           "mmd_test"]


def run_check(config: DriftConfig, *, seed: int | None = None, force: bool = False) -> dict:
    """One measurement; returns ``{"breached", "reason", "measures"}`` after appending it to the history.

    First ``old`` must look like the alignment's source space and ``new`` like its target space
    (:func:`~vecbridge.runtime.provenance.check_space`): a collection in the wrong space is a breach recorded with
    its one-line reason, and nothing is measured (``force``: measured anyway, the override recorded)."""
    alignment = Alignment.load(config.alignment)
    old = connect(config.old, read_only=True)
    new = connect(config.new, read_only=True)
    seed = int(time.time_ns() % 2**31) if seed is None else seed
    try:
        spaces = {"old": check_space(old, alignment, "source", force=force).as_dict(),
                  "new": check_space(new, alignment, "target", force=force).as_dict()}
    except SpaceMismatch as exc:
        History(config.history).append(config.name, {"seed": seed}, True, str(exc))
        return {"name": config.name, "breached": True, "reason": str(exc), "measures": {"seed": seed}}
    sample = new.sample(config.sample, seed=seed)
    if len(sample) == 0:
        raise InputError(f"collection is empty: {new.display_url}")
    if sample.dim != alignment.target_dim:
        raise InputError(f"{new.display_url} holds {sample.dim}-d vectors but the alignment maps into "
                         f"{alignment.target_dim}-d space")
    olds = old.get(list(sample.ids))
    pos = {i: j for j, i in enumerate(sample.ids)}
    rows = [pos[i] for i in olds.ids]
    measures: dict = {"n_sampled": len(sample), "n_pairs": len(olds), "seed": seed}
    if any(c["forced"] for c in spaces.values()):
        measures["space_forced"] = "; ".join(c["reason"] for c in spaces.values() if c["forced"])
    if len(olds):
        mapped = alignment.transform(olds.vectors)
        resid = float(np.mean(np.sum((mapped - sample.vectors[rows]) ** 2, axis=1)))
        fit_resid = alignment.metadata.get("fit", {}).get("residual") or float("nan")
        measures["residual"] = resid
        measures["residual_ratio"] = resid / fit_resid if fit_resid else float("nan")
        measures["top1"] = metrics.pair_quality(mapped, sample.vectors[rows]).top1
    if config.probe_queries:
        q = connect(config.probe_queries, read_only=True)
        probe = q.sample(10_000, seed=0)
        docs_new = new.get(list(probe.ids))
        docs_old = old.get(list(docs_new.ids))
        if len(docs_old) >= 10:
            keep_ids = list(docs_old.ids)
            nd = {i: j for j, i in enumerate(docs_new.ids)}
            qd = {i: j for j, i in enumerate(probe.ids)}
            native = docs_new.vectors[[nd[i] for i in keep_ids]]
            Q = probe.vectors[[qd[i] for i in keep_ids]]
            ret = metrics.recall_retention(Q, alignment.transform(docs_old.vectors), native, k=config.k)
            measures["retention"] = ret["retention"]          # None when the native recall is too low
            measures["recall_mapped"], measures["recall_native"] = ret["recall_mapped"], ret["recall_native"]
            if ret["unreliable"]:
                measures["retention_unreliable"] = ret["unreliable"]
    # distribution shift of the new-space vectors against the first run's reference sample
    if config.reference.is_file():
        with np.load(config.reference, allow_pickle=False) as z:
            ref = z["vectors"]
        measures["centroid_shift"] = centroid_shift(ref, sample.vectors)
        measures["mmd"], measures["mmd_pvalue"] = mmd_test(ref, sample.vectors, seed=seed)
    else:
        np.savez(config.reference, vectors=sample.vectors)
        measures["reference_saved"] = True

    t = config.thresholds
    breaches = []
    if measures.get("residual_ratio", 0) > t["max_residual_ratio"]:
        breaches.append(f"alignment residual is {measures['residual_ratio']:.2f}x the fit's "
                        f"(> {t['max_residual_ratio']})")
    if measures.get("retention_unreliable"):
        breaches.append(f"probe retention@{config.k} is {measures['retention_unreliable']}: the probe queries hardly "
                        f"find their documents among the new collection's own vectors (recall mapped "
                        f"{measures['recall_mapped']:.3f}, native {measures['recall_native']:.3f}), so the check "
                        f"cannot tell whether the alignment still works: look at the new collection and the probe")
    elif measures.get("retention") is not None and measures["retention"] < t["min_retention"]:
        breaches.append(f"probe retention@{config.k} {measures['retention']:.3f} < {t['min_retention']}")
    if measures.get("centroid_shift", 0) > t["max_centroid_shift"]:
        breaches.append(f"centroid shifted by {measures['centroid_shift']:.3f} (> {t['max_centroid_shift']})")
    if measures.get("mmd_pvalue", 1.0) < t["min_mmd_pvalue"]:
        breaches.append(f"the distribution differs from the reference sample (MMD p = {measures['mmd_pvalue']:.3f} "
                        f"< {t['min_mmd_pvalue']})")
    reason = "; ".join(breaches) if breaches else "ok"
    History(config.history).append(config.name, measures, bool(breaches), reason)
    return {"name": config.name, "breached": bool(breaches), "reason": reason, "measures": measures}


def watch(config: DriftConfig, interval: float, *, max_runs: int | None = None,
          force: bool = False) -> Iterator[dict]:
    """:func:`run_check` every ``interval`` seconds (from the start of one check to the start of the next), each
    result as it comes, until ``max_runs`` checks (or for ever)."""
    runs = 0
    while True:
        started = time.monotonic()
        yield run_check(config, force=force)
        runs += 1
        if max_runs is not None and runs >= max_runs:
            return
        time.sleep(max(0.0, interval - (time.monotonic() - started)))

