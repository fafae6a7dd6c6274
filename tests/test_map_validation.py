"""Label-free validation of unsupervised and seed-grown maps (``vecbridge.align.validation``) and the refusals built
on it: ``fit --pairs unsupervised``, ``link --pairs unsupervised|geh:FILE`` and the report never pass a failed map
silently; ``--force`` keeps it, marked, and ``migrate`` warns before using it."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from vecbridge.align import Alignment
from vecbridge.align.validation import MapValidation, mnn_similarity, random_orthogonal, refine_icp, validate_map
from vecbridge.cli import main
from vecbridge.vectors import l2_normalize

from .conftest import write_collection

#: mini-vec2vec settings for the test's budget (test_minivec2vec.FAST): one start, as the paper runs it
FAST = dict(n_runs=5, qap_restarts=10, n_neighbors=10, refine1_iter=2, refine1_tol=0, refine1_neighbors=1,
            refine2_clusters=50, n_restarts=1, init="centroids", polish_iter=0)
FAST_ARGS = [a for k, v in FAST.items() for a in ("--param", f"{k}={v}")]
#: the tests refuse, force, link and report the same seeded fit of the same samples and validate several maps on the
#: same samples: each fit and each null distribution is computed once (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("reuse_deterministic_fits")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def text(result) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


class Affine:
    def __init__(self, W, mu_a, mu_b):
        self.W, self.mu_a, self.mu_b = W.astype(np.float32), mu_a, mu_b

    def transform(self, X):
        return (X - self.mu_a) @ self.W + self.mu_b


@pytest.fixture(scope="module")
def halves(sample):
    """Unpaired samples of real vectors: OLD items 0..749 (source) and items 750..1499 under a hidden isometry into
    768-d (target); Q is the true map."""
    Q = np.linalg.qr(np.random.default_rng(5).standard_normal((768, 768)))[0][:384]
    return sample.docs_old[:750], (sample.docs_old[750:] @ Q).astype(np.float32), Q


def noise_like(X, n, seed):
    """Vectors with X's mean and covariance and nothing else: no map can align X with them."""
    rng = np.random.default_rng(seed)
    L = np.linalg.cholesky(np.cov(X.T.astype(np.float64)) + 1e-6 * np.eye(X.shape[1]))
    return (X.mean(axis=0) + rng.standard_normal((n, X.shape[1])) @ L.T).astype(np.float32)


def test_the_true_map_passes_and_a_random_one_fails(halves):
    X, Y, Q = halves
    good = validate_map(Affine(Q, 0, 0), X, Y)
    assert isinstance(good, MapValidation) and good.passed and good.score >= good.threshold
    assert good.mnn_similarity > good.null_mean > good.random_similarity
    bad = validate_map(Affine(random_orthogonal(384, 768, np.random.default_rng(0)), 0, 0), X, Y)
    assert not bad.passed and bad.score < bad.threshold and "converged to a wrong alignment" in bad.reason
    assert set(good.as_dict()) >= {"score", "threshold", "passed", "reason", "null_mean", "null_std", "z",
                                    "mnn_fraction", "cycle_consistency"}


def test_a_wrong_map_refined_into_a_local_optimum_fails(halves):
    """The failure the issue saw (mini-vec2vec locked onto a wrong permutation): a random map refined by nearest-
    neighbour Procrustes scores far above random maps on MUSE's criterion alone, yet is refused."""
    X, Y, Q = halves
    rng = np.random.default_rng(1)
    A = l2_normalize(X - X.mean(0))
    B = l2_normalize(Y - Y.mean(0))
    W = refine_icp(A, B, random_orthogonal(384, 768, rng), n_iter=30, rng=rng)
    top1 = np.mean(np.argmax(l2_normalize(X @ W.astype(np.float32)) @ l2_normalize(X @ Q).T, axis=1)
                   == np.arange(len(X)))
    assert top1 < 0.05
    raw_random = mnn_similarity(l2_normalize(A @ random_orthogonal(384, 768, rng).astype(np.float32)), B)[0]
    assert mnn_similarity(l2_normalize(A @ W.astype(np.float32)), B)[0] > raw_random + 0.1
    v = validate_map(Affine(W, X.mean(0), Y.mean(0)), X, Y)
    assert not v.passed, v


def test_no_map_aligns_unrelated_vectors(halves):
    X, _, Q = halves
    v = validate_map(Affine(Q, 0, 0), X, noise_like(X @ Q, 750, 0))
    assert not v.passed


@pytest.fixture(scope="module")
def stores(tmp_path_factory, sample):
    root = tmp_path_factory.mktemp("validation")
    old = write_collection(f"file://{root}/old", sample.ids, sample.docs_old)
    Q = np.linalg.qr(np.random.default_rng(4).standard_normal((768, 768)))[0][:384]
    hidden = write_collection(f"file://{root}/hidden", [f"h{i}" for i in range(1500)],
                              (sample.docs_old @ Q).astype(np.float32))
    noise = write_collection(f"file://{root}/noise", [f"z{i}" for i in range(1500)],
                             noise_like(sample.docs_old @ Q, 1500, 1))
    return {"root": root, "old": old.url, "hidden": hidden.url, "noise": noise.url, "Q": Q}


def test_fit_unsupervised_refuses_a_failed_map_and_writes_nothing(stores):
    out = stores["root"] / "refused.vb"
    r = run("fit", "--source", stores["old"], "--target", stores["noise"], "--pairs", "unsupervised", *FAST_ARGS,
            "-o", out)
    assert r.exit_code == 1, r.output
    assert len(r.output.strip().splitlines()) == 1 and r.output.strip().startswith("error:")   # one line
    line = text(r)
    assert "failed validation" in line
    assert "score" in line and "seed pairs" in line and "re-embed" in line and "--force" in line
    assert not out.exists() and not list(stores["root"].glob(".refused.vb*"))


