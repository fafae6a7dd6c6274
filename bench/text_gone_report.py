"""Calibration of the compatibility report where the text is gone: what ``vecbridge report`` predicts for a migration
fitted without true pairs, against what the user then gets from the map ``vecbridge fit`` saves.

Setting: bench/text_gone.py's (its docstring): per corpus (../shared/data/wordnet, ../shared/data/foldoc) and ordered
pair of sentence encoders, the collection is half A of the corpus (5,000 items, old-model vectors only); GEH's new
side is the new-model vectors of 2,308 items of A (documents the user can embed again but cannot tie to ids) and
2,692 of half B, with 15 seed pairs; the unsupervised pairing's new side is half B only. The user also holds labelled
queries (a query log with the document each query found, embedded by both models): the queries of A's items, ids =
the ids of their documents.

Reports (``vecbridge.jobs.report.compatibility_report``, its default sample: all 5,000 records here, 20% held out, no
options section):

* ``geh``: ``report --pairs geh:SEEDS``: GEH's links refined as ``fit --pairs geh:SEEDS`` refines them (the report
  judges the map the user will fit);
* ``links``: the same links as a pairs file (``report --pairs file:LINKS`` after ``link --pairs geh:SEEDS``): the
  links' own map, what ``report --pairs geh`` judged before the refinement;
* ``unsupervised`` (``--unsupervised``): ``report --pairs unsupervised --sample 2500``: pseudo-pairs, so the report
  gives Recall@10 of the new-model queries of its sampled records over them under the map a fit saves, carried to
  the collection's 5,000 records (no retention: no native vector exists). Half the collection, so that the
  prediction reaches beyond the sample, as it must on a collection of millions.

Measured (labels used only here): the map the user saves (``fit --pairs geh:SEEDS``: the links refined over both
sides, ``vecbridge.pairing.learned.refine_linked``, then Procrustes; Procrustes on the links for ``links``;
``fit --pairs unsupervised --max-pairs 2500`` for ``unsupervised``, kept with ``--force`` where its validation
refuses it, ``accepted`` saying which) migrates all of A: top-1 of each item's true new vector among A's 5,000;
Recall@10 of A's 5,000 new-model queries over the migrated collection (served) and over A's true new vectors (a full
re-embed); retention = their ratio. Errors: predicted minus measured (goal: within 0.03).

Run: ``OPENBLAS_NUM_THREADS=1 python bench/text_gone_report.py [--corpora wordnet] [--unsupervised] [--no-geh]``
(one process per corpus may run side by side; rows merge into bench/results/text_gone_report.json).
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import fcntl  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from _corpora import DATA, embeddings  # noqa: E402
from text_gone import ALPHA, N_SEEDS, PAIRS, SAMPLE, SPLIT_SEED, ids_of, load, machine, procrustes, store  # noqa: E402

from vecbridge import metrics  # noqa: E402
from vecbridge.errors import CheckFailed, InputError  # noqa: E402
from vecbridge.jobs.fit import fit_alignment  # noqa: E402
from vecbridge.jobs.link import link  # noqa: E402
from vecbridge.jobs.report import compatibility_report  # noqa: E402
from vecbridge.pairing.learned import refine_linked  # noqa: E402
from vecbridge.runtime.open import open_collection  # noqa: E402

OUT = ROOT / "bench" / "results" / "text_gone_report.json"
GOAL = 0.03
#: records per side the unsupervised report and fit read: half the collection, so the report predicts beyond its sample
U_SAMPLE = 2500


def merge(rows: list[dict]) -> None:
    """Merge rows (keyed by corpus, pair, seed, report) into the JSON, under a lock."""
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(Path(tempfile.gettempdir()) / "text_gone_report.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(OUT.read_text()) if OUT.exists() else {}
        key = lambda r: (r["corpus"], r["pair"], r["seed"], r["report"])  # noqa: E731
        known = {key(r): r for r in data.get("rows", []) + rows}
        data.update(protocol=__doc__, machine=machine(), goal=GOAL,
                    rows=sorted(known.values(), key=lambda r: tuple(str(x) for x in key(r))))
        tmp = OUT.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1, default=float))
        tmp.replace(OUT)


def measured(transform, oldA, newA, qnA) -> dict:
    """What the user gets from a map over all of A: top-1 among A's items, served Recall@10 and its retention."""
    mapped = np.asarray(transform(oldA), dtype=np.float32)
    served = metrics.recall_at_k(qnA, mapped, k=10)
    full = metrics.recall_at_k(qnA, newA, k=10)
    return {"top1": round(float(metrics.pair_quality(mapped, newA).top1), 4), "recall10": round(served, 4),
            "reembed_recall10": round(full, 4), "retention": round(served / full, 4)}


