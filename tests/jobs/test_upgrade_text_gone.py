"""`vecbridge upgrade start` when the old collection holds no texts: the map is fitted against new-model vectors
(`--pairs unsupervised` or `--pairs geh:SEEDS` with `--new-vectors`), validated without labels and refused before
anything is written when it fails; every record is stamped `no-text` (its mapped vector is final), `reembed` has
nothing to do, and cutover and finalize serve and keep the mapped vectors. File store.

The collections are the bundled real sample's old vectors projected on their first 128 principal directions (the
label-free validation's cost grows with the dimension; mini-vec2vec still recovers most of a hidden rotation there),
1,000 records, without any payload text."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tests.cli.test_link_cli import FAST_ARGS
from tests.conftest import write_collection
from vecbridge import metrics
from vecbridge.align import Alignment
from vecbridge.cli import main
from vecbridge.connectors import connect

#: a fit or a null distribution another test computed on the same samples is taken from it (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("reuse_deterministic_fits")
MODEL = "tests.embedders:minilm_lookup"
N, DIM = 1000, 128


def _unit(v):
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def spaces(tmp_path_factory, sample):
    """OLD (no texts: a payload key only), HIDDEN (OLD under a random rotation, ids scrambled: new-model vectors of
    the same items), UNRELATED (random vectors) and RANDOM_OLD (the unrelated vectors as a source)."""
    root = tmp_path_factory.mktemp("text_gone")
    X = sample.docs_old[:N].astype(np.float64)
    X = ((X - X.mean(axis=0)) @ np.linalg.svd(X - X.mean(axis=0), full_matrices=False)[2][:DIM].T).astype(np.float32)
    rng = np.random.default_rng(3)
    Q = np.linalg.qr(rng.standard_normal((DIM, DIM)))[0]
    perm = rng.permutation(N)
    old = write_collection(f"file://{root}/old", sample.ids[:N], X, [{"key": f"k{i}"} for i in range(N)])
    hidden = write_collection(f"file://{root}/hidden", [f"h{i}" for i in perm], (X[perm] @ Q).astype(np.float32))
    unrelated = write_collection(f"file://{root}/unrelated", [f"r{i}" for i in range(N)],
                                 np.random.default_rng(5).standard_normal((N, DIM)).astype(np.float32))
    return {"root": root, "old": old.url, "hidden": hidden.url, "unrelated": unrelated.url, "Q": Q, "X": X,
            "ids": list(sample.ids[:N])}


def _start(spaces, tmp_path, *args, fit_sample=N):
    state, to = tmp_path / "u.upgrade.sqlite", f"file://{tmp_path}/new"
    sample = () if fit_sample is None else ("--fit-sample", fit_sample)
    r = run("upgrade", "start", spaces["old"], "--to-model", MODEL, "--to", to, "--state", state, *sample, *args)
    return r, state, to


def test_unsupervised_start_without_texts_maps_every_record_for_good(spaces, tmp_path):
    r, state, to = _start(spaces, tmp_path, "--pairs", "unsupervised", "--new-vectors", spaces["hidden"], *FAST_ARGS,
                          "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["counts"] == {"mapped": 0, "native": 0, "pending": 0, "no-text": N}, out["counts"]
    assert out["map_validation"]["passed"] and out["map_validation"]["score"] >= 1.0
    assert "known id pairs (--pairs geh:FILE)" in out["map_validation"]["note"]
    # its few-rows warning is in the status it prints, not said again by the migration inside the start
    assert out["map_validation"]["warning"].startswith("fitted on only") and "was fitted on only" not in r.output
    assert out["texts_gone"] == "no texts: the mapped vectors are final"
    # every record written by the validated map, which finds most items' partners in the hidden rotation, and
    # stamped in the store as final
    art = Alignment.load(out["alignment"])
    assert art.metadata["validation"]["passed"] and art.metadata["anchors"]["pseudo_pairs"]
    got = connect(to).get(spaces["ids"])
    assert len(got) == N and {s["origin"] for s in got.stamps} == {"no-text"}
    row = [{i: j for j, i in enumerate(spaces["ids"])}[i] for i in got.ids]
    np.testing.assert_allclose(_unit(got.vectors), _unit(art.transform(spaces["X"][row])), atol=1e-5)
    assert metrics.pair_quality(art.transform(spaces["X"]), spaces["X"] @ spaces["Q"]).top1 > 0.8

    r = run("upgrade", "reembed", "--state", state, "--json")
    done = json.loads(r.stdout)
    assert r.exit_code == 0 and done["reembedded"] == 0 and done["counts"]["no-text"] == N, r.output
    r = run("upgrade", "reembed", "--state", state)
    said = " ".join(r.output.split())
    assert r.exit_code == 0 and "re-embedded 0 records" in said, said
    assert f"{N:,} records without text" in said and "mapped vectors" in said, said
    assert "the mapped vectors are final" in said, said
    r = run("upgrade", "status", "--state", state)
    assert r.exit_code == 0 and "the mapped vectors are final" in " ".join(r.output.split()), r.output
    r = run("upgrade", "cutover", "--state", state, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["serving"] == "new", r.output
    r = run("upgrade", "finalize", "--state", state, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["stage"] == "finalized", r.output
    assert {s["origin"] for s in connect(to).get(spaces["ids"]).stamps} == {"no-text"}


def test_a_map_that_fails_validation_is_refused_before_anything_is_written(spaces, tmp_path):
    r, state, to = _start(spaces, tmp_path, "--pairs", "unsupervised", "--new-vectors", spaces["unrelated"],
                          *FAST_ARGS, fit_sample=None)
    lines = r.output.strip().splitlines()
    # without --fit-sample a map fitted on vectors alone reads as many a side as `fit --pairs unsupervised` does,
    # not the 2,000 texts a re-embedding start embeds (it would serve far below: the few-rows warning)
    assert "up to 10,000 vectors per side" in r.output, r.output
    assert r.exit_code == 1 and "failed validation" in lines[-1] and "nothing was written" in lines[-1], r.output
    assert "give seed pairs" in lines[-1] and "--pairs reference:PATH" in lines[-1] and "--alignment" in lines[-1]
    assert not state.exists() and not connect(to).exists()
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())    # no alignment, no part file either


def test_forced_map_that_failed_validation_says_so_everywhere(spaces, tmp_path):
    r, state, to = _start(spaces, tmp_path, "--pairs", "unsupervised", "--new-vectors", spaces["unrelated"],
                          *FAST_ARGS, "--force", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output[r.output.index("{"):])
    assert out["map_validation"]["passed"] is False and out["counts"]["no-text"] == N
    assert Alignment.load(out["alignment"]).metadata["validation"]["passed"] is False
    assert any("FAILED" in e["detail"] for e in out["events"])
    r, _, _ = _start(spaces, tmp_path / "again", "--pairs", "unsupervised", "--new-vectors", spaces["unrelated"],
                     *FAST_ARGS, "--force")
    said = " ".join(r.output.split())
    assert r.exit_code == 0 and "FAILED (kept with --force" in said, said


def test_geh_from_true_seed_pairs_maps_a_collection_without_texts(spaces, tmp_path):
    """HIDDEN holds the seeds' partners: 20 true pairs grow into links, the map of the links is validated."""
    chosen = np.random.default_rng(0).choice(N, 20, replace=False)
    seeds = tmp_path / "seeds.csv"
    seeds.write_text("source_id,target_id\n" + "".join(f"{spaces['ids'][i]},h{i}\n" for i in chosen))
    r, state, to = _start(spaces, tmp_path, "--pairs", f"geh:{seeds}", "--new-vectors", spaces["hidden"], "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["counts"]["no-text"] == N and out["map_validation"]["passed"], out
    art = Alignment.load(out["alignment"])
    assert art.metadata["anchors"]["method"] == "geh" and art.metadata["validation"]["grown_links"] >= 50
    assert metrics.pair_quality(art.transform(spaces["X"]), spaces["X"] @ spaces["Q"]).top1 > 0.95
    # the links' map refined over both samples (their mutual nearest neighbours under it), validated on its own: the
    # alignment is fitted on the refined pairs (here every item: HIDDEN is an exact rotation of OLD)
    refined = art.metadata["refinement"]
    assert refined["kept"] and refined["validation"]["passed"] and refined["pairs"] == N, refined


def test_a_given_alignment_maps_a_collection_without_texts(spaces, tmp_path):
    """--alignment with the texts gone (no --text-field): every record stamped final."""
    from vecbridge.align.procrustes import OrthogonalProcrustes

    est = OrthogonalProcrustes().fit(spaces["X"], spaces["X"] @ spaces["Q"])
    path = Alignment.from_estimator(est, target_model=MODEL, metric="cosine").save(tmp_path / "given.vb")
    r, state, to = _start(spaces, tmp_path, "--alignment", path, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["counts"]["no-text"] == N and out["texts_gone"] and "map_validation" not in out


@pytest.mark.parametrize("args, said", [
    (["--pairs", "unsupervised"], "--new-vectors URL"),
    (["--pairs", "geh:seeds.csv"], "--new-vectors URL"),
    (["--new-vectors", "file:///nowhere"], "--new-vectors is read by --pairs unsupervised or geh:SEEDS only"),
    (["--pairs", "unsupervised", "--new-vectors", "file:///x", "--alignment", "a.vb"], "choose one of them"),
    (["--pairs", "unsupervised", "--new-vectors", "file:///x", "--method", "clustered"], "drop --method"),
    (["--param", "n_runs=5"], "--param sets the estimator"),
])
def test_contradictory_pairings_are_usage_errors(spaces, tmp_path, args, said):
    r, state, to = _start(spaces, tmp_path, *args)
    assert r.exit_code == 2 and said in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not state.exists() and not connect(to).exists()


def test_a_named_text_field_without_text_is_still_refused(spaces, tmp_path):
    """Naming --text-field says the texts are there: none found is a typo, never silently final vectors."""
    r, state, to = _start(spaces, tmp_path, "--pairs", "unsupervised", "--new-vectors", spaces["hidden"],
                          "--text-field", "body", *FAST_ARGS)
    assert r.exit_code == 3 and "'body'" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not state.exists() and not connect(to).exists()
    r, state, to = _start(spaces, tmp_path)     # the default pairing re-embeds texts: refused
    assert r.exit_code == 3 and "--pairs unsupervised or geh:SEEDS" in r.output, r.output
