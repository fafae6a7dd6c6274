"""Embedding models by name, path or ``module:function``, loaded once and quietly; offline when the hub is
unreachable; on the GPU when there is one (fp16 there), and timed, so a job can say how fast its model ran.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from ..errors import InputError, MissingDependency, StoreError, UsageError

Embedder = Callable[[Sequence[str]], np.ndarray]

#: the devices a command line offers (:func:`resolve_device` also takes ``cuda:N`` and ``mps``)
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "fp32", "fp16")
#: texts per forward pass when none is given: a GPU is only busy with large batches, a CPU gains nothing from them
GPU_BATCH, CPU_BATCH = 256, 32


@contextlib.contextmanager
def _quiet_model_library(only_if_loaded: bool = False) -> Iterator[None]:
    """Silence the model library's progress bars ("Loading weights", download bars) and its warnings below errors
    while we load or run a model, then put its global settings back as they were (transformers' progress-bar switch
    and verbosity, huggingface_hub's per-group progress-bar states). ``only_if_loaded``: leave it alone unless
    something has imported it already (a ``module:function`` model need not pay a second for importing it)."""
    if only_if_loaded and "transformers" not in sys.modules:
        yield
        return
    try:
        hf_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")  # the module (its package exports a class)
        from transformers.utils import logging as hf_logging
    except ImportError:  # no transformers: nothing of it to silence
        yield
        return
    bars_on, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hub_states = getattr(hf_tqdm, "progress_bar_states", None)  # huggingface_hub >= 0.23
    saved = dict(hub_states) if hub_states is not None else None
    with warnings.catch_warnings():  # an environment variable that forces bars on only warns here
        warnings.simplefilter("ignore")
        hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars_on:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                hf_logging.enable_progress_bar()
        if saved is not None:
            hub_states.clear()
            hub_states.update(saved)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the model hub answers at all: where it does not (offline machines, closed networks), a model name is
    looked up in the local cache only, instead of minutes of retries before the same failure."""
    import os
    import socket
    from urllib.parse import urlsplit

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _mps(torch) -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def _found(torch) -> str:
    """What torch sees on this machine, for the line that refuses a device it does not."""
    gpus = [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    gpus += ["mps"] if _mps(torch) else []
    build = (f"{torch.__version__} is a CPU-only build" if torch.version.cuda is None else
             f"{torch.__version__} is built for CUDA {torch.version.cuda}")
    return f"PyTorch sees {', '.join(gpus) + ' and the CPU' if gpus else 'only the CPU'} here ({build})"


def resolve_device(device: str | None = "auto") -> str:
    """The torch device a model runs on: ``auto`` is CUDA when torch sees a GPU, else Apple's ``mps``, else the CPU.
    A GPU asked for where torch sees none (or torch is missing) is the machine's problem, not the data's: one line
    (:class:`~vecbridge.errors.StoreError`) saying what was found."""
    asked = (device or "auto").strip().lower()
    kind, _, index = asked.partition(":")
    if kind not in ("auto", "cpu", "cuda", "mps") or (index and (kind != "cuda" or not index.isdigit())):
        raise UsageError(f"unknown device {device!r}: auto, cpu, cuda (or cuda:N) or mps")
    if asked == "cpu":
        return "cpu"
    try:
        import torch
    except ImportError:
        if asked == "auto":
            return "cpu"
        raise StoreError(f"cannot run the model on {asked}: PyTorch is not installed here "
                         f"(pip install \"vecbridge[models]\")") from None
    if asked == "auto":
        return "cuda" if torch.cuda.is_available() else "mps" if _mps(torch) else "cpu"
    if kind == "mps" and not _mps(torch):
        raise StoreError(f"cannot run the model on mps: {_found(torch)}; use --device auto or cpu")
    if kind == "cuda" and (not torch.cuda.is_available() or int(index or 0) >= torch.cuda.device_count()):
        raise StoreError(f"cannot run the model on {asked}: {_found(torch)}; use --device auto or cpu")
    return asked


def resolve_precision(precision: str | None, device: str) -> str:
    """``auto``: fp16 on a CUDA GPU (more texts per second; ``fp32`` where vectors must match a CPU's closely),
    fp32 elsewhere; fp16 on the CPU is refused (half precision is for GPUs)."""
    p = (precision or "auto").strip().lower()
    if p not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}: {', '.join(PRECISIONS)}")
    if p == "auto":
        return "fp16" if device.startswith("cuda") else "fp32"
    if p == "fp16" and device == "cpu":
        raise UsageError("fp16 runs on a GPU: on the CPU the model runs in fp32 (--precision auto or fp32)")
    return p


class Model:
    """A loaded embedding model: called on a list of texts, it returns one float32 vector per text. It says what
    it runs on (``device``, ``precision``, ``batch_size``: None for a ``module:function``, which runs where it
    runs) and counts the texts and seconds spent embedding (``texts``, ``seconds``) for :meth:`run`."""

    def __init__(self, name: str, encode: Callable[[list[str]], np.ndarray], *, device: str | None,
                 precision: str | None, batch_size: int | None):
        self.name, self._encode = name, encode
        self.device, self.precision, self.batch_size = device, precision, batch_size
        self.texts, self.seconds, self.largest_call = 0, 0.0, 0

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        t0 = time.perf_counter()
        vectors = np.asarray(self._encode(texts), dtype=np.float32)
        self.seconds += time.perf_counter() - t0
        self.texts += len(texts)
        self.largest_call = max(self.largest_call, len(texts))
        return vectors

    def run(self) -> dict:
        """What the model did so far: device, precision, the batch it ran (the batch size, or fewer where every
        call brought fewer texts), texts, seconds and texts per second."""
        batch = min(self.batch_size or self.largest_call, self.largest_call) or self.batch_size
        return {"device": self.device, "precision": self.precision, "batch_size": batch, "texts": self.texts,
                "seconds": self.seconds, "texts_per_s": self.texts / self.seconds if self.seconds else None}


@dataclass
class ModelOptions:
    """Where and how the models of one job run (``--device``, ``--model-batch-size``, ``--precision``). It keeps
    the models it loaded, so the job can say what they ran on and how fast (:meth:`summary`); the settings alone
    travel to other processes (a Ray worker loads its own model)."""

    device: str = "auto"
    batch_size: int | None = None
    precision: str = "auto"
    loaded: list = field(default_factory=list, repr=False, compare=False)

    def load(self, spec: str) -> Model:
        model = load_model(spec, device=self.device, batch_size=self.batch_size, precision=self.precision)
        self.loaded.append(model)
        return model

    def __getstate__(self) -> dict:
        return {**self.__dict__, "loaded": []}

    def texts_per_pass(self, spec: str) -> int | None:
        """The texts model ``spec`` loaded here runs per forward pass: the batch size given, else the default of
        the device it will run on (256 on a GPU, 32 on the CPU; None for a ``module:function``, which takes what
        it is given). A job that hands the model its texts in chunks makes them at least this large, or a GPU
        idles between small calls."""
        if self.batch_size or _is_function(spec):
            return self.batch_size
        return CPU_BATCH if resolve_device(self.device) == "cpu" else GPU_BATCH

    def summary(self) -> dict | None:
        """The throughput of the models loaded here that embedded something (several: their texts and seconds
        added up), or None."""
        runs = [m.run() for m in self.loaded if m.texts]
        if not runs:
            return None
        if len(runs) == 1:
            return runs[0]

        def joined(key):
            values = list(dict.fromkeys(str(r[key]) for r in runs if r[key] is not None))
            return "+".join(values) or None

        texts, seconds = sum(r["texts"] for r in runs), sum(r["seconds"] for r in runs)
        return {"device": joined("device"), "precision": joined("precision"), "batch_size": runs[0]["batch_size"],
                "texts": texts, "seconds": seconds, "texts_per_s": texts / seconds if seconds else None}


def _batched(fn: Callable, batch_size: int | None) -> Callable[[list[str]], np.ndarray]:
    """``fn`` called on ``batch_size`` texts at a time (all of them at once without one)."""
    def call(texts: list[str]) -> np.ndarray:
        with _quiet_model_library(only_if_loaded=True):
            if not batch_size or len(texts) <= batch_size:
                return np.asarray(fn(texts), dtype=np.float32)
            return np.concatenate([np.asarray(fn(texts[lo:lo + batch_size]), dtype=np.float32)
                                   for lo in range(0, len(texts), batch_size)])
    return call


def _is_function(spec: str) -> bool:
    """``package.module:function`` (not a path, not a URL)."""
    return ":" in spec and not Path(spec).exists() and not spec.startswith(("http:", "https:"))


def load_model(spec: str, *, device: str | None = "auto", batch_size: int | None = None,
               precision: str | None = "auto") -> Model:
    """An embedding model from a spec.

    * ``"package.module:function"``: imported and used as is (it receives a list of texts, ``batch_size`` at a
      time when given, else all of them); ``device`` and ``precision`` do not apply to it (it runs where its own
      code puts it) and are ignored;
    * a local directory or a sentence-transformers model name: loaded with ``SentenceTransformer``
      (``pip install "vecbridge[models]"``) on ``device`` (:func:`resolve_device`: ``auto`` takes a GPU when there
      is one), in ``precision`` (:func:`resolve_precision`: ``auto`` is fp16 on CUDA, fp32 elsewhere), encoding
      ``batch_size`` texts per forward pass (default 256 on a GPU, 32 on the CPU); outputs are returned as the
      model produces them (no extra normalisation), exactly as they would be at serve time.
    """
    if _is_function(spec):
        module_name, _, fn_name = spec.partition(":")
        try:
            with _quiet_model_library(only_if_loaded=True):  # a module that loads a model when imported
                fn = getattr(importlib.import_module(module_name), fn_name)
        except (ImportError, AttributeError) as exc:
            raise InputError(f"cannot import embedding function {spec!r} ({exc})") from None
        return Model(spec, _batched(fn, batch_size), device=None, precision=None, batch_size=batch_size)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise MissingDependency('loading a model by name or path needs sentence-transformers: '
                                'pip install "vecbridge[models]"') from None
    where = resolve_device(device)
    dtype = resolve_precision(precision, where)
    batch = batch_size or (CPU_BATCH if where == "cpu" else GPU_BATCH)
    offline = not Path(spec).exists() and not _hub_reachable()
    try:
        with _quiet_model_library():
            model = SentenceTransformer(spec, device=where, local_files_only=offline)
            if dtype == "fp16":
                model.half()
    except Exception as exc:  # hub unreachable, bad path, corrupt weights
        hint = ("the model hub is unreachable and the model is not in the local cache: pass a local model "
                "directory" if offline else "offline? pass a local model directory")
        raise InputError(f"cannot load model {spec!r}: {str(exc).splitlines()[0][:200]} ({hint})") from None

    def encode(texts: list[str]) -> np.ndarray:
        with _quiet_model_library():
            return model.encode(texts, batch_size=batch, convert_to_numpy=True, show_progress_bar=False)

    return Model(spec, encode, device=where, precision=dtype, batch_size=batch)
