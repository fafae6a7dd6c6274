"""The file store's search, one query per call (as a service answers): now, reading the live records' vectors
alone and keeping them prepared between searches while the records are the same, against the search as it was,
which read every live record whole (vectors, payloads, stamps) and prepared them again at every call.

Protocol: FOLDOC's recorded paraphrase-MiniLM-L3-v2 document vectors (tiled with a little noise past 10,000) with
their texts as payloads, written as one segment and again as one segment plus ``--writes`` small upserts of 50
records (what the cascade's write-back leaves); then ``--calls`` searches of one query each, top 10, timed one by
one, alternating the two ways call by call; the first search after a write is timed apart (``first``: it reads
the records). Medians, and the ratio as before / now. Both ways give the same answers (checked).

    python bench/file_search.py [--sizes 10000 100000] [--calls 50] [--writes 100]
Writes bench/results/file_search.json (``--out``).
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _corpora import DATA, embeddings  # noqa: E402

from vecbridge.connectors import VectorBatch, connect  # noqa: E402
from vecbridge.metrics import top_k  # noqa: E402


def as_before(c, Q, k: int = 10):
    """The search as it was: every live record gathered whole, block by block, and prepared again."""
    info = c.info()
    seg_idx, rows = c._live()
    ids: list = []
    best_s = np.zeros((len(Q), 0), dtype=np.float32)
    best_i = np.zeros((len(Q), 0), dtype=np.int64)
    for lo in range(0, len(rows), 100_000):
        b = c._gather(seg_idx[lo:lo + 100_000], rows[lo:lo + 100_000])
        idx, sc = top_k(Q, b.vectors, k, metric=info.metric, return_scores=True)
        cat_s, cat_i = np.concatenate([best_s, sc], 1), np.concatenate([best_i, idx + len(ids)], 1)
        order = np.argsort(-cat_s, axis=1, kind="stable")[:, :k]
        best_s, best_i = np.take_along_axis(cat_s, order, 1), np.take_along_axis(cat_i, order, 1)
        ids.extend(b.ids)
    return [[ids[j] for j in row] for row in best_i], best_s


def records(n: int):
    with open(DATA / "foldoc" / "items.jsonl", encoding="utf-8") as fh:
        texts = [json.loads(line)["doc"] for line in fh]
    X = embeddings(DATA / "foldoc", "minilm3", "docs")
    reps = -(-n // len(X))
    rng = np.random.default_rng(0)
    V = np.concatenate([X + (0.05 * rng.standard_normal(X.shape) if r else 0) for r in range(reps)])[:n]
    return [f"d{i}" for i in range(n)], V.astype(np.float32), [{"text": texts[i % len(texts)]} for i in range(n)]


def timed(fn, Q) -> tuple[float, list]:
    t0 = time.perf_counter()
    ids, _ = fn(Q)
    return (time.perf_counter() - t0) * 1000, ids


def measure(url: str, queries: np.ndarray, calls: int) -> dict:
    now, before = connect(url), connect(url)
    first_now, a = timed(now.search, queries[:1])
    first_before, b = timed(lambda q: as_before(before, q), queries[:1])
    assert a == b
    t_now, t_before = [], []
    for i in range(calls):
        q = queries[i % len(queries)][None]
        s, a = timed(now.search, q)
        t_now.append(s)
        s, b = timed(lambda q: as_before(before, q), q)
        t_before.append(s)
        assert a == b, "the two ways answer alike"
    m_now, m_before = float(np.median(t_now)), float(np.median(t_before))
    return {"first_ms_now": first_now, "first_ms_before": first_before, "median_ms_now": m_now,
            "median_ms_before": m_before, "ratio": m_before / m_now}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--writes", type=int, default=100)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "file_search.json")
    args = ap.parse_args(argv)
    queries = embeddings(DATA / "foldoc", "minilm3", "queries")[:args.calls]
    result = {"command": "python bench/file_search.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]}, "rows": []}
    for n in args.sizes:
        ids, V, payloads = records(n)
        with tempfile.TemporaryDirectory(prefix="vecbridge-file-search-") as tmp:
            url = f"file://{tmp}/c"
            c = connect(url).create(dim=V.shape[1], metric="cosine")
            c.upsert(VectorBatch(ids, V, payloads))
            row = {"records": n, "segments": 1, **measure(url, queries, args.calls)}
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
            for w in range(args.writes):
                lo = (w * 50) % n
                c.upsert(VectorBatch(ids[lo:lo + 50], V[lo:lo + 50], payloads[lo:lo + 50]))
            row = {"records": n, "segments": 1 + args.writes, **measure(url, queries, args.calls)}
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
