"""`vecbridge link` in every mode, and `vecbridge fit` on its output."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge import metrics
from vecbridge.align import Alignment
from vecbridge.cli import main
from vecbridge.linking.links import Links

#: unsupervised and seed-grown links are validated: a fit or a null distribution another test computed on the same
#: samples is taken from it (tests/conftest.py); the command, its checks and its output run every time
pytestmark = pytest.mark.usefixtures("reuse_deterministic_fits")
#: mini-vec2vec for the test's budget (test_minivec2vec's FAST): one start, as the paper runs it
FAST_ARGS = [a for kv in ("n_runs=5", "qap_restarts=10", "n_neighbors=10", "refine1_iter=2", "refine1_tol=0",
                          "refine1_neighbors=1", "refine2_clusters=50", "n_restarts=1", "init=centroids",
                          "polish_iter=0") for a in ("--param", kv)]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def stores(tmp_path_factory, sample):
    root = tmp_path_factory.mktemp("link")
    old = write_collection(f"file://{root}/old", sample.ids, sample.docs_old,
                           [{"text": it["doc"], "key": f"k{i}"} for i, it in enumerate(sample.items)])
    # NEW holds items 500.. under other ids; the payload key joins them
    new = write_collection(f"file://{root}/new", [f"n{i}" for i in range(500, 1500)], sample.docs_new[500:],
                           [{"key": f"k{i}"} for i in range(500, 1500)])
    same = write_collection(f"file://{root}/same", sample.ids, sample.docs_new)
    return {"root": root, "old": old.url, "new": new.url, "same": same.url}


def _fit_and_check(stores, links_path, target=None):
    out = stores["root"] / f"{links_path.stem}.vb"
    args = ["fit", "--pairs", links_path, "-o", out, "--json", "--source", stores["old"]]
    if target:
        args += ["--target", target]
    r = run(*args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_link_by_ids_and_fit(stores):
    path = stores["root"] / "ids.csv"
    r = run("link", stores["old"], stores["same"], "--mode", "ids", "-o", path, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["n"] == 1500
    assert _fit_and_check(stores, path, stores["same"])["fit"]["n_pairs"] == 1500


def test_link_by_payload_field(stores, sample):
    path = stores["root"] / "field.json"
    r = run("link", stores["old"], stores["new"], "--mode", "field:key", "-o", path)
    assert r.exit_code == 0, r.output
    data = json.loads(path.read_text())
    assert data["mode"] == "field:key" and len(data["links"]) == 1000
    first = data["links"][0]
    assert first["target_id"] == f"n{sample.ids.index(first['source_id'])}"
    assert _fit_and_check(stores, path, stores["new"])["fit"]["n_pairs"] == 1000


def test_link_reembed_carries_vectors_and_fit_needs_no_target(stores):
    path = stores["root"] / "reembed.npz"
    r = run("link", stores["old"], "--mode", "reembed", "--model", "tests.embedders:mpnet_lookup", "--sample", 700,
            "-o", path)
    assert r.exit_code == 0, r.output
    links = Links.load_npz(path)
    assert links.has_vectors and len(links) == 700
    fit = _fit_and_check(stores, path)
    assert (fit["target_dim"], fit["anchors"]["method"]) == (768, "reembed")


def test_texts_of_ones_own_embedded_by_both_models_give_a_map_where_nothing_is_shared(stores, sample):
    """What a refused unsupervised map's advice says to do where the collection's texts are gone but the old model
    runs: link in-domain texts of one's own by both models, fit on the links, nothing shared with the collection."""
    texts = stores["root"] / "own_texts.txt"
    texts.write_text("".join(it["doc"].replace("\n", " ") + "\n" for it in sample.items[:600]))
    path = stores["root"] / "reference.npz"
    r = run("link", stores["old"], "--pairs", f"reference:{texts}", "--old-model", "tests.embedders:minilm_lookup",
            "--model", "tests.embedders:mpnet_lookup", "-o", path)
    assert r.exit_code == 0, r.output
    links = Links.load_npz(path)
    assert links.has_vectors and len(links) == 600
    fit = _fit_and_check(stores, path)
    assert fit["target_dim"] == 768 and fit["fit"]["n_pairs"] == 600
    # the map carries the collection's records (none of which it was fitted on) to their own new-model vectors
    alignment = Alignment.load(stores["root"] / "reference.vb")
    mapped = alignment.transform(sample.docs_old[600:1500])
    assert metrics.pair_quality(mapped, sample.docs_new[600:1500]).top1 > 0.9   # 0.99 measured; chance 0.001


