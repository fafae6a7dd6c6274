"""A model's throughput in one line: what a command that embedded texts says of its model."""
from __future__ import annotations


def throughput(run: dict | None) -> str | None:
    """``run``: :meth:`vecbridge.runtime.models.Model.run` (or a job's ``model_run``), e.g. "embedded 1,200 texts
    in 14.2 s on cpu (fp32, batch 32): 85 texts/s"; None when no model ran."""
    if not run or not run.get("texts"):
        return None
    where = f" on {run['device']} ({run['precision']}, batch {run['batch_size']})" if run.get("device") else (
        f" (batch {run['batch_size']})" if run.get("batch_size") else "")
    rate = f": {run['texts_per_s']:,.0f} texts/s" if run.get("texts_per_s") else ""
    return f"embedded {run['texts']:,} texts in {run['seconds']:.1f} s{where}{rate}"


def print_throughput(run: dict | None, con=None) -> None:
    """The line of :func:`throughput`, indented under a summary, if a model ran."""
    from .console import console

    line = throughput(run)
    if line:
        (con or console()).print(f"  {line}", markup=False, highlight=False)
