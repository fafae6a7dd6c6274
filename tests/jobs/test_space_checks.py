"""A map is applied only to the space it was fitted from: every command that applies one checks the collection first.

Real vectors: the bundled sample's all-MiniLM-L6-v2 documents (old) and all-mpnet-base-v2 documents (new). A second
and a third 384-d space are MiniLM rotated by two random orthogonal maps (another model of the same dimension has its
own mean direction: that is what the check recognises; tests/quality/test_space.py runs it on four real models).
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.align.artifact import Alignment
from vecbridge.cli import main
from vecbridge.connectors import connect
from vecbridge.errors import SpaceMismatch
from vecbridge.jobs.fit import fit_to_file
from vecbridge.runtime.provenance import check_space, make_stamp, spaces_of


def _rotation(dim: int, seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, dim)))
    return q * np.sign(np.diag(r))


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def spaces(tmp_path_factory, sample):
    """Collections: old (MiniLM), rot (MiniLM rotated: the map's target), third (another rotation), mixed (70% old,
    30% rot), new (MPNet); alignments old->rot (same dimension) and old->new, fitted on shared ids."""
    root = tmp_path_factory.mktemp("spaces")
    X = sample.docs_old
    rot, third = X @ _rotation(384, 1), X @ _rotation(384, 2)
    ids = list(sample.ids)
    payloads = [{"text": it["doc"]} for it in sample.items]
    urls = {name: write_collection(f"file://{root / name}", ids, V, payloads).url
            for name, V in (("old", X), ("rot", rot), ("third", third), ("new", sample.docs_new))}
    cut = int(0.7 * len(ids))
    urls["mixed"] = write_collection(f"file://{root / 'mixed'}", ids, np.vstack([X[:cut], rot[cut:]]), payloads).url
    maps = {}
    for name, target in (("same", "rot"), ("cross", "new")):
        maps[name] = str(root / f"{name}.vb")
        fit_to_file(maps[name], urls["old"], urls[target], source_model="minilm", target_model=target)
    return {"urls": urls, "maps": maps, "root": root}


def test_fit_records_both_sides_with_their_directions(spaces):
    a = Alignment.load(spaces["maps"]["same"])
    fps = spaces_of(a)
    assert fps["source"].model == "minilm" and fps["target"].model == "rot"
    assert a.metadata["spaces"]["documents"] == "source -> target"
    assert a.metadata["spaces"]["queries"] == "target -> source"
    summary = a.summary()["spaces"]["source"]   # info shows the identity, not the vectors
    assert "mean" not in summary and summary["dim"] == 384


def test_fit_records_the_prefixes_given(spaces, tmp_path):
    r = cli("fit", "--source", spaces["urls"]["old"], "--target", spaces["urls"]["rot"], "-o", tmp_path / "p.vb",
            "--target-prefix", "query=query: ", "--target-prefix", "passage=passage: ")
    assert r.exit_code == 0, r.output
    fps = spaces_of(Alignment.load(tmp_path / "p.vb"))
    assert fps["target"].prefixes == {"query": "query: ", "passage": "passage: "} and fps["source"].prefixes is None
    assert cli("fit", "--source", spaces["urls"]["old"], "--target", spaces["urls"]["rot"], "-o", tmp_path / "q.vb",
               "--source-prefix", "no-equals-sign").exit_code == 3


@pytest.mark.parametrize("wrong, words", [("rot", "target space"), ("third", "neither")])
def test_migrate_refuses_the_wrong_space_and_writes_nothing(spaces, tmp_path, wrong, words):
    target = f"file://{tmp_path / 'out'}"
    r = cli("migrate", spaces["urls"][wrong], "--alignment", spaces["maps"]["same"], "--to", target)
    assert r.exit_code == 1, r.output
    assert words in r.output and "--force" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not connect(target).exists()


def test_migrate_right_space_stamps_the_target_and_info_shows_it(spaces, tmp_path):
    target = f"file://{tmp_path / 'out'}"
    r = cli("migrate", "--json", spaces["urls"]["old"], "--alignment", spaces["maps"]["same"], "--to", target)
    assert r.exit_code == 0, r.output
    result = json.loads(r.output)
    assert result["space"]["verdict"] == "ok" and result["space"]["by"] == "sample"
    r = cli("info", "--json", target, "--space", "--alignment", spaces["maps"]["same"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["stamp"]["origin"] == "mapped" and report["stamp"]["space"]["model"] == "rot"
    assert report["verdict"].startswith("one space") and "target of same.vb" in report["in"]
    # the stamp now decides: the migrated collection is in the map's target space, so mapping it again is refused
    with pytest.raises(SpaceMismatch, match="wrong way"):
        check_space(connect(target), Alignment.load(spaces["maps"]["same"]), "source")
    assert check_space(connect(target), Alignment.load(spaces["maps"]["same"]), "target").by == "stamp"


def test_force_applies_the_map_and_records_the_override(spaces, tmp_path):
    target = f"file://{tmp_path / 'out'}"
    r = cli("migrate", "--json", spaces["urls"]["rot"], "--alignment", spaces["maps"]["same"], "--to", target,
            "--force")
    assert r.exit_code == 0, r.output
    result = json.loads(r.output[r.output.index("{"):])
    assert result["space"]["forced"] is True and result["space"]["verdict"] == "mismatch"
    stamp = connect(target).read_stamp()
    assert "target space" in stamp["forced"]


def test_mixed_collection_refused_with_the_share(spaces, tmp_path):
    r = cli("migrate", spaces["urls"]["mixed"], "--alignment", spaces["maps"]["same"], "--to", tmp_path / "x")
    assert r.exit_code == 1 and "more than one embedding space" in r.output, r.output
    share = float(r.output.split("about ")[1].split("%")[0]) / 100
    assert abs(share - 0.3) <= 0.05
    r = cli("info", "--json", spaces["urls"]["mixed"], "--space", "--alignment", spaces["maps"]["same"])
    report = json.loads(r.output)
    assert report["verdict"].startswith("mixed")
    assert abs(report["spaces"]["target of same.vb"]["fraction"] - 0.3) <= 0.05


def test_verify_search_and_merge_check_their_sides(spaces, tmp_path):
    urls, same = spaces["urls"], spaces["maps"]["same"]
    r = cli("verify", urls["rot"], urls["rot"], "--alignment", same)
    assert r.exit_code == 1 and "source space" in r.output, r.output
    q = tmp_path / "q.npy"
    np.save(q, connect(urls["rot"]).sample(5).vectors)
    r = cli("search", "--wrap", f"{urls['rot']}={same}", "--vectors", q)
    assert r.exit_code == 1 and "wrong way" in r.output, r.output
    r = cli("search", "--wrap", f"{urls['old']}={same}", "--vectors", q)
    assert r.exit_code == 0, r.output
    r = cli("merge", urls["rot"], urls["old"], "--into", f"file://{tmp_path / 'm'}", "--alignment", same)
    assert r.exit_code == 1 and "wrong way" in r.output, r.output
    assert not connect(f"file://{tmp_path / 'm'}").exists()


def test_drift_records_a_wrong_space_as_a_breach(spaces, tmp_path):
    cfg = tmp_path / "check.toml"
    cfg.write_text(f'[check]\nname = "w"\nold = "{spaces["urls"]["rot"]}"\nnew = "{spaces["urls"]["rot"]}"\n'
                   f'alignment = "{spaces["maps"]["same"]}"\nsample = 200\n')
    r = cli("drift", "run", cfg)
    assert r.exit_code == 1 and "wrong way" in r.output, r.output


def test_upgrade_start_refuses_a_given_map_of_another_space(spaces, tmp_path):
    r = cli("upgrade", "start", spaces["urls"]["rot"], "--to-model", "vecbridge.sample:recorded_new_model",
            "--to", f"file://{tmp_path / 'up'}", "--alignment", spaces["maps"]["same"], "--state",
            tmp_path / "u.upgrade.sqlite")
    assert r.exit_code == 1 and "wrong way" in r.output, r.output
    assert not (tmp_path / "u.upgrade.sqlite").exists() and not connect(f"file://{tmp_path / 'up'}").exists()


def test_different_dimensions_and_old_artifacts(spaces, tmp_path):
    cross = Alignment.load(spaces["maps"]["cross"])
    assert check_space(connect(spaces["urls"]["old"]), cross, "source").verdict == "ok"
    assert check_space(connect(spaces["urls"]["new"]), cross, "target").verdict == "ok"
    with pytest.raises(SpaceMismatch, match="neither"):   # 384-d, but another 384-d space
        check_space(connect(spaces["urls"]["third"]), cross, "source")
    old_style = Alignment(cross.tensors, {k: v for k, v in cross.metadata.items() if k != "spaces"})
    check = check_space(connect(spaces["urls"]["third"]), old_style, "source")
    assert check.verdict == "unchecked" and "refit" in check.reason


def test_a_stamp_is_trusted_before_the_sample(spaces, tmp_path):
    """A collection stamped as another space is refused by its stamp even though its vectors would pass."""
    url = f"file://{tmp_path / 'copy'}"
    old = connect(spaces["urls"]["old"]).sample(300)
    write_collection(url, old.ids, old.vectors)
    same = Alignment.load(spaces["maps"]["same"])
    connect(url).write_stamp(make_stamp(spaces_of(same)["target"], origin="native"))
    with pytest.raises(SpaceMismatch, match="stamp"):
        check_space(connect(url), same, "source")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert check_space(connect(url), same, "source", force=True).forced
    assert any("--force" in str(w.message) for w in seen)

