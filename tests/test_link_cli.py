"""`vecbridge link` in every mode, and `vecbridge fit` on its output."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from vecbridge.cli import main
from vecbridge.linking.links import Links

from .conftest import write_collection


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


def test_link_errors_are_one_line(stores):
    r = run("link", stores["old"], stores["new"], "--mode", "bogus", "-o", stores["root"] / "x.csv")
    assert r.exit_code == 3 and "unknown --mode" in r.output
    r = run("link", stores["old"], "--mode", "reembed", "-o", stores["root"] / "x.csv")
    assert r.exit_code == 3 and "needs --model" in r.output
    r = run("link", stores["old"], "--mode", "reembed", "--model", "tests.embedders:mpnet_lookup",
            "-o", stores["root"] / "x.csv")
    assert r.exit_code == 3 and "carry vectors" in r.output
