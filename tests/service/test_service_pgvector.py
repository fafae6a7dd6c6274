"""``vecbridge serve`` over a model upgrade on real PostgreSQL+pgvector, called with the official ``openai`` client
and plain HTTP: its embeddings are ``translate_queries`` bit for bit before the cutover and the model's own after
one made by another process (no restart, every request in flight answered by one stage), its searches are
``Upgrade.search``'s, and it refuses what it cannot answer in one line."""
from __future__ import annotations

import base64
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.embedders import mpnet_lookup
from tests.embedding_spaces import same_bits, upgrade_vectors
from tests.service.conftest import ROOT, TOKEN, error_of
from vecbridge.connectors import VectorBatch, connect
from vecbridge.jobs.upgrade import Upgrade, start

for _needed in ("starlette", "uvicorn", "prometheus_client"):   # the [serve] extra
    pytest.importorskip(_needed)
openai = pytest.importorskip("openai")

MODEL = "tests.embedders:mpnet_lookup"
OLD_MODEL = "vecbridge.sample:recorded_old_model"
N, FIT = 300, 200
pytestmark = pytest.mark.filterwarnings("ignore::vecbridge.align.FewPairsWarning")


@pytest.fixture(scope="module")
def upgrade(pg_engine, sample, tmp_path_factory):
    """An upgrade of N records in a pgvector table, the new vectors in a field of the same table."""
    url = pg_engine.url(f"svc_{tmp_path_factory.mktemp('x').name[-6:].lower()}")
    src = connect(url).create(dim=384)
    src.upsert(VectorBatch(sample.ids[:N], sample.docs_old[:N], [{"text": it["doc"]} for it in sample.items[:N]]))
    state = tmp_path_factory.mktemp("pg_upgrade") / "svc.upgrade.sqlite"
    start(url, model=MODEL, text_field="text", state_path=state, field="v_new", fit_sample=FIT)
    return state


@pytest.fixture(scope="module")
def service(serve, upgrade):
    return serve(["--state", upgrade, "--old-model", OLD_MODEL, "--threads", "4"])


@pytest.fixture(scope="module")
def client(service):
    return openai.OpenAI(base_url=f"{service.url}/v1", api_key=TOKEN, max_retries=0)


def _texts(sample, lo=0, n=12):
    return [it["doc"] for it in sample.items[lo:lo + n]]


def test_the_openai_client_gets_translate_queries_bit_for_bit(client, upgrade, sample):
    texts = _texts(sample)
    native, translated, alignment = upgrade_vectors(upgrade, texts)
    got = client.embeddings.create(model="anything", input=texts)   # the client asks for base64 by default
    assert [d.index for d in got.data] == list(range(len(texts)))
    assert same_bits([d.embedding for d in got.data], translated)
    assert got.model == MODEL and got.usage.prompt_tokens == sum(len(t.split()) for t in texts)
    assert got.usage.total_tokens == got.usage.prompt_tokens
    floats = client.embeddings.create(model="anything", input=texts, encoding_format="float")
    assert same_bits([d.embedding for d in floats.data], translated)
    one = client.embeddings.create(model="anything", input=texts[0], dimensions=384)
    assert same_bits([one.data[0].embedding], upgrade_vectors(upgrade, texts[:1])[1])   # a batch of one, as sent
    with pytest.raises(openai.BadRequestError, match="'dimensions' 768 is not what this service returns"):
        client.embeddings.create(model="anything", input=texts[0], dimensions=768)


def test_plain_http_base64_round_trip_and_the_stage_that_answered(service, upgrade, sample):
    texts = _texts(sample, 20, 5)
    _, translated, alignment = upgrade_vectors(upgrade, texts)
    status, doc, headers = service.call("/v1/embeddings", {"model": "m", "input": texts, "encoding_format": "base64"})
    assert status == 200 and doc["object"] == "list"
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in doc["data"]]
    assert same_bits(decoded, translated)
    assert doc["vecbridge"] == {"space": "old", "stage": "mapped", "serving": "old",
                                "alignment": alignment.fingerprint, "metric": alignment.metadata["metric"]}
    assert headers["x-vecbridge-stage"] == "mapped"


