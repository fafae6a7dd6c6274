"""Alignment quality on real embeddings: the bundled sample (always) and ../shared/data (when present)."""
from __future__ import annotations

import numpy as np
import pytest

from vecbridge import metrics
from vecbridge.align import LinearMap, NoMap, OrthogonalProcrustes

from .conftest import SHARED_WORDNET


def test_bundled_sample_is_real_and_small(sample):
    assert sample.docs_old.shape == (1500, 384) and sample.docs_new.shape == (1500, 768)
    assert sample.queries_new.shape == (500, 768)
    # raw (un-normalised) MiniLM outputs, as the data set's README describes
    norms = np.linalg.norm(sample.docs_old, axis=1)
    assert 1.5 < norms.min() and norms.max() < 9 and abs(norms.mean() - 4.88) < 0.3
    # MiniLM's own retrieval on these queries is far from random: the vectors carry meaning
    assert metrics.recall_at_k(sample.queries_old, sample.docs_old, sample.query_rows, 10) > 0.6


def test_procrustes_minilm_to_mpnet_on_held_out_items(sample):
    fit, held = slice(0, 1000), slice(1000, 1500)
    est = OrthogonalProcrustes().fit(sample.docs_old[fit], sample.docs_new[fit])
    mapped = est.transform(sample.docs_old)
    pq = metrics.pair_quality(mapped[held], sample.docs_new[held])
    assert pq.top1 > 0.95
    nomap = metrics.pair_quality(NoMap().fit(sample.docs_old[fit], sample.docs_new[fit]).transform(sample.docs_old[held]),
                                 sample.docs_new[held])
    assert nomap.top1 < 0.05
    ret = metrics.recall_retention(sample.queries_new, mapped, sample.docs_new, sample.query_rows, 10)
    assert 0.75 < ret["retention"] < 1.0
    assert est.residual_ < est.bound_


def test_orthogonal_beats_unregularised_linear_on_few_pairs(sample):
    """Seed 000: the unconstrained map overfits; on 500 pairs for 384 x 768 parameters the orthogonal map wins."""
    fit, held = slice(0, 500), slice(1000, 1500)
    ortho = OrthogonalProcrustes().fit(sample.docs_old[fit], sample.docs_new[fit])
    linear = LinearMap().fit(sample.docs_old[fit], sample.docs_new[fit])
    top1 = lambda est: metrics.pair_quality(est.transform(sample.docs_old[held]), sample.docs_new[held]).top1
    assert top1(ortho) > top1(linear)


@pytest.mark.skipif(not SHARED_WORDNET.is_dir(), reason="../shared/data/wordnet not present")
def test_shared_wordnet_minilm6_to_minilm3_held_out():
    X = np.load(SHARED_WORDNET / "minilm6_docs.npy").astype(np.float32)
    Y = np.load(SHARED_WORDNET / "minilm3_docs.npy").astype(np.float32)
    est = OrthogonalProcrustes().fit(X[:3000], Y[:3000])
    pq = metrics.pair_quality(est.transform(X[5000:]), Y[5000:])
    assert pq.top1 > 0.97