def test_link_errors_are_one_line(stores):
    r = run("link", stores["old"], stores["new"], "--mode", "bogus", "-o", stores["root"] / "x.csv")
    assert r.exit_code == 3 and "unknown pairing" in r.output
    r = run("link", stores["old"], "--mode", "reembed", "-o", stores["root"] / "x.csv")
    assert r.exit_code == 3 and "needs the new model" in r.output
    r = run("link", stores["old"], "--mode", "reembed", "--model", "tests.embedders:mpnet_lookup",
            "-o", stores["root"] / "x.csv")
    assert r.exit_code == 3 and "carry vectors" in r.output


def _read_links_csv(path):
    import csv

    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [r["source_id"] for r in rows], [r["target_id"] for r in rows], np.array([float(r["confidence"]) for r in rows])


def test_link_geh_grows_seed_ids_into_links_and_fit_refines_them(stores, sample, capsys):
    """OLD holds items 0..1499, NEW items 500..1499 under other ids: 20 known pairs grow into ~1,000 links, which
    `fit --pairs file:LINKS` fits as they are. They are cut for precision: `fit --pairs geh:SEEDS` refines them over
    both collections (their mutual nearest neighbours under the links' map) and fits on more pairs than there are
    links, as `upgrade start --pairs geh:SEEDS` does; the artifact records the refinement and its validation."""
    from vecbridge import metrics
    from vecbridge.align import Alignment
    from vecbridge.render.alignment import fitted

    seeds = stores["root"] / "seeds.csv"
    chosen = np.random.default_rng(0).choice(np.arange(500, 1500), 20, replace=False)
    seeds.write_text("source_id,target_id\n" + "".join(f"{sample.ids[i]},n{i}\n" for i in chosen))
    path = stores["root"] / "geh.csv"
    r = run("link", stores["old"], stores["new"], "--mode", "geh", "--seeds", seeds, "-o", path)
    assert r.exit_code == 0 and "`fit --pairs geh:SEEDS` refines these links" in r.output, r.output
    src, tgt, conf = _read_links_csv(path)
    truth = {sample.ids[i]: f"n{i}" for i in range(500, 1500)}
    correct = sum(truth.get(s) == t for s, t in zip(src, tgt))
    assert correct / len(src) >= 0.9 and correct >= 700, (correct, len(src))
    assert len(src) < 1500 and np.all((conf > 0) & (conf <= 1))
    assert _fit_and_check(stores, path, stores["new"])["fit"]["n_pairs"] == len(src)   # the links' own map
    out = stores["root"] / "fit_geh.vb"
    r = run("fit", "--source", stores["old"], "--target", stores["new"], "--pairs", f"geh:{seeds}", "-o", out,
            "--json")
    assert r.exit_code == 0, r.output
    art = Alignment.load(out)
    refined = art.metadata["refinement"]
    assert refined["kept"] and refined["validation"]["passed"] and refined["links"] == len(src), refined
    assert art.metadata["validation"]["passed"] and art.metadata["anchors"]["method"] == "geh"
    assert json.loads(r.stdout)["fit"]["n_pairs"] == refined["pairs"] > len(src)
    fitted(json.loads(r.stdout))   # what a person reads without --json
    assert f"refined: {refined['pairs']:,} mutual nearest pairs from {len(src):,} GEH links" in capsys.readouterr().out
    quality = [metrics.pair_quality(a.transform(sample.docs_old[500:]), sample.docs_new[500:]).top1
               for a in (art, Alignment.load(stores["root"] / "geh.vb"))]
    assert quality[0] >= quality[1] - 0.01, quality


