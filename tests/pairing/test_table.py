"""One table of pairings (:mod:`vecbridge.pairing.table`): every kind of ``--pairs`` has one row that says its names,
what it needs, how it streams, samples and splits; ``fit``, ``link``, ``evaluate``, ``report`` and ``merge`` read
it. A split plan (what an engine spread over processes gets: key ranges, chunks of a list) sees the same pairs as
the whole plan, and its sample of pairs is the same whatever the units. Real file stores; the engine that splits is
the local one posing as spread over processes (the Ray engine itself is tested in tests/jobs/test_ray_reduce.py)."""
from __future__ import annotations

import csv

import numpy as np
import pytest

from vecbridge.connectors import VectorBatch, connect
from vecbridge.errors import InputError
from vecbridge.jobs.evaluate import evaluate_alignment
from vecbridge.jobs.fit import fit_alignment
from vecbridge.jobs.link import link
from vecbridge.jobs.report import compatibility_report, find_correspondences
from vecbridge.linking.pairspec import KINDS, PairSpec
from vecbridge.pairing.learned import UNPAIRED_SAMPLE
from vecbridge.pairing.pairs import in_holdout
from vecbridge.pairing.sampling import sample_pairs
from vecbridge.pairing.table import PAIRINGS, REPORT_SAMPLE, STORED, pairing
from vecbridge.runtime.engine import LOCAL, LocalEngine

N, D_OLD, D_NEW, UNPAIRED = 600, 8, 12, 100


class Spread(LocalEngine):
    """The local engine posing as one spread over processes (``remote``): jobs plan ``units`` key ranges or chunks
    and combine them as on Ray, while every body runs here."""

    name = "spread"
    remote = True

    def __init__(self, units: int):
        self.units = units


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """OLD (N records with a payload key), NEW (the same ids but the first UNPAIRED), NEWKEY (NEW's items under other
    ids, joined by the key) and a CSV of every other pair."""
    root = tmp_path_factory.mktemp("pairings")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(N, D_OLD)).astype(np.float32)
    R = np.linalg.qr(rng.normal(size=(D_NEW, D_NEW)))[0][:D_OLD]
    Y = (X @ R + 0.05 * rng.normal(size=(N, D_NEW))).astype(np.float32)
    ids = [f"r{(i * 37) % N:04d}" for i in range(N)]   # not in key order
    keys = [{"key": f"k{i}"} for i in range(N)]
    urls = {}
    for name, dim, rows, names in (("old", D_OLD, slice(0, N), ids), ("new", D_NEW, slice(UNPAIRED, N), ids),
                                   ("newkey", D_NEW, slice(UNPAIRED, N), [f"t{i}" for i in range(N)])):
        coll = connect(f"file://{root}/{name}").create(dim=dim)
        coll.upsert(VectorBatch(names[rows], (X if name == "old" else Y)[rows], keys[rows]))
        urls[name] = coll.url
    path = root / "pairs.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([(ids[i], f"t{i}") for i in range(0, N, 2)])
    return {**urls, "csv": f"file:{path}", "ids": ids, "root": root}


def test_every_pairing_has_one_row_with_its_names():
    assert list(PAIRINGS) == list(KINDS), "one row per kind of the grammar, in its order"
    assert STORED == ("ids", "field", "file")
    # the artifact and the report keep their own words for a payload field; the links file writes the spelling
    assert PairSpec.parse("field:url").label == "payload-field"
    assert pairing("field:url").report_mode == "payload-key"
    assert {k: p.link_mode.format(spec=PairSpec.parse(f"{k}:X" if KINDS[k][0] else k)) for k, p in PAIRINGS.items()} \
        == {"ids": "ids", "field": "field:X", "file": "pairs", "reembed": "reembed", "reference": "reference",
            "geh": "geh", "unsupervised": "unsupervised"}
    assert [k for k, p in PAIRINGS.items() if p.splits] == ["ids", "field", "file"]
    assert [k for k, p in PAIRINGS.items() if p.takes_params] == ["geh", "unsupervised"]
    assert pairing("file:/some/where/pairs.csv").name(PairSpec.parse("file:/some/where/pairs.csv")) == "pairs.csv"
    assert pairing("ids").name(PairSpec.parse("ids")) == "ids"


