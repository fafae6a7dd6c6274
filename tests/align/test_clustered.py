"""ClusteredProcrustes: exactness on known piecewise maps, fallback and shrinkage, continuity of the soft
assignment, streaming, and the "clustered" artifact kind (round trip, refusals, wrapped search)."""
from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from vecbridge import metrics
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.align.clustered import ClusteredProcrustes, cluster_weights, polar_factor
from vecbridge.errors import ArtifactError, InputError
from vecbridge.numeric.kmeans import spherical_kmeans

SHARED_WORDNET = Path(__file__).resolve().parents[3] / "shared" / "data" / "wordnet"


def rot(d_in, d_out, rng):
    Q = np.linalg.qr(rng.normal(size=(d_out, d_out)))[0]
    return Q[:d_in]  # d_in orthonormal rows: an isometric embedding R^d_in -> R^d_out


def piecewise(rng, n=400, d=16, d_out=24, noise=0.0):
    """Two tight groups of directions (around +e0 and -e0), each mapped by its own rotation."""
    c = np.zeros(d)
    c[0] = 1.0
    A = c + 0.25 * rng.normal(size=(n, d))
    B = -c + 0.25 * rng.normal(size=(n, d))
    R1, R2 = rot(d, d_out, rng), rot(d, d_out, rng)
    X = np.vstack([A, B])
    Y = np.vstack([A @ R1, B @ R2]) + noise * rng.normal(size=(2 * n, d_out))
    return X, Y, R1, R2


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.mark.parametrize("shape,rank", [((20, 30), 20), ((30, 20), 20), ((20, 30), 7), ((25, 25), 0)])
def test_polar_factor_matches_the_svd_solution(rng, shape, rank):
    A = rng.normal(size=(shape[0], rank)) @ rng.normal(size=(rank, shape[1])) if rank else np.zeros(shape)
    R = polar_factor(A)
    U, _, Vt = np.linalg.svd(A, full_matrices=False)
    small = min(shape)
    gram = R @ R.T if shape[0] <= shape[1] else R.T @ R
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-12)  # orthonormal even where A is rank deficient
    assert np.sum(R * A) == pytest.approx(np.sum((U @ Vt) * A), rel=1e-12, abs=1e-12)  # same optimum tr(R^T A)


def test_one_cluster_is_the_centred_global_map(rng):
    X = rng.normal(size=(300, 12))
    Y = X @ rot(12, 20, rng) + 0.3 + 0.05 * rng.normal(size=(300, 20))
    cp = ClusteredProcrustes(n_clusters=1).fit(X, Y)
    gp = OrthogonalProcrustes(center=True).fit(X, Y)
    np.testing.assert_allclose(cp.transform(X), gp.transform(X), atol=1e-10)
    np.testing.assert_allclose(cp.inverse_transform(Y), gp.inverse_transform(Y), atol=1e-10)
    assert cp.residual_ == pytest.approx(gp.residual_, rel=1e-9)


def test_recovers_two_local_rotations_exactly(rng):
    X, Y, R1, R2 = piecewise(rng)
    cp = ClusteredProcrustes(n_clusters=2, shrinkage=0, min_cluster_size=1, center=False, assignment="hard").fit(X, Y)
    # each cluster's map is one of the two true rotations, to float precision
    for R in cp.rotations_:
        assert min(np.abs(R - R1).max(), np.abs(R - R2).max()) < 1e-10
    assert abs(cp.residual_) < 1e-10  # from the sums: cancellation leaves ~1e-15
    glob = OrthogonalProcrustes().fit(X, Y)
    assert glob.residual_ > 0.1  # one rotation cannot do it
    np.testing.assert_allclose(cp.transform(X), Y, atol=1e-9)


