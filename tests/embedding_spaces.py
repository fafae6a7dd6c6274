"""What the embedder tests share: a map fitted on the bundled sample, a small model upgrade on the file store (the
lookup model) moved between stages by a separate ``vecbridge upgrade`` process, as an operator would while an
application keeps running, and a bit-for-bit comparison."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.conftest import write_collection
from tests.embedders import mpnet_lookup
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.jobs.upgrade import start
from vecbridge.jobs.upgrade.state import UpgradeState
from vecbridge.serving.translate import translate_queries

#: the new model: all-mpnet-base-v2's recorded vectors of the sample's glosses and queries
NEW = "vecbridge.sample:recorded_new_model"
#: the upgrade's model: the same vectors of the glosses
MODEL = "tests.embedders:mpnet_lookup"
ROOT = Path(__file__).resolve().parents[1]


def sample_alignment(folder: Path, sample) -> Path:
    """MiniLM -> MPNet, a rotation fitted on the first 1,000 glosses of the sample."""
    est = OrthogonalProcrustes().fit(sample.docs_old[:1000], sample.docs_new[:1000])
    return Alignment.from_estimator(est, source_model="minilm6", target_model="mpnet").save(folder / "align.vb")


def same_bits(a, b) -> bool:
    """Float32 arrays (or lists of their values) equal bit for bit."""
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def start_upgrade(tmp_path, sample, n: int = 400, fit: int = 200) -> Path:
    """A started upgrade of the first ``n`` glosses (``fit`` of them re-embedded to fit the map), new vectors in a
    collection of their own; returns its state file."""
    old = write_collection(f"file://{tmp_path}/old", sample.ids[:n], sample.docs_old[:n],
                           [{"text": it["doc"]} for it in sample.items[:n]])
    state = tmp_path / "docs.upgrade.sqlite"
    start(old.url, model=MODEL, text_field="text", state_path=state, to=f"file://{tmp_path}/new", fit_sample=fit)
    return state


def upgrade_vectors(state: Path, texts: list[str]) -> tuple[np.ndarray, np.ndarray, Alignment]:
    """``(the upgrade model's own vectors of texts, the same translated into the old space, the upgrade's map)``."""
    st = UpgradeState.open(state)
    try:
        alignment = Alignment.load(st.meta["alignment"])
    finally:
        st.close()
    native = mpnet_lookup(texts)
    return native, translate_queries(alignment, native, alignment.metadata["metric"]), alignment


def move(state: Path, verb: str) -> None:
    """``vecbridge upgrade <verb> --state STATE`` in a process of its own."""
    r = subprocess.run([sys.executable, "-c", "from vecbridge.cli import main; main()", "upgrade", verb, "--state",
                        str(state)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def against_wrap(folder: Path, sample, align_file: Path, rows, hits: list[list]) -> tuple[float, float, float]:
    """``(recall@10 of hits, recall@10 of search --wrap over the same old vectors, share of queries both answer with
    the same ids)``: ``hits[i]``, the ids an application found for the query of the sample's row ``rows[i]``."""
    from vecbridge.sample import recorded_new_model
    from vecbridge.serving.wrap import wrap

    old = write_collection(f"file://{folder}/old_all", sample.ids, sample.docs_old)
    ids_wrap, _ = wrap(old, align_file).search(recorded_new_model([sample.items[r]["query"] for r in rows]), 10)
    relevant = [sample.ids[r] for r in rows]
    recall = float(np.mean([rel in h for rel, h in zip(relevant, hits)]))
    recall_wrap = float(np.mean([rel in h for rel, h in zip(relevant, ids_wrap)]))
    return recall, recall_wrap, float(np.mean([set(h) == set(w) for h, w in zip(hits, ids_wrap)]))
