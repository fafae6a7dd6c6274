"""Merging two indexes built with different encoders (file store, real vectors)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.align import Alignment, OrthogonalProcrustes
from vecbridge.cli import main
from vecbridge.connectors import connect
from vecbridge.errors import InputError, StoreError
from vecbridge.jobs import merge


@pytest.fixture
def two_indexes(tmp_path, sample):
    """A: items 0..999 in MiniLM; B: items 500..1499 in MPNet; 500 shared ids."""
    a = write_collection(f"file://{tmp_path}/a", sample.ids[:1000], sample.docs_old[:1000],
                         [{"from": "a", "text": it["doc"]} for it in sample.items[:1000]]).url
    b = write_collection(f"file://{tmp_path}/b", sample.ids[500:], sample.docs_new[500:],
                         [{"from": "b", "pos": it["pos"]} for it in sample.items[500:]]).url
    est = OrthogonalProcrustes().fit(sample.docs_old[500:1000], sample.docs_new[500:1000])
    align = Alignment.from_estimator(est).save(tmp_path / "ab.vb")
    return {"a": a, "b": b, "align": align, "est": est, "tmp": tmp_path}


def records(url):
    return {i: (v, p) for bt in connect(url).scan(500) for i, v, p in zip(bt.ids, bt.vectors, bt.payloads)}


@pytest.mark.parametrize("policy", ["keep-b", "keep-a"])
def test_merge_by_shared_ids(two_indexes, sample, policy):
    into = f"file://{two_indexes['tmp']}/c_{policy}"
    out = merge(two_indexes["a"], two_indexes["b"], into, two_indexes["align"], policy=policy, batch_size=128)
    assert (out["count"], out["linked"]) == (1500, 500)
    got = records(into)
    assert set(got) == set(sample.ids)
    mapped = two_indexes["est"].transform(sample.docs_old.astype(np.float64))
    for j in (0, 499):               # only in A: mapped
        np.testing.assert_allclose(got[sample.ids[j]][0], mapped[j], atol=1e-5)
    for j in (1000, 1499):           # only in B: as is
        np.testing.assert_allclose(got[sample.ids[j]][0], sample.docs_new[j], atol=1e-6)
    j = 700                          # in both
    expected = sample.docs_new[j] if policy == "keep-b" else mapped[j]
    np.testing.assert_allclose(got[sample.ids[j]][0], expected, atol=1e-5)
    assert got[sample.ids[j]][1] == {"from": "b", "text": sample.items[j]["doc"], "pos": sample.items[j]["pos"]}


def test_merge_with_a_links_file_renames_clashing_unlinked_ids(tmp_path, sample):
    # A uses its own ids "a<row>"; B uses the wordnet ids; links pair 500 items; one unlinked A id clashes with B
    a_ids = [f"a{j}" for j in range(1000)]
    a_ids[10] = sample.ids[1200]      # unlinked A record whose id is also a (different) B record's id
    a = write_collection(f"file://{tmp_path}/a", a_ids, sample.docs_old[:1000]).url
    b = write_collection(f"file://{tmp_path}/b", sample.ids[500:], sample.docs_new[500:]).url
    links = tmp_path / "links.csv"
    links.write_text("".join(f"a{j},{sample.ids[j]}\n" for j in range(500, 1000)))
    align = Alignment.from_estimator(OrthogonalProcrustes().fit(sample.docs_old[500:1000], sample.docs_new[500:1000]))
    path = align.save(tmp_path / "ab.vb")
    out = merge(a, b, f"file://{tmp_path}/c", path, links=str(links))
    assert (out["linked"], out["renamed"], out["count"]) == (500, 1, 1500)
    got = records(f"file://{tmp_path}/c")
    assert f"a:{sample.ids[1200]}" in got and sample.ids[1200] in got
    np.testing.assert_allclose(got[sample.ids[1200]][0], sample.docs_new[1200], atol=1e-6)


def test_merge_refusals(two_indexes):
    with pytest.raises(InputError, match="one of the inputs"):
        merge(two_indexes["a"], two_indexes["b"], two_indexes["b"], two_indexes["align"])
    with pytest.raises(InputError, match="holds 768-d"):
        merge(two_indexes["b"], two_indexes["b"], f"file://{two_indexes['tmp']}/x", two_indexes["align"])
    with pytest.raises(StoreError, match="not supported"):
        merge(two_indexes["a"], two_indexes["b"], f"file://{two_indexes['tmp']}/y", two_indexes["align"],
              policy="keep-both")


def test_cli_merge(two_indexes):
    r = CliRunner().invoke(main, ["merge", two_indexes["a"], two_indexes["b"], "--into",
                                  f"file://{two_indexes['tmp']}/c", "--alignment", str(two_indexes["align"]), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["count"] == 1500
