"""Migrations where the text is gone: what a user gets from a map fitted without true pairs, and when it is refused.

Protocol. Corpora ../shared/data/{wordnet,foldoc} (10,000 items; query i is relevant to doc i), sentence encoders
minilm3, minilm6, mpnet, all 6 ordered (old -> new) pairs. One fixed split (a permutation seeded with
``SPLIT_SEED``) cuts the items into half A and half B (5,000 each). The collection is half A holding the OLD model's
doc vectors only (its texts are gone). The new model's vectors available for fitting come from half B (in-domain
texts the team can still embed), never from half A. Both sides are real ``file://`` collections (plain layout), and
the maps come from the package's own jobs:

* unsupervised: ``vecbridge.jobs.fit.fit_to_file(..., pairs="unsupervised", seed=s)`` = ``vecbridge fit --pairs
  unsupervised``: the default ``MiniVec2Vec`` on a 10,000-row sample of each side (here all 5,000: old A, new B),
  then ``pairing.learned.check_map`` (label-free, on the fit's own rows: no collection has rows to spare). A refused
  map raises ``CheckFailed``; the artifact path is then checked to be absent (nothing written).
* GEH, 15 seeds: ``vecbridge.jobs.link.link(..., "geh", seeds=FILE, seed=s)`` = ``vecbridge link --mode geh`` (GEH
  defaults, sample 10,000, ``check_geh``), then Procrustes on the links (what ``fit`` on the links file does). The
  new side shares items with the collection, as in the GEH (Vector Linking) paper's section 5.1 and
  bench/linking_retention.py: overlap alpha 0.3 of the union, each side 65% of it, i.e. the new side is the
  new-model vectors of 2,308 items of A (Omega: the documents whose texts the user still has or can fetch again, but
  cannot tie to collection ids) plus 2,692 items of B; 15 seed pairs are items of Omega matched by hand.
  ``refined``: what ``upgrade start --pairs geh:SEEDS`` fits instead, the links refined over 10,000-row samples of
  both sides (``vecbridge.pairing.learned.refine_linked``: CSLS mutual nearest neighbours under the links' map, two
  rounds, kept where the refined map passes the label-free validation), then Procrustes.
* supervised reference: ``OrthogonalProcrustes()`` on 2,000 true pairs of half A (items A[0:2000]; what ``upgrade
  start`` does when the texts exist).

Served: Recall@10 of the 5,000 new-model queries of half A over the collection migrated with each map (cosine),
beside staying (old queries over old docs of A) and a full re-embed (new queries over new docs of A). ``top1``: the
true partner's top-1 among the 2,000 items A[3000:5000] (mapped old doc against their new docs; no fit saw these
pairs). Investigation (labels used only here): every unsupervised start's top-1 after Refine-1 (centred unit rows,
the paper's protocol) beside its label-free validation; the tool's validation of the supervised map on the very rows
and seed that judged the unsupervised one (a working map with score < 1 = a false refusal); the same for the
supervised map on the query vectors (short texts: a harder corpus, lower true top-1) to see where validation turns.

Run: ``OPENBLAS_NUM_THREADS=1 python bench/text_gone.py [--corpora wordnet,foldoc] [--seeds 0] [--pairs a:b,...]``;
every finished fit is merged at once into bench/results/text_gone.json (rows keyed by corpus, pair, seed, mode),
so a crash loses nothing finished and several processes (one per corpus) may run side by side. ``--queries-probe``
adds the query-vector validation of the true maps; ``--consensus --corpora foldoc --pairs minilm3:mpnet,
minilm6:minilm3`` runs every start of the schedule and records how often two starts' maps agree (label-free).
``--gap-probe`` fits the default ``MiniVec2Vec`` on 2,500 and on 5,000 rows a side and compares its matching
objective with the true map's on rows it read and rows it did not (why the unsupervised map serves below the
supervised one); ``--by-direction`` fits it on all 5,000 rows a side and serves hybrids that take the true map on
the old space's largest principal directions and the fitted map on the rest, or the reverse (where it loses);
``--basin`` asks of a refused pair whether the matching objective prefers the true map's polished basin to the fit's;
``--rows 2500`` runs the tool's unsupervised fit on collections of the first 2,500 rows of each half
(small collections: what the validation accepts there); ``--overlap N`` runs it against a new side holding N of the
collection's own documents among its 5,000 (ids not shared: the user can embed some of the collection's documents
again but cannot say which records they are; ``--overlap 2308`` is GEH's new side, 0 the disjoint default);
``--geh-seeds N`` runs GEH only, from N seed pairs instead of 15 (how many seeds a pair where 15 never take off needs).
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import platform
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from _corpora import DATA, embeddings

import vecbridge.align.minivec2vec as mv_module
from vecbridge import metrics
from vecbridge.align import OrthogonalProcrustes
from vecbridge.errors import CheckFailed
from vecbridge.jobs.fit import fit_to_file
from vecbridge.jobs.link import link
from vecbridge.pairing.learned import check_map, refine_linked
from vecbridge.runtime.open import open_collection
from vecbridge.vectors import l2_normalize

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "text_gone.json"
SENTENCE = ("minilm3", "minilm6", "mpnet")
PAIRS = [(a, b) for a in SENTENCE for b in SENTENCE if a != b]
SPLIT_SEED = 0
N_SUPERVISED = 2000
N_SEEDS = 15
ALPHA = 0.3
TOP1 = slice(3000, 5000)   # positions in A of the items top-1 is measured on
SAMPLE = 10_000            # the CLI's --max-pairs / --sample default
GOAL = 0.03


class Probe(mv_module.MiniVec2Vec):
    """The package's MiniVec2Vec, unchanged, that also keeps each start's W after Refine-1 (diagnostics only)."""

    last = None

    def _start(self, i, *args, **kwargs):
        result = super()._start(i, *args, **kwargs)
        self.__dict__.setdefault("start_W", {})[i] = result[0]
        Probe.last = self
        return result


@contextlib.contextmanager
def probing():
    """Let ``unsupervised_fit`` (it imports MiniVec2Vec when called) build a :class:`Probe`."""
    orig = mv_module.MiniVec2Vec
    mv_module.MiniVec2Vec = Probe
    try:
        yield
    finally:
        mv_module.MiniVec2Vec = orig


def machine() -> dict:
    return {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
            "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"), "platform": platform.platform(),
            "shared": "2 cores shared with other helpers' jobs (load average recorded per row)"}


def load() -> float:
    return round(os.getloadavg()[0], 2)


def merge(rows: list[dict] | None = None, probes: list[dict] | None = None, **top) -> None:
    """Merge rows (keyed by corpus, pair, seed, mode), query probes (by corpus, pair) and top-level entries into the
    JSON, under a lock."""
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(Path(tempfile.gettempdir()) / "text_gone.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(OUT.read_text()) if OUT.exists() else {}
        extra = top.pop("consensus", [])
        for probe in ("gap_probe", "by_direction", "basin"):
            known = {(g["corpus"], g["pair"]): g for g in data.get(probe, []) + top.pop(probe, [])}
            data[probe] = sorted(known.values(), key=lambda g: (g["corpus"], g["pair"]))
        data.update(top)
        known = {(c["corpus"], c["pair"]): c for c in data.get("consensus", []) + extra}
        data["consensus"] = sorted(known.values(), key=lambda c: (c["corpus"], c["pair"]))
        key = lambda r: (r.get("corpus"), r.get("pair"), r.get("seed"), r.get("mode"))  # noqa: E731
        old = {key(r): r for r in data.get("rows", [])}
        for r in rows or []:
            old[key(r)] = r
        data["rows"] = sorted(old.values(), key=lambda r: tuple(str(x) for x in key(r)))
        known = {(p["corpus"], p["pair"]): p for p in data.get("queries_probe", []) + (probes or [])}
        data["queries_probe"] = sorted(known.values(), key=lambda p: (p["corpus"], p["pair"]))
        tmp = OUT.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1, default=float))
        tmp.replace(OUT)


def store(folder: Path, vectors: np.ndarray, ids: list[str]) -> str:
    """A read-only plain-layout file collection (vectors.npy + ids.json)."""
    folder.mkdir(parents=True)
    np.save(folder / "vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32))
    (folder / "ids.json").write_text(json.dumps(ids))
    return str(folder)


def ids_of(items) -> list[str]:
    return [f"item-{int(i)}" for i in items]


def served(transform, old_docs, new_queries) -> float:
    return metrics.recall_at_k(new_queries, np.asarray(transform(old_docs), dtype=np.float32), k=10)


def top1(transform, old, new) -> float:
    return float(metrics.pair_quality(np.asarray(transform(old[TOP1]), dtype=np.float32), new[TOP1]).top1)


def cosine(transform, old, new) -> float:
    """Mean cosine of a mapped old doc with its true new doc (top-1 saturates; this does not)."""
    return float(metrics.mean_cosine(np.asarray(transform(old[TOP1]), dtype=np.float32), new[TOP1]))


def centred_top1(W, mu_a, mu_b, Xh, Yh) -> float:
    """The paper's protocol for a start's W: ``normalize(x - mu_A) @ W`` against ``y - mu_B``."""
    xs = l2_normalize(Xh - np.asarray(mu_a, dtype=np.float32)) @ np.asarray(W, dtype=np.float32)
    return float(metrics.pair_quality(xs, Yh - np.asarray(mu_b, dtype=np.float32)).top1)


def vrec(v: dict) -> dict:
    keep = ("score", "passed", "gain", "agreement", "null_mean", "null_std", "z", "refined_similarity",
            "mnn_similarity", "rows")
    return {k: (round(v[k], 4) if isinstance(v.get(k), float) else v.get(k)) for k in keep}


def procrustes(X, Y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return OrthogonalProcrustes().fit(X, Y)


def run_pair(corpus: str, a: str, b: str, seeds: list[int], work: Path, kind: str = "docs",
             modes: tuple = ("unsupervised", "geh"), rows: int | None = None, overlap: int | None = None,
             n_seeds: int = N_SEEDS) -> None:
    """One pair: the references, then each seed's fits. ``rows``: the unsupervised fit reads collections of only
    the first ``rows`` items of each half (a small collection; its map still migrates all of half A), recorded as
    the mode ``unsupervised, N rows``. ``overlap``: the unsupervised fit's new side is the new-model vectors of
    ``overlap`` items of A (the collection's own documents, unlinked) and ``5,000 - overlap`` items of B, recorded
    as the mode ``overlap N``."""
    data = DATA / corpus
    old, new = embeddings(data, a), embeddings(data, b)
    q_old, q_new = embeddings(data, a, "queries"), embeddings(data, b, "queries")
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(old))
    A, B = perm[: len(perm) // 2], perm[len(perm) // 2:]
    pair = f"{a}->{b}"
    base = {"corpus": corpus, "pair": pair}
    folder = work / corpus / f"{a}-{b}" / str(rows or "all")
    fit_a, fit_b = (A, B) if rows is None else (A[:rows], B[:rows])
    src_url = store(folder / "old_A", old[fit_a], ids_of(fit_a))
    tgt_url = store(folder / "new_B", new[fit_b], ids_of(fit_b))
    # GEH's new side: Omega (items of A) plus items of B, alpha 0.3 of the union, each side 65% of it
    n_omega = int(round(ALPHA / (1 - (1 - ALPHA) / 2) * len(A)))
    omega = A[:n_omega]
    geh_items = np.concatenate([omega, B[: len(A) - n_omega]])
    geh_items = geh_items[np.random.default_rng(SPLIT_SEED + 1).permutation(len(geh_items))]
    geh_url = store(folder / "new_geh", new[geh_items], ids_of(geh_items))
    if overlap is not None:
        # the same shape with ``overlap`` of A's items (a prefix of Omega's order, so 2,308 gives GEH's very side)
        own = np.concatenate([A[:overlap], B[: len(A) - overlap]])
        own = own[np.random.default_rng(SPLIT_SEED + 1).permutation(len(own))]
        tgt_url = store(folder / f"new_overlap_{overlap}", new[own], [f"new-{int(i)}" for i in own])  # unlinked ids
    oldA, newA, qoA, qnA = old[A], new[A], q_old[A], q_new[A]

    # references (seed-independent)
    t0 = time.perf_counter()
    sup = procrustes(oldA[:N_SUPERVISED], newA[:N_SUPERVISED])
    t_sup = time.perf_counter() - t0
    r_stay = metrics.recall_at_k(qoA, oldA, k=10)
    r_full = metrics.recall_at_k(qnA, newA, k=10)
    r_sup = served(sup.transform, oldA, qnA)
    ref = {**base, "seed": None, "mode": "reference", "stay_recall10": round(r_stay, 4),
           "reembed_recall10": round(r_full, 4), "supervised_recall10": round(r_sup, 4),
           "supervised_top1": round(top1(sup.transform, oldA, newA), 4),
           "supervised_cosine": round(cosine(sup.transform, oldA, newA), 4), "supervised_fit_s": round(t_sup, 2),
           "n_supervised_pairs": N_SUPERVISED, "load": load()}
    merge([ref])
    print(f"{corpus} {pair}: stay {r_stay:.3f} re-embed {r_full:.3f} supervised {r_sup:.3f} "
          f"(top-1 {ref['supervised_top1']:.3f})", flush=True)

    src = open_collection(src_url)
    for seed in seeds:
        if "unsupervised" in modes:
            # --- unsupervised, exactly as `vecbridge fit --pairs unsupervised` ------------------------------------------
            out = folder / f"unsup_{seed}_{overlap or 0}.npz"
            Probe.last = None
            t0 = time.perf_counter()
            with probing():
                try:
                    alignment, _ = fit_to_file(out, src_url, tgt_url, pairs="unsupervised", seed=seed,
                                                  source_model=a, target_model=b)
                    refused, message = False, None
                except CheckFailed as exc:
                    alignment, refused, message = None, True, str(exc)
            t_fit = time.perf_counter() - t0
            est = Probe.last
            mode = ("unsupervised" if rows is None and overlap is None else f"unsupervised, {rows} rows"
                    if overlap is None else f"overlap {overlap}")
            row = {**base, "seed": seed, "mode": mode, "overlap": overlap,
                   "rows": len(fit_a), "fit_s": round(t_fit, 1), "load": load(), "doubt": getattr(est, "doubt_", None),
                   "accepted": not refused, "refusal": message,
                   "nothing_written": (not out.exists() and not list(folder.glob(out.stem + "*"))) if refused else None}
            tgt = open_collection(tgt_url)
            used_a, used_b = src.sample(SAMPLE, seed=seed), tgt.sample(SAMPLE, seed=seed + 1)   # unsupervised_fit's rows
            v_map = check_map(est.procrustes_, src, tgt, used_a, used_b, seed=seed, force=True, what="", advice="")
            v_sup = check_map(sup, src, tgt, used_a, used_b, seed=seed, force=True, what="", advice="")
            served_map = alignment.transform if alignment is not None else est.procrustes_.transform
            r = served(served_map, oldA, qnA)
            Xh, Yh = oldA[TOP1], newA[TOP1]
            starts = []
            for rec in est.restarts_:
                W = getattr(est, "start_W", {}).get(rec["restart"])
                starts.append({**{k: (round(v, 4) if isinstance(v, float) else v) for k, v in rec.items()},
                               "top1": None if W is None else round(centred_top1(W, est.source_mean_, est.target_mean_,
                                                                                 Xh, Yh), 4)})
            row.update({"recall10": round(r, 4), "gap_to_supervised": round(r_sup - r, 4),
                        "top1": round(top1(served_map, oldA, newA), 4),
                        "cosine": round(cosine(served_map, oldA, newA), 4), "validation": vrec(v_map),
                        "artifact_validation": (vrec(alignment.metadata.get("validation", {}))
                                                if alignment is not None and hasattr(alignment, "metadata") else None),
                        "supervised_validation": vrec(v_sup), "won": {"restart": est.restart_, "init": est.init_},
                        "confirmation": getattr(est, "confirmation_", None), "starts": starts})
            merge([row])
            print(f"  seed {seed} unsupervised: {'REFUSED' if refused else 'accepted'} score "
                  f"{v_map['score']:.2f} gain {v_map['gain']:.3f} agr {v_map['agreement']:.3f} top-1 {row['top1']:.3f} "
                  f"R@10 {r:.3f} (sup {r_sup:.3f}; sup map's score {v_sup['score']:.2f} gain {v_sup['gain']:.3f}) "
                  f"won {est.init_}#{est.restart_} {t_fit:.0f}s", flush=True)

        if "geh" in modes:
            # --- GEH from 15 seed pairs, as `vecbridge link --mode geh` + fit on the links ------------------------------
            rng = np.random.default_rng(1000 + seed)
            seed_items = rng.choice(omega, n_seeds, replace=False)
            seeds_file = folder / f"seeds_{seed}.csv"
            seeds_file.write_text("".join(f"{i},{i}\n" for i in ids_of(seed_items)))
            t0 = time.perf_counter()
            try:
                links = link(src_url, geh_url, "geh", seeds=str(seeds_file), seed=seed)
                refused, message = False, None
            except CheckFailed as exc:
                links, refused, message = None, True, str(exc)
            row = {**base, "seed": seed, "mode": "geh" if n_seeds == N_SEEDS else f"geh, {n_seeds} seeds", "alpha": ALPHA,
                   "n_omega": int(n_omega), "n_seeds": n_seeds,
                   "accepted": not refused, "refusal": message, "load": load()}
            if links is not None:
                gsrc, gtgt = src.get(list(links.source_ids)), open_collection(geh_url).get(list(links.target_ids))
                geh_map = procrustes(gsrc.vectors, gtgt.vectors)
                t_fit = time.perf_counter() - t0
                r = served(geh_map.transform, oldA, qnA)
                # what `upgrade start --pairs geh:SEEDS` fits: the links refined over both samples, if that validates
                t0 = time.perf_counter()
                geh_coll = open_collection(geh_url)
                rs, rt, refinement = refine_linked(src, geh_coll, gsrc, gtgt, sample=SAMPLE, seed=seed)
                pairs = list(zip(rs.ids, rt.ids))
                refined_map = procrustes(rs.vectors, rt.vectors)
                r_ref = served(refined_map.transform, oldA, qnA)
                row.update({"refined_recall10": round(r_ref, 4), "refined_gap_to_supervised": round(r_sup - r_ref, 4),
                            "refined_top1": round(top1(refined_map.transform, oldA, newA), 4),
                            "refine_s": round(time.perf_counter() - t0, 1),
                            "refinement": {k: v for k, v in refinement.items() if k in ("kept", "links", "pairs")},
                            "refined_pair_precision": round(float(np.mean([x == y for x, y in pairs])), 4)})
                v = links.meta.get("validation", {})
                row.update({"fit_s": round(t_fit, 1), "links": len(links.source_ids),
                            "link_precision": round(float(np.mean(np.array(links.source_ids) == np.array(links.target_ids))),
                                                    4),
                            "recall10": round(r, 4), "gap_to_supervised": round(r_sup - r, 4),
                            "top1": round(top1(geh_map.transform, oldA, newA), 4),
                            "cosine": round(cosine(geh_map.transform, oldA, newA), 4), "validation": vrec(v),
                            "grown_links": v.get("grown_links")})
            else:
                row["fit_s"] = round(time.perf_counter() - t0, 1)
            merge([row])
            print(f"  seed {seed} GEH: {'REFUSED ' + str(message)[:120] if refused else 'accepted'} "
                  f"R@10 {row.get('recall10')} refined {row.get('refined_recall10')} top-1 {row.get('top1')} "
                  f"links {row.get('links')} "
                  f"precision {row.get('link_precision')} {row['fit_s']:.0f}s", flush=True)


def queries_probe(corpus: str, a: str, b: str, seed: int = 0) -> dict:
    """The tool's validation of the supervised map on query vectors (short texts, a harder distribution): top-1 and
    validation of the true map where the corpus is harder, on the same 5,000 / 5,000 halves."""
    data = DATA / corpus
    old, new = embeddings(data, a, "queries"), embeddings(data, b, "queries")
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(old))
    A, B = perm[: len(perm) // 2], perm[len(perm) // 2:]
    keep_a = old[A].any(axis=1) & new[A].any(axis=1)
    oldA, newA = old[A][keep_a], new[A][keep_a]
    sup = procrustes(oldA[:N_SUPERVISED], newA[:N_SUPERVISED])
    with tempfile.TemporaryDirectory() as tmp:
        src = open_collection(store(Path(tmp) / "a", oldA, ids_of(A[keep_a])))
        tgt = open_collection(store(Path(tmp) / "b", new[B], ids_of(B)))
        used_a, used_b = src.sample(SAMPLE, seed=seed), tgt.sample(SAMPLE, seed=seed + 1)
        v = check_map(sup, src, tgt, used_a, used_b, seed=seed, force=True, what="", advice="")
    return {"corpus": corpus, "pair": f"{a}->{b}", "kind": "queries", "seed": seed,
            "supervised_top1": round(top1(sup.transform, oldA, newA), 4), "supervised_validation": vrec(v)}


def consensus(corpus: str, a: str, b: str, seed: int = 0) -> dict:
    """Every start of the default schedule run to the end (``restart_margin`` out of reach; nothing else changed) on
    the text-gone halves: each start's top-1 and label-free score, and how often two starts' maps send a row of the
    collection to the same nearest new-model doc (label-free: could consensus of independent starts tell a true map
    from a wrong optimum?)."""
    data = DATA / corpus
    old, new = embeddings(data, a), embeddings(data, b)
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(old))
    A, B = perm[: len(perm) // 2], perm[len(perm) // 2:]
    est = Probe(random_state=seed, restart_margin=1e9)
    t0 = time.perf_counter()
    est.fit(old[A], new[B])
    seconds = time.perf_counter() - t0
    Xc = l2_normalize(old[A] - est.source_mean_.astype(np.float32))
    Yc = new[B] - est.target_mean_.astype(np.float32)
    nearest = {i: metrics.top_k(Xc[:2000] @ W.astype(np.float32), Yc, 1)[:, 0] for i, W in est.start_W.items()}
    starts = [{"restart": r["restart"], "init": r["init"], "score": round(r["score"], 4), "gain": round(r["gain"], 4),
               "top1": round(centred_top1(est.start_W[r["restart"]], est.source_mean_, est.target_mean_,
                                          old[A][TOP1], new[A][TOP1]), 4)} for r in est.restarts_]
    agree = {f"{i}-{j}": round(float(np.mean(nearest[i] == nearest[j])), 4)
             for i in sorted(nearest) for j in sorted(nearest) if i < j}
    return {"corpus": corpus, "pair": f"{a}->{b}", "seed": seed, "starts": starts, "pairwise_agreement": agree,
            "seconds": round(seconds, 1), "load": load()}


def assignment_cosine(W, mu_a, mu_b, X, Y) -> float:
    """Mean cosine of the one-to-one matching that maximises it between the mapped centred unit rows ``X`` and the
    centred unit rows ``Y`` (the transport objective a fit from unpaired samples climbs, at zero temperature)."""
    from scipy.optimize import linear_sum_assignment
    S = (l2_normalize(X - np.asarray(mu_a, np.float32)) @ np.asarray(W, np.float32)) @ \
        l2_normalize(Y - np.asarray(mu_b, np.float32)).T
    rows, cols = linear_sum_assignment(-S)
    return float(S[rows, cols].mean())


def top_block_energy(W, X, Y, mu_a, mu_b, k: int = 20) -> float:
    """Share of the top ``k`` principal directions of ``X`` that ``W`` sends into the top ``k`` of ``Y`` (1: the map
    lines the two spaces' largest variances up exactly)."""
    def axes(Z, mu):
        Z = l2_normalize(Z - np.asarray(mu, np.float32))
        return np.linalg.svd(Z - Z.mean(axis=0), full_matrices=False)[2][:k].T
    return float(np.sum((axes(X, mu_a).T @ np.asarray(W, np.float32) @ axes(Y, mu_b)) ** 2) / k)


def halves(corpus: str, a: str, b: str) -> tuple:
    """The probes' data: old and new vectors of half A's docs, new vectors of half B's, new-model queries of A."""
    data = DATA / corpus
    old, new = embeddings(data, a), embeddings(data, b)
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(old))
    A, B = perm[: len(perm) // 2], perm[len(perm) // 2:]
    return old[A], new[A], new[B], embeddings(data, b, "queries")[A]


def gap_probe(corpus: str, a: str, b: str, seed: int = 0) -> dict:
    """Why the unsupervised map serves below the supervised one (labels used only to diagnose). The default
    ``MiniVec2Vec`` fitted on the first half (2,500 + 2,500 rows) and on all of the halves (5,000 + 5,000): served
    Recall@10 of each beside the supervised map's; the objective a fit from unpaired samples climbs (the best
    one-to-one matching's mean cosine) for the fitted map and for the true map (centred Procrustes on all 5,000 true
    pairs of A), on the rows the half fit saw and on the other half; and how much each map lines up the two spaces'
    20 largest principal directions."""
    XA, YA, YB, QA = halves(corpus, a, b)
    h = len(XA) // 2
    sup = procrustes(XA[:N_SUPERVISED], YA[:N_SUPERVISED])
    true = OrthogonalProcrustes(center=True).fit(XA, YA).rotation_
    row = {"corpus": corpus, "pair": f"{a}->{b}", "seed": seed, "supervised": served(sup.transform, XA, QA),
           "true_all_pairs": served(OrthogonalProcrustes(center=True).fit(XA, YA).transform, XA, QA), "fits": []}
    for n in (h, len(XA)):
        t0 = time.perf_counter()
        est = mv_module.MiniVec2Vec(random_state=seed).fit(XA[:n], YB[:n])
        fit = {"rows": n, "seconds": round(time.perf_counter() - t0, 1), "load": load(),
               "passed": bool((est.validation_ or {}).get("passed", False)),
               "served": served(est.transform, XA, QA)}
        fit["gap"] = round(row["supervised"] - fit["served"], 4)
        mu = (est.source_mean_, est.target_mean_)
        fit["objective_seen"] = {"fitted": assignment_cosine(est.matrix_, *mu, XA[:h], YB[:h]),
                                 "true": assignment_cosine(true, *mu, XA[:h], YB[:h])}
        if n == h:
            fit["objective_unseen"] = {"fitted": assignment_cosine(est.matrix_, *mu, XA[h:], YB[h:]),
                                       "true": assignment_cosine(true, *mu, XA[h:], YB[h:])}
        fit["top20_energy"] = {"fitted": top_block_energy(est.matrix_, XA, YB, *mu),
                               "true": top_block_energy(true, XA, YB, *mu)}
        row["fits"].append(fit)
        print(corpus, a, b, fit, flush=True)
    return row


def by_direction(corpus: str, a: str, b: str, seed: int = 0, ks=(25, 50, 100, 200)) -> dict:
    """Where the unsupervised map loses (labels used only to diagnose): the default ``MiniVec2Vec`` fitted on all
    5,000 + 5,000 rows, and hybrids of it with the true map (centred Procrustes on all 5,000 true pairs of A) that
    take the true map on the old space's ``k`` largest principal directions and the fitted map on the rest, or the
    reverse; served Recall@10 of each (the fitted map's means and scale for all, so only the rotation differs)."""
    XA, YA, YB, QA = halves(corpus, a, b)
    t0 = time.perf_counter()
    est = mv_module.MiniVec2Vec(random_state=seed).fit(XA, YB)
    fitted, mu_a, mu_b, scale = est.matrix_, est.source_mean_, est.target_mean_, est.scale_
    true = OrthogonalProcrustes(center=True).fit(XA, YA).rotation_
    axes = np.linalg.svd(XA - mu_a, full_matrices=False)[2].T   # the old space's principal directions, largest first

    def serve(W) -> float:
        return served(lambda X: scale * (X - mu_a) @ W + mu_b, XA, QA)

    row = {"corpus": corpus, "pair": f"{a}->{b}", "seed": seed, "seconds": round(time.perf_counter() - t0, 1),
           "passed": bool((est.validation_ or {}).get("passed", False)), "load": load(),
           "supervised": served(procrustes(XA[:N_SUPERVISED], YA[:N_SUPERVISED]).transform, XA, QA),
           "fitted": serve(fitted), "true": serve(true), "true_on_top": {}, "fitted_on_top": {}}
    for k in ks:
        P = axes[:, :k] @ axes[:, :k].T
        row["true_on_top"][str(k)] = serve(P @ true + (np.eye(len(P)) - P) @ fitted)
        row["fitted_on_top"][str(k)] = serve(P @ fitted + (np.eye(len(P)) - P) @ true)
    print(row, flush=True)
    return row


def basin(corpus: str, a: str, b: str, seed: int = 0) -> dict:
    """Search or objective (labels used only to diagnose)? For a pair the fit refuses: the default ``MiniVec2Vec``
    fitted on all 5,000 + 5,000 rows (kept whatever its validation says) and the true map (centred Procrustes on all
    5,000 true pairs of A), each as it is and after the tool's transport polish (10 rounds of Procrustes on the
    entropic transport plan, inverse temperature 20, on every row), with the matching objective every unpaired fit
    climbs (the best one-to-one matching's mean cosine, old A against new B) and top-1 on A's last 2,000 items. If the
    true map's polished basin scores higher than the fit's, the objective knows the right map and the starts never
    reached it. Then how much of the true map a start needs for the polish to reach that basin, and whether the
    centroid start's matching could find it (labels: the true permutation of the centroids)."""
    from scipy.optimize import linear_sum_assignment

    from vecbridge.numeric.kmeans import kmeans
    from vecbridge.numeric.linalg import polar
    from vecbridge.numeric.transport import transport_procrustes

    XA, YA, YB, _ = halves(corpus, a, b)
    t0 = time.perf_counter()
    est = mv_module.MiniVec2Vec(random_state=seed).fit(XA, YB)
    mu = (est.source_mean_, est.target_mean_)
    rows_a, rows_b = (l2_normalize(Z - np.asarray(m, np.float32)) for Z, m in ((XA, mu[0]), (YB, mu[1])))
    true = OrthogonalProcrustes(center=True).fit(XA, YA).rotation_
    row = {"corpus": corpus, "pair": f"{a}->{b}", "seed": seed, "seconds": round(time.perf_counter() - t0, 1),
           "passed": bool((est.validation_ or {}).get("passed", False)), "load": load(),
           "starts": [{k: r.get(k) for k in ("init", "n_clusters", "gain", "passed")} for r in est.restarts_]}
    for name, W in (("fitted", est.matrix_), ("true", true)):
        polished = transport_procrustes(rows_a, rows_b, np.asarray(W, np.float32), n_iter=10, beta=20.0)
        for kind, M in ((name, W), (f"{name}_polished", polished)):
            row[kind] = {"objective": assignment_cosine(M, *mu, XA, YB),
                         "top1": centred_top1(M, *mu, XA[TOP1], YA[TOP1])}
    # how much of the true map a start needs: a blend t * true + (1 - t) * a random orthogonal map, made
    # orthogonal, polished for 30 rounds
    rng = np.random.default_rng(seed)
    noise = np.asarray(polar(rng.standard_normal(true.shape)), np.float32)
    row["blends"] = []
    for t in (0.05, 0.1, 0.2):
        W0 = np.asarray(polar(t * true + (1 - t) * noise), np.float32)
        W = transport_procrustes(rows_a, rows_b, W0, n_iter=30, beta=20.0)
        row["blends"].append({"t": t, "start_top1": centred_top1(W0, *mu, XA[TOP1], YA[TOP1]),
                              "polished_top1": centred_top1(W, *mu, XA[TOP1], YA[TOP1])})
    # the centroid start's matching: does the true permutation of 20 centroids (the true map's best one-to-one
    # matching of them) score higher under the matching's own objective than the one the solver finds?
    runs = []
    for _ in range(8):
        C_a, C_b = (kmeans(Z, 20, rng, max_iter=30)[0] for Z in (rows_a, rows_b))
        S_a, S_b = (mv_module._centroid_similarity(C, "cosine") for C in (C_a, C_b))
        found, score = mv_module.qap_2opt(S_a, S_b, n_restarts=30, rng=rng)
        r, c = linear_sum_assignment(-(l2_normalize(C_a) @ true) @ l2_normalize(C_b).T)
        right = c[np.argsort(r)]
        runs.append({"found": float(score), "true": float(mv_module.qap_objective(S_a, S_b, right)),
                     "agreement": float(np.mean(found == right))})
    row["centroid_matchings"] = runs
    print(row, flush=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", default="wordnet,foldoc")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--pairs", default=",".join(f"{a}:{b}" for a, b in PAIRS))
    ap.add_argument("--queries-probe", action="store_true", help="only the query-vector validation probe")
    ap.add_argument("--consensus", action="store_true", help="only the every-start consensus probe")
    ap.add_argument("--gap-probe", action="store_true", help="only the probe of the unsupervised map's gap")
    ap.add_argument("--basin", action="store_true",
                    help="only the probe of a refused pair: does the objective prefer the true map's basin?")
    ap.add_argument("--by-direction", action="store_true",
                    help="only the probe of where (which principal directions) the unsupervised map loses")
    ap.add_argument("--only", choices=("unsupervised", "geh"), help="only this column of the table")
    ap.add_argument("--geh-seeds", type=int, default=N_SEEDS,
                    help="GEH fits only, from this many seed pairs (recorded as the mode 'geh, N seeds')")
    ap.add_argument("--rows", type=int, help="unsupervised fits only, on collections of this many rows a side")
    ap.add_argument("--overlap", type=int, help="unsupervised fits only, the new side holding this many of the "
                                                 "collection's own items (2308: GEH's new side)")
    args = ap.parse_args()
    merge(machine=machine(), protocol=__doc__.split("Run:")[0].strip(),
          command="OPENBLAS_NUM_THREADS=1 python bench/text_gone.py [--corpora C] [--seeds 0,1,2]")
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",")]
    if args.consensus:
        for corpus in args.corpora.split(","):
            for a, b in pairs:
                c = consensus(corpus, a, b)
                print(c, flush=True)
                merge(consensus=[c])
        return
    for name, probe in (("basin", basin), ("by_direction", by_direction), ("gap_probe", gap_probe)):
        if getattr(args, name):   # one probe per run, each pair's row merged as soon as it is measured
            for corpus in args.corpora.split(","):
                for a, b in pairs:
                    merge(**{name: [probe(corpus, a, b)]})
            return
    if args.queries_probe:
        probes = []
        for corpus in args.corpora.split(","):
            for a, b in pairs:
                p = queries_probe(corpus, a, b)
                print(p, flush=True)
                probes.append(p)
        merge(probes=probes)
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="text_gone_") as tmp:
        for corpus in args.corpora.split(","):
            for a, b in pairs:
                run_pair(corpus, a, b, seeds, Path(tmp), rows=args.rows, overlap=args.overlap, n_seeds=args.geh_seeds,
                         modes=(("unsupervised",) if args.rows or args.overlap is not None else ("geh",)
                                if args.geh_seeds != N_SEEDS else (args.only,) if args.only else ("unsupervised", "geh")))
    print(f"done in {time.perf_counter() - t_all:.0f}s", flush=True)


if __name__ == "__main__":
    main()