def predicted(report) -> dict:
    """The report's predictions at the collection's size, and its verdict."""
    d = report.as_dict()
    ho, r, c = d["held_out"], d.get("retrieval") or {}, d["correspondences"]
    ru = d.get("retrieval_unsupervised") or {}
    return {"top1": ho.get("top1_predicted"), "top1_margin": ho.get("top1_margin"), "retention": r.get("predicted"),
            "recall10": ru.get("predicted"), "recall10_sample": ru.get("recall_mapped"),
            "pool": ru.get("pool") or r.get("pool"),
            "pairs": c["n"], "refinement": c.get("refinement"), "verdict": d["verdict"]["verdict"]}


def errors(pred: dict, got: dict) -> dict:
    out = {}
    for what, mine in (("top1", "top1"), ("retention", "retention"), ("recall10", "recall10")):
        if pred.get(what) is not None and got.get(mine) is not None:
            out[f"{what}_error"] = round(pred[what] - got[mine], 4)
    return out


def geh_reports(corpus, a, b, seed, base, folder, src_url, geh_url, omega, truth, asked) -> None:
    """The GEH reports (refined; the links' own map) of one pair against the maps the user would save."""
    oldA, newA, qnA = truth
    seed_items = np.random.default_rng(1000 + seed).choice(omega, N_SEEDS, replace=False)
    seeds_file = folder / f"seeds_{seed}.csv"
    seeds_file.write_text("".join(f"{i},{i}\n" for i in ids_of(seed_items)))
    t0 = time.perf_counter()
    try:
        links = link(src_url, geh_url, "geh", seeds=str(seeds_file), seed=seed)
    except CheckFailed as exc:
        links, refusal = None, str(exc)
    if links is None:   # what the user sees: link and fit refuse; the report says NO-GO
        try:
            said = predicted(compatibility_report(src_url, geh_url, pairs=f"geh:{seeds_file}", **asked))["verdict"]
        except InputError as exc:
            said = f"refused: {exc}"
        merge([{**base, "report": "geh", "refused": refusal[:200], "report_said": said, "load": load()}])
        print(f"{corpus} {a}->{b}: GEH refused; the report: {said}", flush=True)
    else:
        links_file = folder / f"links_{seed}.csv"
        links.save(links_file)
        t_link = time.perf_counter() - t0
        gsrc, gtgt = (open_collection(u).get(ids)
                      for u, ids in ((src_url, list(links.source_ids)), (geh_url, list(links.target_ids))))
        got_links = measured(procrustes(gsrc.vectors, gtgt.vectors).transform, oldA, newA, qnA)
        # what `fit --pairs geh:SEEDS` saves: the links refined over both samples (no leave-out: it measures nothing)
        rs, rt, _ = refine_linked(open_collection(src_url), open_collection(geh_url), gsrc, gtgt, sample=SAMPLE,
                                  seed=seed)
        got_refined = measured(procrustes(rs.vectors, rt.vectors).transform, oldA, newA, qnA)
        rows = []
        for kind, pairs, got in (("links", f"file:{links_file}", got_links),
                                 ("geh", f"geh:{seeds_file}", got_refined)):
            t0 = time.perf_counter()
            pred = predicted(compatibility_report(src_url, geh_url, pairs=pairs, **asked))
            rows.append({**base, "report": kind, "links": len(links.source_ids), "predicted": pred, "measured": got,
                         **errors(pred, got), "report_s": round(time.perf_counter() - t0, 1),
                         "link_s": round(t_link, 1), "load": load()})
            print(f"{corpus} {a}->{b} {kind}: top-1 {pred['top1']:.3f} vs {got['top1']:.3f}, retention "
                  f"{pred['retention']} vs {got['retention']:.3f} ({pred['verdict']}, {rows[-1]['report_s']:.0f}s)",
                  flush=True)
        merge(rows)