def test_shrinkage_and_fallback_pull_towards_the_global_map(rng):
    X, Y, _, _ = piecewise(rng, noise=0.05)
    glob = ClusteredProcrustes(n_clusters=1).fit(X, Y).rotations_[0]
    huge = ClusteredProcrustes(n_clusters=2, shrinkage=1e12, assignment="hard").fit(X, Y)
    assert np.abs(huge.rotations_ - glob).max() < 1e-6
    thin = ClusteredProcrustes(n_clusters=2, min_cluster_size=10_000).fit(X, Y)
    assert thin.fallback_.all()
    assert np.abs(thin.rotations_ - glob).max() < 1e-12
    free = ClusteredProcrustes(n_clusters=2, shrinkage=0, min_cluster_size=1).fit(X, Y)
    assert not free.fallback_.any() and np.abs(free.rotations_ - glob).max() > 0.1


def test_soft_assignment_is_continuous_across_the_border(rng):
    X, Y, _, _ = piecewise(rng)
    kw = dict(n_clusters=2, shrinkage=0, min_cluster_size=1, center=False)
    hard = ClusteredProcrustes(assignment="hard", **kw).fit(X, Y)
    soft = ClusteredProcrustes(assignment="soft", temperature=0.05, **kw).fit(X, Y)
    a, b = X[0], X[-1]  # one point of each group: the segment crosses the border
    path = np.array([(1 - t) * a + t * b for t in np.linspace(0, 1, 2001)])
    step_hard = np.linalg.norm(np.diff(hard.transform(path), axis=0), axis=1).max()
    step_soft = np.linalg.norm(np.diff(soft.transform(path), axis=0), axis=1).max()
    typical = np.linalg.norm(b - a) / 2000
    assert step_hard > 100 * typical  # the hard map jumps at the border
    assert step_soft < 20 * typical  # the blended map moves by small steps
    W = soft.cluster_weights(path)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-12)


def test_weights_top_m_and_hard():
    C = np.eye(4)
    X = np.array([[1.0, 0.9, 0.8, 0.1]])
    assert (cluster_weights(X, C, assignment="hard") == np.array([[1, 0, 0, 0]])).all()
    W = cluster_weights(X, C, top_m=2, temperature=0.05)
    assert W[0, 2] == 0 and W[0, 3] == 0 and W[0, 0] > W[0, 1] > 0


def test_partial_fit_equals_fit_with_the_same_clusters(rng):
    X, Y, _, _ = piecewise(rng, noise=0.1)
    perm = rng.permutation(len(X))
    a, b = perm[:500], perm[500:]
    stream = ClusteredProcrustes(n_clusters=3, shrinkage=50).partial_fit(X[a], Y[a]).partial_fit(X[b], Y[b])
    once = ClusteredProcrustes(n_clusters=3, shrinkage=50, init=stream.centroids_).fit(X, Y)
    np.testing.assert_allclose(stream.rotations_, once.rotations_, atol=1e-10)
    np.testing.assert_allclose(stream.source_mean_, once.source_mean_, atol=1e-12)
    assert stream.n_pairs_ == len(X) and stream.residual_ == pytest.approx(once.residual_, rel=1e-9)
    with pytest.raises(InputError):
        stream.partial_fit(X[:5, :3], Y[:5])  # dimensions are fixed after the first batch


@pytest.mark.parametrize("family", ["rotation", "translation"])
@pytest.mark.parametrize("swap", [False, True])  # swap: a projection (d_src > d_tgt)
def test_residual_is_the_hard_in_sample_error(rng, family, swap):
    X, Y, _, _ = piecewise(rng, noise=0.2)
    if swap:
        X, Y = Y, X
    cp = ClusteredProcrustes(n_clusters=3, shrinkage=100, assignment="hard", family=family).fit(X, Y)
    direct = float(np.mean(np.sum((cp.transform(X) - Y) ** 2, axis=1)))
    assert cp.residual_ == pytest.approx(direct, rel=1e-8)
    assert cp.is_projection_ == swap


