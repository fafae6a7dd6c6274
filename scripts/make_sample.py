"""Build the small real sample bundled in ``vecbridge/data/wordnet_sample``.

Where it comes from: ``../shared/data/wordnet`` (WordNet 3.0 synsets, query = lemma list, doc = gloss; embedded
by the real all-MiniLM-L6-v2 and all-mpnet-base-v2 models, raw float16 outputs; see that folder's README). Its rows
are already a seeded random permutation of the eligible synsets, so the first ``N_ITEMS`` rows are a uniform sample.

What is kept (float16, exactly the source values, nothing normalised):

* ``docs_minilm6`` / ``docs_mpnet``: the gloss of every sampled item under both models (the paired "collection");
* ``queries_minilm6`` / ``queries_mpnet``: the lemma-list query of the last ``N_QUERIES`` items only (query i is
  relevant to doc ``N_ITEMS - N_QUERIES + i``), enough to measure retrieval retention on a held-out split while
  keeping the package under 5 MB;
* ``items.jsonl``: id, part of speech, query text and doc text of every sampled item, plus the WordNet licence.

Run from the repository root: ``python scripts/make_sample.py [--source ../shared/data/wordnet]``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np

N_ITEMS = 1500
N_QUERIES = 500
OUT = Path(__file__).resolve().parents[1] / "vecbridge" / "data" / "wordnet_sample"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "wordnet"))
    args = parser.parse_args()
    src = Path(args.source)
    OUT.mkdir(parents=True, exist_ok=True)

    arrays = {
        "docs_minilm6": np.load(src / "minilm6_docs.npy")[:N_ITEMS],
        "docs_mpnet": np.load(src / "mpnet_docs.npy")[:N_ITEMS],
        "queries_minilm6": np.load(src / "minilm6_queries.npy")[N_ITEMS - N_QUERIES : N_ITEMS],
        "queries_mpnet": np.load(src / "mpnet_queries.npy")[N_ITEMS - N_QUERIES : N_ITEMS],
    }
    for name, arr in arrays.items():
        assert arr.dtype == np.float16, name
    np.savez(OUT / "vectors.npz", **arrays)

    with open(src / "items.jsonl", encoding="utf-8") as fh, open(OUT / "items.jsonl", "w", encoding="utf-8") as out:
        for i, line in enumerate(fh):
            if i >= N_ITEMS:
                break
            item = json.loads(line)
            out.write(json.dumps({k: item[k] for k in ("id", "pos", "query", "doc")}, ensure_ascii=False) + "\n")
    shutil.copyfile(src / "LICENSE.WordNet", OUT / "LICENSE.WordNet")

    digest = hashlib.sha256((OUT / "vectors.npz").read_bytes()).hexdigest()
    size = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {OUT} ({size / 1e6:.2f} MB, vectors.npz sha256 {digest[:16]})")


if __name__ == "__main__":
    main()