@pytest.mark.parametrize("pairs, target", [("ids", "new"), ("field:key", "newkey"), ("CSV", "newkey")])
def test_a_split_fit_sees_the_pairs_of_a_whole_one(stores, pairs, target):
    """Key ranges of the source (or chunks of the list), the target's key index built over its own ranges: the same
    pairs, the same counts, the same map up to the order of the sums."""
    pairs = stores["csv"] if pairs == "CSV" else pairs
    whole = fit_alignment(stores["old"], stores[target], pairs=pairs, holdout=0.2, batch_size=64)
    ticks = []
    split = fit_alignment(stores["old"], stores[target], pairs=pairs, holdout=0.2, batch_size=64, engine=Spread(5),
                          on_batch=ticks.append)
    a, b = whole.metadata["anchors"], split.metadata["anchors"]
    assert (a["n_examined"], a["n_paired"]) == (b["n_examined"], b["n_paired"])
    assert a["n_paired"] == (N // 2 - UNPAIRED // 2 if pairs.startswith("file") else N - UNPAIRED)
    assert sum(ticks) == (N // 2 if pairs.startswith("file") else N), "a split plan ticks every record once"
    assert np.abs(whole.tensors["matrix"] - split.tensors["matrix"]).max() < 1e-9


def test_the_split_sample_is_the_same_whatever_the_units(stores):
    """Uniform over the (held-out) pairs: the same ids for 1, 3 or 7 units, only records that have a partner."""
    src, tgt = connect(stores["old"]), connect(stores["new"])
    seen = []
    for units in (1, 3, 7):
        engine = Spread(units)
        plan = pairing("ids").plan(src, tgt, PairSpec.parse("ids"), engine)
        assert plan.split and len(plan.units) == units
        s, t, read = sample_pairs(plan, engine, k=120, seed=4, holdout=0.5)
        assert read == N and s.ids == t.ids and len(set(s.ids)) == 120
        seen.append(s.ids)
    assert seen[0] == seen[1] == seen[2]
    assert in_holdout(seen[0], 0.5).all() and not set(seen[0]) & set(stores["ids"][:UNPAIRED])
    # a whole plan samples source records first, in stream order (what one process has always done)
    plan = pairing("ids").plan(src, tgt, PairSpec.parse("ids"), LOCAL, limit=200, seed=4)
    assert not plan.split and len(plan.units) == 1
    s, _, read = sample_pairs(plan, LOCAL, k=None)
    unpaired = set(stores["ids"][:UNPAIRED])
    assert read == 200 and s.ids == [i for i in src.sample(200, seed=4).ids if i not in unpaired]


def test_evaluate_and_report_gather_on_a_split_plan(stores):
    path = fit_alignment(stores["old"], stores["new"], holdout=0.3).save(stores["root"] / "h.vb")
    whole = evaluate_alignment(path, stores["old"], stores["new"], max_pairs=N)
    split = evaluate_alignment(path, stores["old"], stores["new"], max_pairs=N, engine=Spread(4))
    assert split.n_pairs == whole.n_pairs and split.pairs.top1 == whole.pairs.top1
    assert evaluate_alignment(path, stores["old"], stores["new"], max_pairs=50, engine=Spread(4)).n_pairs == 50
    rep = compatibility_report(stores["old"], stores["newkey"], key="key", sample=300, options=False,
                               engine=Spread(3))
    assert rep.correspondences.mode == "payload-key" and rep.correspondences.n == 300
    assert "drawn uniformly" in rep.correspondences.reason


def test_link_and_report_draw_the_same_pairs(stores):
    """One sample per pairing, whoever asks: the links of ``ids`` are the report's correspondences."""
    old, new = connect(stores["old"]), connect(stores["new"])
    links = link(old, new, "ids", sample=250, seed=2)
    corr = find_correspondences(old, new, pairs="ids", sample=250, seed=2)
    assert links.source_ids == corr.ids == corr.new_ids and corr.mode == "shared-ids"
    assert corr.reason == f"{len(corr.ids):,} of 250 sampled old ids also exist in the new collection"
    assert link(old, connect(stores["newkey"]), stores["csv"]).mode == "pairs"


def test_what_does_not_split_is_refused_in_one_line_before_any_work(stores):
    for run, words in ((lambda: fit_alignment(stores["old"], stores["new"], pairs="unsupervised", engine=Spread(2)),
                        "the unsupervised pairing works on a sample of each side on one machine"),
                       (lambda: compatibility_report(stores["old"], stores["new"], pairs="geh:seeds.csv",
                                                     engine=Spread(2)),
                        "the geh pairing works on a sample on one machine"),
                       (lambda: compatibility_report(stores["old"], None, pairs="ids", engine=Spread(2)),
                        "give the new collection too")):
        with pytest.raises(InputError, match=words) as err:
            run()
        assert "\n" not in str(err.value)


def test_a_report_samples_as_many_unpaired_records_as_a_fit_reads():
    """Where a map is fitted on samples of both unpaired sides, the report's default sample is the fit's (it judges
    the map the user will fit); stored and re-embedded pairs keep the report's own; a size asked for wins."""
    sizes = {kind: pairing(PairSpec(kind, value)).sample_size(None)
             for kind, value in (("ids", None), ("field", "k"), ("reembed", None), ("geh", "s.csv"),
                                 ("unsupervised", None))}
    assert sizes == {"ids": REPORT_SAMPLE, "field": REPORT_SAMPLE, "reembed": REPORT_SAMPLE,
                     "geh": UNPAIRED_SAMPLE, "unsupervised": UNPAIRED_SAMPLE}
    assert pairing(PairSpec("unsupervised")).sample_size(700) == 700