def test_forced_failed_map_is_saved_marked_and_migrate_warns(stores, sample):
    out = stores["root"] / "forced.vb"
    r = run("fit", "--source", stores["old"], "--target", stores["noise"], "--pairs", "unsupervised", *FAST_ARGS,
            "--force", "-o", out)
    assert r.exit_code == 0, r.output
    out_text = text(r)
    assert "from 1,500 pairs" not in out_text and "without pairs" in out_text and "unpaired vectors" in out_text
    assert "validation FAILED" in out_text
    art = Alignment.load(out)
    v, anchors = art.metadata["validation"], art.metadata["anchors"]
    assert v["passed"] is False and v["score"] < v["threshold"] and v["reason"] and "note" not in v
    assert anchors["method"] == "unsupervised mini-vec2vec" and anchors["pseudo_pairs"] is True
    target = f"file://{stores['root']}/migrated_forced"
    r = run("migrate", stores["old"], "--alignment", out, "--to", target)
    assert r.exit_code == 0, r.output
    out_text = text(r)
    assert "warning:" in out_text and "failed its validation" in out_text and "--force" in out_text
    assert out_text.index("warning:") < out_text.index("migrated")
    from vecbridge.jobs import migrate

    with pytest.warns(UserWarning, match="failed its validation"):
        migrate(stores["old"], art, f"file://{stores['root']}/migrated_forced_api", dry_run=True)


def test_fit_unsupervised_that_works_passes_validation(stores, sample):
    out = stores["root"] / "works.vb"
    r = run("fit", "--source", stores["old"], "--target", stores["hidden"], "--pairs", "unsupervised", *FAST_ARGS,
            "-o", out)
    assert r.exit_code == 0, r.output
    assert "from 1,500 pairs" not in text(r) and "without pairs" in text(r) and "validation passed" in text(r)
    art = Alignment.load(out)
    assert art.metadata["validation"]["passed"] is True and art.metadata["anchors"]["pseudo_pairs"] is True
    # what an unpaired map costs, and what closes most of it, said beside the pass; fitted on 1,500 vectors a side, it
    # passes with a warning, repeated by the migration that uses it
    v = art.metadata["validation"]
    assert "known id pairs (--pairs geh:FILE)" in v["note"] and "note:" not in text(r)   # the warning says it
    assert v["warning"].startswith("fitted on only 1,500 x 1,500 vectors") and "warning: fitted on only" in text(r)
    target = f"file://{stores['root']}/migrated_works"
    r = run("migrate", stores["old"], "--alignment", out, "--to", target)
    assert r.exit_code == 0 and "works.vb was fitted on only 1,500 x 1,500 vectors" in text(r), r.output


def test_link_unsupervised_refuses_a_failed_map(stores):
    out = stores["root"] / "refused_links.json"
    r = run("link", stores["old"], stores["noise"], "--pairs", "unsupervised", *FAST_ARGS, "-o", out)
    assert r.exit_code == 1 and "failed validation" in text(r) and not out.exists(), r.output
    r = run("link", stores["old"], stores["noise"], "--pairs", "unsupervised", *FAST_ARGS, "--force", "-o", out,
            "--json")
    assert r.exit_code == 0, r.output
    meta = json.loads(out.read_text())["meta"]
    assert meta["pseudo_pairs"] is True and meta["validation"]["passed"] is False


def test_link_geh_refuses_links_grown_from_wrong_seeds(stores, sample):
    """Seed pairs whose partners are shuffled: the links GEH grows (if any) do not align the collections."""
    rng = np.random.default_rng(0)
    chosen = rng.choice(1500, 20, replace=False)
    seeds = stores["root"] / "wrong_seeds.csv"
    seeds.write_text("source_id,target_id\n" + "".join(f"{sample.ids[i]},h{j}\n"
                                                      for i, j in zip(chosen, np.roll(chosen, 1))))
    out = stores["root"] / "geh_links.csv"
    r = run("link", stores["old"], stores["hidden"], "--pairs", f"geh:{seeds}", "-o", out)
    assert r.exit_code == 1 and not out.exists(), r.output
    assert ("bootstrapping never took off" in text(r) or "failed validation" in text(r)) and "seed" in text(r)


def test_report_says_no_go_when_the_unsupervised_map_fails(stores):
    from vecbridge.jobs.report import compatibility_report

    rep = compatibility_report(stores["old"], stores["noise"], pairs="unsupervised", sample=1500,
                               unsupervised_params=FAST)
    v = rep["correspondences"]["validation"]
    assert v["passed"] is False
    assert rep["verdict"]["verdict"] == "NO-GO" and "failed their label-free validation" in rep["verdict"]["reason"]


def test_a_pass_shows_its_note_or_the_louder_warning_that_says_it_too():
    from rich.console import Console

    from vecbridge.render.alignment import validation

    passed = {"passed": True, "score": 1.05, "threshold": 1.0, "reason": "refined", "note": "what it costs"}
    for doc, shown, hidden in ((passed, "note: what it costs", "warning:"),
                               ({**passed, "warning": "few rows"}, "warning: few rows", "note:")):
        con = Console(record=True, width=200)
        validation(con, doc)
        out = con.export_text()
        assert "validation passed" in out and shown in out and hidden not in out