def test_translation_family_preserves_distances_within_a_cluster(rng):
    X, Y, _, _ = piecewise(rng, noise=0.2)
    cp = ClusteredProcrustes(n_clusters=2, family="translation", assignment="hard").fit(X, Y)
    labels = cp.cluster_weights(X).argmax(axis=1)
    i, j = np.flatnonzero(labels == labels[0])[:2]
    Z = cp.transform(X[[i, j]])
    assert np.linalg.norm(Z[0] - Z[1]) == pytest.approx(np.linalg.norm(X[i] - X[j]), rel=1e-10)
    assert np.abs(cp.translations_).max() > 0


def test_seeded_and_validated(rng):
    X, Y, _, _ = piecewise(rng, noise=0.1)
    a = ClusteredProcrustes(n_clusters=4, random_state=3).fit(X, Y)
    b = ClusteredProcrustes(n_clusters=4, random_state=3).fit(X, Y)
    np.testing.assert_array_equal(a.centroids_, b.centroids_)
    C = spherical_kmeans(X, 4, random_state=3)
    np.testing.assert_allclose(np.linalg.norm(C, axis=1), 1.0)
    with pytest.raises(InputError, match="not fitted"):
        ClusteredProcrustes().transform(X)
    with pytest.raises(InputError):
        ClusteredProcrustes(assignment="fuzzy").fit(X, Y)
    with pytest.raises(InputError, match="clusters"):
        ClusteredProcrustes(n_clusters=50).fit(X[:10], Y[:10])
    with pytest.raises(InputError, match="dimension"):
        a.transform(X[:, :5])
    with pytest.raises(InputError, match="shape"):
        ClusteredProcrustes(n_clusters=2, init=np.ones((3, X.shape[1]))).fit(X, Y)


# --- real embeddings -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_fit(sample):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cp = ClusteredProcrustes(n_clusters=3, shrinkage=300).fit(sample.docs_old[:1000], sample.docs_new[:1000])
    return cp


def test_real_sample_quality_and_inverse(sample, real_fit):
    held_old, held_new = sample.docs_old[1000:], sample.docs_new[1000:]
    mapped = real_fit.transform(held_old)
    assert mapped.dtype == np.float32 and mapped.shape == (500, 768)
    pq = metrics.pair_quality(mapped, held_new)
    ret = metrics.recall_retention(sample.queries_new, mapped, held_new)["retention"]
    assert pq.top1 > 0.97 and ret > 0.90  # measured: 1.000 and 0.93
    back = real_fit.inverse_transform(real_fit.transform(held_old.astype(np.float64)))
    cos = np.einsum("ij,ij->i", back, held_old) / np.linalg.norm(back, axis=1) / np.linalg.norm(held_old, axis=1)
    assert cos.min() > 0.998  # measured 0.9991 (3 residual corrections; 0.978 without)


# --- the artifact kind ------------------------------------------------------------------------------------------------
def test_artifact_round_trip(tmp_path, sample, real_fit):
    a = Alignment.from_estimator(real_fit, source_model="minilm6", target_model="mpnet")
    assert a.kind == "clustered" and a.metadata["schema_version"] == 1
    path = a.save(tmp_path / "c.vb")
    b = Alignment.load(path)
    X = sample.docs_old[1000:]
    np.testing.assert_allclose(b.transform(X.astype(np.float64)), real_fit.transform(X.astype(np.float64)),
                               atol=1e-12)
    np.testing.assert_allclose(b.transform(X), real_fit.transform(X), atol=1e-4)
    Qn = sample.queries_new
    np.testing.assert_allclose(b.inverse_transform(Qn.astype(np.float64)),
                               real_fit.inverse_transform(Qn.astype(np.float64)), atol=1e-12)
    assert b.fingerprint == a.fingerprint
    with safe_open_meta(path) as meta:
        assert meta["fit"]["clustered"]["n_clusters"] == 3
    # the assignment settings are part of what the map computes (same tensors, another assignment)
    hard = copy.copy(real_fit)
    hard.assignment = "hard"
    assert Alignment.from_estimator(hard).fingerprint != a.fingerprint


