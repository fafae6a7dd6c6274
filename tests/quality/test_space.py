"""Space fingerprints on real embeddings of ../shared/data: right space named, wrong ones refused, mixtures."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vecbridge.errors import InputError
from vecbridge.quality.space import SpaceFingerprint, mixture, mixture_fractions, which_space

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
CORPORA = ("wordnet", "foldoc")


def _load(corpus: str, model: str, kind: str = "docs") -> np.ndarray:
    path = DATA / corpus / f"{model}_{kind}.npy"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    return np.load(path).astype(np.float32)


@pytest.fixture(scope="module", params=CORPORA)
def corpus(request):
    """Fingerprints of minilm6, minilm3 and glove50 from 3,000 docs; held-out samples of docs and queries."""
    c = request.param
    data = {m: (_load(c, m), _load(c, m, "queries")) for m in ("minilm6", "minilm3", "glove50")}
    fps = {m: SpaceFingerprint.from_vectors(d[:3000], model=m) for m, (d, _) in data.items()}
    held = {m: d[5000:6000] for m, (d, _) in data.items()}
    queries = {m: q[5000:6000] for m, (_, q) in data.items() if m != "glove50"}
    return fps, held, queries, data


def test_round_trip_through_json(corpus):
    fps, *_ = corpus
    fp = fps["minilm6"]
    back = SpaceFingerprint.from_dict(json.loads(json.dumps(fp.as_dict())))
    assert back == fp
    assert len(json.dumps(fp.as_dict())) < 40_000
    assert fp.dim == 384 and not fp.unit_normalized and fp.model == "minilm6"


def test_right_space_named_docs_and_queries(corpus):
    fps, held, queries, _ = corpus
    pair = {m: fps[m] for m in ("minilm6", "minilm3")}
    for m in pair:
        for sample in (held[m], queries[m]):
            match = which_space(sample, pair)
            assert match.name == m, match.reason


def test_wrong_same_dimension_space_refused(corpus):
    fps, held, queries, _ = corpus
    for m, other in (("minilm6", "minilm3"), ("minilm3", "minilm6")):
        for sample in (held[other], queries[other]):
            match = which_space(sample, {m: fps[m]})
            assert match.name is None and "\n" not in match.reason, match.reason


def test_different_dimension_refused(corpus):
    fps, held, _, _ = corpus
    match = which_space(held["glove50"], {"minilm6": fps["minilm6"], "minilm3": fps["minilm3"]})
    assert match.name is None and match.scores == {"minilm6": None, "minilm3": None}
    assert "dimension 50" in match.reason
    assert which_space(held["glove50"], fps).name == "glove50"


def test_mixture_fraction_within_005(corpus):
    fps, _, _, data = corpus
    pair = {m: fps[m] for m in ("minilm6", "minilm3")}
    sample = np.vstack([data["minilm6"][0][6000:6250], data["minilm3"][0][6250:7000]])
    est = mixture_fractions(sample, {**pair, "glove50": fps["glove50"]})
    assert abs(est["minilm6"] - 0.25) <= 0.05 and abs(est["minilm3"] - 0.75) <= 0.05
    assert est["glove50"] == 0.0


def test_mixed_only_when_the_minority_confirms_itself(corpus):
    """A pure sample is never called mixed (not even queries against fingerprints of documents, whose share alone can
    be far off); 5% of another space in documents is."""
    fps, held, queries, data = corpus
    pair = {m: fps[m] for m in ("minilm6", "minilm3")}
    for m, other in (("minilm6", "minilm3"), ("minilm3", "minilm6")):
        for pure in (held[m], queries[m]):
            assert mixture(pure, pair).others(m, min_share=0.03) == {}
        sample = np.vstack([data[m][0][6000:6950], data[other][0][6950:7000]])
        found = mixture(sample, pair).others(m, min_share=0.03)
        assert list(found) == [other] and abs(found[other] - 0.05) <= 0.05


def test_a_space_without_a_mean_direction_is_not_distinctive():
    rng = np.random.default_rng(0)
    assert not SpaceFingerprint.from_vectors(rng.standard_normal((2000, 64))).distinctive
    assert SpaceFingerprint.from_vectors(rng.standard_normal((2000, 64)) + 1.0).distinctive


@pytest.mark.parametrize("bad, words", [
    (np.full((5, 384), np.nan), "NaN"),
    (np.ones(384), "2-D"),
    (np.zeros((0, 384)), "0 rows"),
])
def test_bad_input_is_one_line_input_error(bad, words):
    rng = np.random.default_rng(0)
    fp = SpaceFingerprint.from_vectors(rng.standard_normal((50, 384)))
    for call in (lambda: SpaceFingerprint.from_vectors(bad), lambda: which_space(bad, {"a": fp}),
                 lambda: mixture_fractions(bad, {"a": fp})):
        with pytest.raises(InputError) as err:
            call()
        assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(InputError):
        which_space(rng.standard_normal((10, 384)), {})
    with pytest.raises(InputError):
        SpaceFingerprint.from_dict({"dim": 3})
    with pytest.raises(InputError):
        fp.score(rng.standard_normal((10, 50)))
