"""``vecbridge serve`` on the file store: a second instance of the service as the upstream OpenAI-compatible model
(two uvicorn workers, their metrics added up), one wrapped old collection, and the command's refusals."""
from __future__ import annotations

import re
import socket

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from tests.embedding_spaces import same_bits, sample_alignment, start_upgrade, upgrade_vectors
from tests.service.conftest import TOKEN, error_of
from vecbridge.align import Alignment
from vecbridge.cli import main
from vecbridge.jobs.upgrade import Upgrade
from vecbridge.sample import recorded_new_model, recorded_old_model
from vecbridge.service.upstream import UpstreamError, UpstreamModel
from vecbridge.serving.rerank import FusedSearch
from vecbridge.serving.translate import translate_queries
from vecbridge.serving.wrap import wrap

for _needed in ("starlette", "uvicorn", "prometheus_client"):   # the [serve] extra
    pytest.importorskip(_needed)
openai = pytest.importorskip("openai")

MODEL = "tests.embedders:mpnet_lookup"
UPSTREAM_KEY = "upstream-key-77a1c9"
pytestmark = pytest.mark.filterwarnings("ignore::vecbridge.align.FewPairsWarning")


@pytest.fixture(scope="module")
def upgrade(tmp_path_factory, sample):
    return start_upgrade(tmp_path_factory.mktemp("file_upgrade"), sample)


def test_a_second_service_as_the_upstream_model(serve, upgrade, sample):
    """The upstream: our own service serving the model's own vectors (two worker processes); in front of it, the
    upgrade's service embeds through it and translates."""
    upstream = serve(["--model", MODEL, "--workers", "2"], token=UPSTREAM_KEY)
    front = serve(["--state", upgrade, "--upstream", f"{upstream.url}/v1", "--upstream-key-env", "UP_KEY"],
                  env={"UP_KEY": UPSTREAM_KEY})
    texts = [it["doc"] for it in sample.items[:10]]
    native, translated, _ = upgrade_vectors(upgrade, texts)
    status, doc, _ = upstream.call("/v1/embeddings", {"input": texts})
    assert status == 200 and same_bits([d["embedding"] for d in doc["data"]], native)
    assert doc["vecbridge"]["space"] == "new" and doc["vecbridge"]["stage"] is None
    assert re.search("nothing to search", error_of(upstream.call("/search", {"texts": texts})[1]))

    client = openai.OpenAI(base_url=f"{front.url}/v1", api_key=TOKEN, max_retries=0)
    got = client.embeddings.create(model=MODEL, input=texts)
    assert same_bits([d.embedding for d in got.data], translated)
    with Upgrade.open(upgrade) as up:
        ids, scores = up.search(texts[:4], 5)
    status, doc, _ = front.call("/search", {"texts": texts[:4], "k": 5})
    assert status == 200 and [r["ids"] for r in doc["results"]] == ids
    assert same_bits([r["scores"] for r in doc["results"]], scores)
    status, doc, _ = front.call("/status")
    assert doc["service"]["upstream"] == f"{MODEL} at {upstream.url}/v1" and doc["service"]["model_run"] is None
    run = upstream.call("/status")[1]["service"]["model_run"]   # a function model: it runs where its code puts it
    assert run["device"] is None and run["precision"] is None and {"texts", "seconds", "texts_per_s"} <= set(run)

    # the upstream's counts, added up over its two workers: every embeddings call made to it
    text = upstream.call("/metrics")[1]
    assert 'vecbridge_requests_total{endpoint="/v1/embeddings",method="POST",status="200"} 3.0' in text

    # a wrong key: the upstream's refusal, in one line without the key
    with pytest.raises(UpstreamError, match=r"answered 401: missing or wrong token") as err:
        UpstreamModel(f"{upstream.url}/v1", MODEL, key="not-the-key-123")(texts)
    assert "not-the-key-123" not in str(err.value)
    assert UPSTREAM_KEY not in front.log() + upstream.log() and "Traceback" not in front.log() + upstream.log()


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory, sample):
    folder = tmp_path_factory.mktemp("wrapped")
    old = write_collection(f"file://{folder}/old", sample.ids, sample.docs_old)
    return old, sample_alignment(folder, sample)