def test_search_is_the_upgrades_search(service, upgrade, sample):
    texts = _texts(sample, 40, 6)
    with Upgrade.open(upgrade) as up:
        ids, scores = up.search(texts, 7, old_model=OLD_MODEL)        # fused with the old model, as served
        ids_v, scores_v = up.search_vectors(mpnet_lookup(texts), 5)   # the new model's vectors alone
    status, doc, _ = service.call("/search", {"texts": texts, "k": 7})
    assert status == 200 and doc["stage"] == "mapped" and doc["serving"] == "old"
    assert [r["ids"] for r in doc["results"]] == ids
    assert same_bits([r["scores"] for r in doc["results"]], scores)
    assert ids[0][0] == sample.ids[40]   # a record's own text finds it first
    status, doc, _ = service.call("/search", {"vectors": mpnet_lookup(texts).tolist(), "k": 5})
    assert status == 200 and [r["ids"] for r in doc["results"]] == ids_v
    assert same_bits([r["scores"] for r in doc["results"]], scores_v)


@pytest.mark.parametrize("path, body, status, message", [
    ("/v1/embeddings", b"{not json", 400, "the body is not JSON"),
    ("/v1/embeddings", [1, 2], 400, "the body is a JSON list, not an object"),
    ("/v1/embeddings", {"model": "m"}, 400, "the request has no 'input'"),
    ("/v1/embeddings", {"input": [[101, 2023]]}, 400, "token arrays are not supported"),
    ("/v1/embeddings", {"input": [101, 2023]}, 400, "token arrays are not supported"),
    ("/v1/embeddings", {"input": []}, 400, "'input' is an empty list"),
    ("/v1/embeddings", {"input": ["a", 3.5]}, 400, "'input' item 1 is a float, not a text"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, 400, "'encoding_format' must be float or base64"),
    ("/v1/embeddings", {"input": "a text the lookup model lacks"}, 500, "^internal error: KeyError: "),
    ("/search", {"texts": ["a"], "vectors": [[0.0]]}, 400, "send 'texts'"),
    ("/search", {"vectors": [[0.5, 0.5]]}, 400, "'vectors' must be 768-d vectors, got 2-d"),
    ("/search", {"vectors": [[1e39] * 768]}, 400, "not a finite float32 number"),
    ("/search", {"vectors": [[0.1] * 768, [0.1] * 767]}, 400, r"the vectors of 'vectors' differ in length \(767, 768\)"),
    ("/search", {"vectors": [["x"] * 768]}, 400, "'vectors' must hold numbers only"),
    ("/search", {"texts": ["a"], "k": 0}, 400, "'k' must be a whole number from 1 to 1000"),
    ("/search", {"vectors": [[0.1] * 768], "old_vectors": [[0.1] * 384] * 2}, 400, "'old_vectors' has 2 rows"),
    ("/nowhere", {}, 404, "no such endpoint: POST /nowhere"),
    ("/status", {}, 405, "POST is not allowed here"),
])
def test_bad_requests_get_one_line_4xx(service, path, body, status, message):
    got, doc, _ = service.call(path, raw=body if isinstance(body, bytes) else None,
                               body=None if isinstance(body, bytes) else body)
    assert got == status, doc
    assert re.search(message, error_of(doc)), doc