def test_link_geh_needs_seeds_and_known_ids(stores):
    r = run("link", stores["old"], stores["new"], "--mode", "geh", "-o", stores["root"] / "x.csv")
    assert r.exit_code == 3 and "geh:PATH needs its path" in r.output
    bad = stores["root"] / "bad_seeds.csv"
    bad.write_text("source_id,target_id\n" + "".join(f"nope{i},n{500 + i}\n" for i in range(20)))
    r = run("link", stores["old"], stores["new"], "--mode", "geh", "--seeds", bad, "-o", stores["root"] / "x.csv")
    assert r.exit_code == 3 and "missing" in r.output and len(r.output.strip().splitlines()) == 1
    r = run("link", stores["old"], stores["new"], "--mode", "geh", "--seeds", bad, "--param", "bogus=1",
            "-o", stores["root"] / "x.csv")
    assert r.exit_code == 3 and "no parameter bogus" in r.output


def test_link_unsupervised_recovers_a_hidden_rotation_without_any_pairs(stores, sample):
    """NEW = OLD's real vectors under a random isometry into 768-d, ids scrambled: nothing is shared but geometry."""
    rng = np.random.default_rng(3)
    Q = np.linalg.qr(rng.standard_normal((768, 768)))[0][:384]
    perm = rng.permutation(1500)
    hidden = write_collection(f"file://{stores['root']}/hidden", [f"h{i}" for i in perm],
                              (sample.docs_old[perm] @ Q).astype(np.float32))
    path = stores["root"] / "unsup.csv"
    r = run("link", stores["old"], hidden.url, "--mode", "unsupervised", *FAST_ARGS, "-o", path, "--json")
    assert r.exit_code == 0, r.output
    src, tgt, _ = _read_links_csv(path)
    index = {sid: i for i, sid in enumerate(sample.ids)}
    correct = sum(t == f"h{index[s]}" for s, t in zip(src, tgt))
    assert len(src) >= 1000 and correct / len(src) >= 0.95, (correct, len(src))


def test_fit_unsupervised_saves_mini_vec2vec_s_map(stores, sample):
    """`vecbridge fit --pairs unsupervised`: no pairs at all, the artifact maps OLD onto the hidden isometry."""
    from vecbridge.align import Alignment

    rng = np.random.default_rng(4)
    Q = np.linalg.qr(rng.standard_normal((768, 768)))[0][:384]
    hidden = write_collection(f"file://{stores['root']}/hidden4", [f"g{i}" for i in range(1500)],
                              (sample.docs_old @ Q).astype(np.float32))
    out = stores["root"] / "unsup.vb"
    r = run("fit", "--source", stores["old"], "--target", hidden.url, "--pairs", "unsupervised", *FAST_ARGS,
            "-o", out, "--json")
    assert r.exit_code == 0, r.output
    art = Alignment.load(out)
    assert art.kind == "orthogonal" and (art.source_dim, art.target_dim) == (384, 768)
    from vecbridge import metrics

    assert metrics.pair_quality(art.transform(sample.docs_old), sample.docs_old @ Q).top1 > 0.95
    r = run("fit", "--source", stores["old"], "--target", hidden.url, "--param", "n_runs=5", "-o", out)
    assert r.exit_code == 3 and "geh and unsupervised pairings only" in r.output


def test_fit_clustered_method_saves_local_maps(stores):
    from vecbridge.align import Alignment

    out = stores["root"] / "clustered.vb"
    r = run("fit", "--source", stores["old"], "--target", stores["same"], "--method", "clustered", "-o", out,
            "--json")
    assert r.exit_code == 0, r.output
    art = Alignment.load(out)
    assert art.kind == "clustered" and art.metadata["fit"]["clustered"]["n_clusters"] >= 2