def test_a_wrapped_collection(serve, wrapped, sample):
    old, align_file = wrapped
    service = serve(["--wrap", f"{old.url}={align_file}", "--model", "vecbridge.sample:recorded_new_model",
                     "--old-model", "vecbridge.sample:recorded_old_model"])
    alignment = Alignment.load(align_file)
    queries = [sample.items[r]["query"] for r in sample.query_rows[:16]]
    status, doc, _ = service.call("/v1/embeddings", {"input": queries})
    assert status == 200 and doc["vecbridge"]["stage"] == "wrapped"
    assert same_bits([d["embedding"] for d in doc["data"]],
                     translate_queries(alignment, recorded_new_model(queries), "cosine"))
    # texts: fused with the old model's vectors, as `vecbridge search --old-vectors`
    fused = FusedSearch(old, alignment, recorded_old_model(queries), k_candidates=100).search(
        recorded_new_model(queries), 10)
    status, doc, _ = service.call("/search", {"texts": queries, "k": 10})
    assert status == 200 and doc["stage"] == "wrapped"
    assert [r["ids"] for r in doc["results"]] == fused[0]
    assert same_bits([r["scores"] for r in doc["results"]], fused[1])
    # vectors: the wrapped collection's own search
    ids, scores = wrap(old, align_file).search(recorded_new_model(queries), 10)
    status, doc, _ = service.call("/search", {"vectors": recorded_new_model(queries).tolist(), "k": 10})
    assert [r["ids"] for r in doc["results"]] == ids
    assert same_bits([r["scores"] for r in doc["results"]], scores)
    hits = np.mean([sample.ids[r] in row["ids"] for r, row in zip(sample.query_rows[:16], doc["results"])])
    assert hits > 0.5
    assert service.call("/status")[1]["alignment"] == alignment.fingerprint


def _serve(*args, env=None):
    return CliRunner().invoke(main, ["serve", *args], env=env)


def test_the_command_refuses_in_one_line(upgrade, monkeypatch):
    cases = [
        ((), 2, "name the new model"),
        (("--state", str(upgrade), "--wrap", "file:///x=a.vb"), 2, "not both"),
        (("--model", MODEL, "--token-env", "VB_UNSET_TOKEN_VAR"), 2, "VB_UNSET_TOKEN_VAR, which is not set"),
        (("--model", MODEL, "--upstream", "ftp://x"), 2, "--upstream takes the http"),
        (("--state", str(upgrade.parent / "none.sqlite")), 4, "no upgrade state at"),
    ]
    for args, code, message in cases:
        r = _serve(*args)
        assert r.exit_code == code and message in r.output and len(r.output.strip().splitlines()) == 1, r.output
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = _serve("--model", MODEL, "--port", str(busy.getsockname()[1]))
    assert r.exit_code == 2 and "cannot listen on 127.0.0.1" in r.output

    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "starlette" else real(name, *a))
    r = _serve("--model", MODEL)
    assert r.exit_code == 4 and 'needs starlette: pip install "vecbridge[serve]"' in r.output



def test_threads_default_to_twice_the_cores_at_most_eight_and_survive_the_workers_environment(monkeypatch):
    """More threads than the cores can serve queue for the interpreter's lock and lengthen the slowest answers."""
    from vecbridge.service import config as service_config
    from vecbridge.service.config import ServeConfig

    for cores, expected in ((1, 2), (2, 4), (4, 8), (64, 8), (None, 2)):
        monkeypatch.setattr(service_config.os, "cpu_count", lambda cores=cores: cores)
        assert ServeConfig(state="s.sqlite").threads == expected
    assert ServeConfig(state="s.sqlite", threads=16).threads == 16
    monkeypatch.setenv(service_config.ENVIRONMENT, ServeConfig(state="s.sqlite", threads=3).to_environment())
    assert ServeConfig.from_environment().threads == 3
