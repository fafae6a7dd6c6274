"""SpaceEmbedder: new-model texts -> vectors in the space the index is in now. With an alignment: bit for bit what
``search --wrap`` sends to the old index; with an upgrade: translated before the cutover, the model's own after it,
translated again after a rollback, each stage moved by a separate ``vecbridge upgrade`` process while the embedder
lives. Real sample vectors, the file store."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.conftest import write_collection
from tests.embedders import mpnet_lookup
from tests.embedding_spaces import NEW, against_wrap, move, same_bits, sample_alignment, start_upgrade, upgrade_vectors
from vecbridge.align import Alignment
from vecbridge.errors import InputError
from vecbridge.jobs.upgrade.state import UpgradeState
from vecbridge.sample import recorded_new_model
from vecbridge.serving import stage as stage_module
from vecbridge.serving.embedder import MappedEmbeddings, SpaceEmbedder
from vecbridge.serving.translate import translate_queries

pytestmark = pytest.mark.filterwarnings("ignore::vecbridge.align.FewPairsWarning")


@pytest.fixture(scope="module")
def align_file(tmp_path_factory, sample):
    return sample_alignment(tmp_path_factory.mktemp("align"), sample)


def _queries(sample, n=64):
    return [sample.items[row]["query"] for row in sample.query_rows[:n]]


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2"])
def test_translated_vectors_are_translate_queries_bit_for_bit(align_file, sample, metric):
    texts = _queries(sample)
    emb = SpaceEmbedder(NEW, alignment=align_file, metric=metric)
    got = emb.embed(texts)
    assert got.dtype == np.float32
    alignment = Alignment.load(align_file)
    assert same_bits(got, translate_queries(alignment, recorded_new_model(texts), metric))
    assert same_bits(emb.embed(texts, kind="document"), got)
    assert emb.space() == {"space": "old", "translated": True, "model": NEW, "dim": 384, "stage": None,
                           "serving": None, "alignment": alignment.fingerprint, "metric": metric}


def test_the_metric_defaults_to_the_alignments_and_no_alignment_is_the_models_own(align_file, sample):
    texts = _queries(sample, 8)
    alignment = Alignment.load(align_file)
    assert alignment.metadata["metric"] == "cosine"
    assert same_bits(SpaceEmbedder(NEW, alignment=alignment).embed(texts),
                     translate_queries(alignment, recorded_new_model(texts), "cosine"))
    native = SpaceEmbedder(NEW)
    assert native.space()["dim"] is None   # not known before the model ran
    assert same_bits(native.embed(texts), recorded_new_model(texts))
    assert native.space() == {"space": "new", "translated": False, "model": NEW, "dim": 768, "stage": None,
                              "serving": None, "alignment": None, "metric": None}
    assert native.embed([]).shape == (0, 768)


def test_search_with_the_translated_vectors_finds_what_search_wrap_finds(tmp_path, align_file, sample):
    old = write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old)
    rows = sample.query_rows[:200]
    ids, _ = old.search(SpaceEmbedder(NEW, alignment=align_file).embed([sample.items[r]["query"] for r in rows]), 10)
    recall, recall_wrap, same = against_wrap(tmp_path, sample, align_file, rows, ids)
    assert recall > 0.5 and recall == recall_wrap and same == 1.0


def test_the_upgrade_stage_decides_the_space_and_a_cutover_elsewhere_is_seen_at_once(tmp_path, sample):
    state = start_upgrade(tmp_path, sample)
    emb = SpaceEmbedder(upgrade=state)   # the upgrade's model, read from its state
    texts = [it["doc"] for it in sample.items[:40]]
    native, translated, alignment = upgrade_vectors(state, texts)
    assert not np.allclose(native[:, :384], translated)

    assert same_bits(emb.embed(texts), translated)
    assert emb.space() == {"space": "old", "translated": True, "model": "tests.embedders:mpnet_lookup", "dim": 384,
                           "stage": "mapped", "serving": "old", "alignment": alignment.fingerprint,
                           "metric": "cosine"}
    move(state, "cutover")
    assert same_bits(emb.embed(texts), native)
    assert emb.space()["space"] == "new" and emb.space()["stage"] == "cutover" and emb.space()["dim"] == 768
    move(state, "rollback")
    assert same_bits(emb.embed(texts), translated)
    assert emb.space()["stage"] == "rolled-back" and emb.space()["serving"] == "old"
    move(state, "cutover")
    assert same_bits(emb.embed(texts, kind="document"), native)


def test_the_stage_is_read_again_only_when_the_state_changed(tmp_path, sample, monkeypatch):
    """An unchanged state costs a stat and a header read, not a SQLite query; a write is seen even when the file's
    mtime and size come out as before (two commits in one clock tick): SQLite's change counter moves."""
    state = start_upgrade(tmp_path, sample, n=300, fit=150)
    loads = []
    real = stage_module.StageWatch._load
    monkeypatch.setattr(stage_module.StageWatch, "_load", lambda self: loads.append(1) or real(self))
    emb = SpaceEmbedder(upgrade=state)
    texts = [it["doc"] for it in sample.items[:5]]
    for _ in range(5):
        emb.embed(texts)
    assert len(loads) == 1
    before = os.stat(state)
    st = UpgradeState.open(state)
    st.update(serving="new", stage="cutover")   # as a cutover's last write does
    st.close()
    os.utime(state, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(state).st_size == before.st_size
    assert same_bits(emb.embed(texts), mpnet_lookup(texts))
    assert len(loads) == 2


def test_embedding_from_a_thread_pool_gives_what_one_thread_gives(tmp_path, sample):
    state = start_upgrade(tmp_path, sample, n=300, fit=150)
    emb = SpaceEmbedder(upgrade=state)
    batches = [[it["doc"] for it in sample.items[i:i + 7]] for i in range(0, 280, 7)]
    serial = [emb.embed(b) for b in batches]
    with ThreadPoolExecutor(8) as pool:
        parallel = list(pool.map(emb.embed, batches))
        spaces = list(pool.map(lambda _: emb.space()["space"], range(16)))
    assert all(same_bits(a, b) for a, b in zip(serial, parallel))
    assert set(spaces) == {"old"}


def test_mapped_embeddings_is_the_space_embedder_with_an_alignment(align_file, sample):
    texts = _queries(sample, 4)
    emb = MappedEmbeddings(recorded_new_model, align_file)
    assert isinstance(emb, SpaceEmbedder)
    assert same_bits(emb(texts), translate_queries(Alignment.load(align_file), recorded_new_model(texts), "cosine"))
    assert np.asarray(emb.embed_documents(texts)).shape == (4, 384) and len(emb.embed_query(texts[0])) == 384


def test_bad_input_is_refused_in_one_line(tmp_path, align_file, sample):
    cases = [
        (lambda: SpaceEmbedder(NEW, alignment=align_file, upgrade=tmp_path / "u.sqlite"), "not both"),
        (lambda: SpaceEmbedder(), "name the new model"),
        (lambda: SpaceEmbedder(upgrade=tmp_path / "missing.upgrade.sqlite"), "no upgrade state at"),
        (lambda: SpaceEmbedder(recorded_new_model, device="cpu"), "model options (device) apply to a model loaded"),
        (lambda: SpaceEmbedder("tests.embedders:minilm_lookup", alignment=align_file).embed(
            [sample.items[0]["doc"]]), "gives 384-d vectors but the alignment translates 768-d"),
        (lambda: SpaceEmbedder(NEW).embed(["x"], kind="passage"), "kind must be one of query, document"),
        (lambda: SpaceEmbedder(NEW, alignment=align_file, metric="hamming"), "metric must be one of cosine, dot, l2"),
    ]
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 10)
    cases.append((lambda: SpaceEmbedder(upgrade=tmp_path / "junk.sqlite"), "is not a usable upgrade state file"))
    for make, words in cases:
        with pytest.raises(InputError) as err:
            make()
        assert words in str(err.value) and "\n" not in str(err.value)


def test_model_options_reach_load_model(monkeypatch):
    seen = {}

    def fake_load_model(spec, **options):
        seen.update(spec=spec, **options)
        return lambda texts: np.ones((len(texts), 3), dtype=np.float32)

    monkeypatch.setattr("vecbridge.serving.embedder.load_model", fake_load_model)
    emb = SpaceEmbedder("some/model", device="cuda:1", batch_size=8)
    assert seen == {"spec": "some/model", "device": "cuda:1", "batch_size": 8}
    assert emb.embed(["a", "b"]).shape == (2, 3)