class safe_open_meta:
    def __init__(self, path):
        from safetensors import safe_open

        self.fh = safe_open(str(path), framework="np")

    def __enter__(self):
        return json.loads(self.fh.metadata()["vecbridge"])

    def __exit__(self, *exc):
        return False


def test_artifact_refuses_tampering_and_bad_shapes(tmp_path, real_fit):
    from safetensors.numpy import load_file, save_file

    path = Alignment.from_estimator(real_fit).save(tmp_path / "c.vb")
    tensors = load_file(str(path))
    with safe_open_meta(path) as meta:
        header = json.dumps(meta)
    tensors["rotations"][0, 0, 0] += 1e-3
    save_file(tensors, str(tmp_path / "edited.vb"), metadata={"vecbridge": header})
    with pytest.raises(ArtifactError, match="checksum"):
        Alignment.load(tmp_path / "edited.vb")
    # a consistent checksum but a missing cluster tensor: refused by shape validation
    bad = Alignment(dict(Alignment.load(path).tensors), json.loads(header))
    del bad.tensors["centroids"]
    bad.metadata.pop("sha256")
    bad.save(tmp_path / "bad.vb")
    with pytest.raises(ArtifactError, match="centroids"):
        Alignment.load(tmp_path / "bad.vb")


def test_existing_kinds_unchanged(tmp_path, rng):
    X = rng.normal(size=(200, 16))
    Y = X @ rot(16, 24, rng)
    est = OrthogonalProcrustes().fit(X, Y)
    a = Alignment.load(Alignment.from_estimator(est).save(tmp_path / "o.vb"))
    assert a.kind == "orthogonal"
    assert set(a.tensors) == {"matrix", "source_mean", "target_mean", "inverse_matrix", "singular_values"}
    assert "clustered" not in a.metadata["fit"]
    np.testing.assert_array_equal(a.transform(X), X @ est.rotation_)


def test_wrapped_search_with_a_clustered_alignment(sample, sample_stores, real_fit):
    from vecbridge.connectors import connect
    from vecbridge.jobs import wrap

    alignment = Alignment.from_estimator(real_fit)
    w = wrap(connect(sample_stores["old"]), alignment, overfetch=20)
    assert not w.exact  # not a global isometry: candidates are re-scored through the clustered map
    ids, scores = w.search(sample.queries_new[:20], k=10)
    pos = {i: j for j, i in enumerate(sample.ids)}
    mapped = alignment.transform(sample.docs_old)
    for q, row, sc in zip(sample.queries_new[:20], ids, scores):
        rows = [pos[i] for i in row]
        expect = metrics.prepare_vectors(mapped[rows], "cosine") @ metrics.prepare_vectors(q[None], "cosine")[0]
        np.testing.assert_allclose(sc, expect, atol=1e-5)
    hits = np.mean([sample.ids[1000 + i] in row for i, row in enumerate(ids)])
    assert hits > 0.5


@pytest.mark.skipif(not SHARED_WORDNET.is_dir(), reason="shared wordnet data absent")
def test_shared_wordnet_clustered_beats_global():
    X = np.load(SHARED_WORDNET / "minilm6_docs.npy").astype(np.float32)
    Y = np.load(SHARED_WORDNET / "minilm3_docs.npy").astype(np.float32)
    Q = np.load(SHARED_WORDNET / "minilm3_queries.npy").astype(np.float32)
    held = slice(8000, 10000)
    g = OrthogonalProcrustes().fit(X[:3000], Y[:3000])
    c = ClusteredProcrustes(n_clusters=4).fit(X[:3000], Y[:3000])
    r_g = metrics.recall_retention(Q[held], g.transform(X[held]), Y[held])["retention"]
    r_c = metrics.recall_retention(Q[held], c.transform(X[held]), Y[held])["retention"]
    assert r_c > r_g + 0.01  # measured: 0.899 vs 0.879 (2,000 held out, 4 clusters)