def test_the_token_is_asked_for_and_never_shown(service):
    for token in (None, "wrong-token"):
        status, doc, headers = service.call("/v1/embeddings", {"input": "x"}, token=token)
        assert status == 401 and headers["www-authenticate"] == "Bearer"
        assert "Authorization: Bearer <token>" in error_of(doc)
        assert service.call("/status", token=token)[0] == 401
    assert service.call("/healthz", token=None)[:2] == (200, {"status": "ok", "mode": "upgrade", "stage": "mapped",
                                                              "space": "old"})
    status, doc, _ = service.call("/status")
    assert status == 200 and doc["stage"] == "mapped" and doc["counts"]["native"] == FIT
    assert doc["service"]["old_model"] == OLD_MODEL
    log = service.log()
    assert TOKEN not in log and "Traceback" not in log


def test_metrics_count_requests_and_show_the_stage(service, sample):
    # the requests counted below, made here: with the tests spread over workers, no other test's may reach this service
    assert service.call("/v1/embeddings", {"input": _texts(sample, 50, 2)})[0] == 200
    assert service.call("/v1/embeddings", {"input": "x"}, token="wrong-token")[0] == 401
    assert service.call("/search", {"texts": _texts(sample, 52, 2), "k": 3})[0] == 200
    assert service.call("/metrics", token=None)[0] == 401
    status, text, headers = service.call("/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert re.search(r'vecbridge_requests_total\{endpoint="/v1/embeddings",method="POST",status="200"\} [1-9]', text)
    assert re.search(r'vecbridge_requests_total\{endpoint="/v1/embeddings",method="POST",status="401"\} [1-9]', text)
    assert 'vecbridge_request_seconds_bucket{endpoint="/search",le="0.1",method="POST",status="200"}' in text
    assert 'vecbridge_upgrade_stage{stage="mapped"} 1.0' in text and 'vecbridge_upgrade_stage{stage="cutover"} 0.0' in text
    assert "vecbridge_upgrade_serving_new 0.0" in text
    assert f'vecbridge_upgrade_records{{origin="native"}} {float(FIT)}' in text
    assert f"vecbridge_upgrade_native_fraction {FIT / N}" in text


def test_a_cutover_by_another_process_switches_the_embeddings_without_a_restart(service, upgrade, sample):
    """Requests keep coming while `vecbridge upgrade cutover` runs in a process of its own: none fails, each is
    answered by one stage (its vectors are what that stage gives), and after it the model's own vectors come back."""
    texts = _texts(sample, 100, 4)
    native, translated, _ = upgrade_vectors(upgrade, texts)
    answers, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            answers.append(service.call("/v1/embeddings", {"input": texts})[:2])
            status, doc, _ = service.call("/search", {"texts": texts[:1], "k": 3})
            answers.append((status, doc if status != 200 else {"search": doc["stage"]}))

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        done = subprocess.run([sys.executable, "-m", "vecbridge.cli", "upgrade", "cutover", "--state", str(upgrade)],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        seen = len(answers)
        deadline = time.monotonic() + 30
        while len(answers) < seen + 6 and time.monotonic() < deadline:   # a few more answers after the switch
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert done.returncode == 0, done.stderr
    assert answers and all(status == 200 for status, _ in answers), [a for a in answers if a[0] != 200][:3]
    stages = set()
    for _, doc in answers:
        if "search" in doc:
            stages.add(doc["search"])
            continue
        got = [d["embedding"] for d in doc["data"]]
        space = doc["vecbridge"]
        stages.add(space["stage"])
        assert (space["space"], space["serving"]) in (("old", "old"), ("new", "new"))
        assert same_bits(got, translated if space["space"] == "old" else native)
    assert stages == {"mapped", "cutover"}
    status, doc, headers = service.call("/v1/embeddings", {"input": texts})
    assert status == 200 and doc["vecbridge"]["stage"] == "cutover" and headers["x-vecbridge-serving"] == "new"
    assert same_bits([d["embedding"] for d in doc["data"]], native)
    assert service.call("/search", {"texts": texts[:1], "k": 3})[1]["stage"] == "cutover"
    text = service.call("/metrics")[1]
    assert 'vecbridge_upgrade_stage{stage="cutover"} 1.0' in text and "vecbridge_upgrade_serving_new 1.0" in text