def run_pair(corpus: str, a: str, b: str, seed: int, work: Path, unsupervised: bool, geh: bool = True) -> None:
    data = DATA / corpus
    old, new = embeddings(data, a), embeddings(data, b)
    q_old, q_new = embeddings(data, a, "queries"), embeddings(data, b, "queries")
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(old))
    A, B = perm[: len(perm) // 2], perm[len(perm) // 2:]
    base = {"corpus": corpus, "pair": f"{a}->{b}", "seed": seed}
    folder = work / corpus / f"{a}-{b}"
    src_url = store(folder / "old_A", old[A], ids_of(A))
    n_omega = int(round(ALPHA / (1 - (1 - ALPHA) / 2) * len(A)))   # GEH's new side, as bench/text_gone.py builds it
    omega = A[:n_omega]
    geh_items = np.concatenate([omega, B[: len(A) - n_omega]])
    geh_items = geh_items[np.random.default_rng(SPLIT_SEED + 1).permutation(len(geh_items))]
    geh_url = store(folder / "new_geh", new[geh_items], ids_of(geh_items))
    qn_url = store(folder / "queries_new", q_new[A], ids_of(A))
    qo_url = store(folder / "queries_old", q_old[A], ids_of(A))
    oldA, newA, qnA = old[A], new[A], q_new[A]
    asked = {"queries_new": qn_url, "queries_old": qo_url, "options": False, "seed": seed}

    if geh:
        geh_reports(corpus, a, b, seed, base, folder, src_url, geh_url, omega, (oldA, newA, qnA), asked)
    if unsupervised:
        # report and fit on samples of half the collection: the report must carry its sample's recall to all of A
        new_b = store(folder / "new_B", new[B], ids_of(B))
        t0 = time.perf_counter()
        pred = predicted(compatibility_report(src_url, new_b, pairs="unsupervised", **{**asked, "sample": U_SAMPLE}))
        t_report = time.perf_counter() - t0
        alignment = fit_alignment(src_url, new_b, pairs="unsupervised", seed=seed, max_pairs=U_SAMPLE, force=True)
        got = {"recall10": round(metrics.recall_at_k(qnA, alignment.transform(oldA), k=10), 4),
               "accepted": bool(alignment.metadata["validation"]["passed"])}
        merge([{**base, "report": "unsupervised", "sample": U_SAMPLE, "predicted": pred, "measured": got,
                **errors(pred, got), "report_s": round(t_report, 1), "load": load()}])
        print(f"{corpus} {a}->{b} unsupervised: Recall@10 predicted {pred['recall10']} (over the sample "
              f"{pred['recall10_sample']}) vs served {got['recall10']} ({pred['verdict']})", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", default="wordnet,foldoc")
    ap.add_argument("--pairs", default=None, help="a:b,... (default: all six)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--unsupervised", action="store_true", help="also the unsupervised pairing's report (minutes)")
    ap.add_argument("--no-geh", dest="geh", action="store_false", help="leave out the GEH reports")
    args = ap.parse_args()
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",")] if args.pairs else PAIRS
    with tempfile.TemporaryDirectory() as tmp:
        for corpus in args.corpora.split(","):
            for a, b in pairs:
                run_pair(corpus, a, b, args.seed, Path(tmp), args.unsupervised, args.geh)


if __name__ == "__main__":
    main()
