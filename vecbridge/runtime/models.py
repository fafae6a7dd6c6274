"""Embedding models by name, path or ``module:function``, loaded once and quietly; offline when the hub is
unreachable.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
import warnings
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from ..errors import InputError, MissingDependency

Embedder = Callable[[Sequence[str]], np.ndarray]


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


def load_model(spec: str, *, batch_size: int = 32, device: str | None = None) -> Embedder:
    """An embedding function from a model spec.

    * ``"package.module:function"``: imported and used as is (it receives a list of texts);
    * a local directory or a sentence-transformers model name: loaded with ``SentenceTransformer``
      (``pip install "vecbridge[models]"``); outputs are returned as the model produces them (no extra
      normalisation), exactly as they would be at serve time.
    """
    if ":" in spec and not Path(spec).exists() and not spec.startswith(("http:", "https:")):
        module_name, _, fn_name = spec.partition(":")
        try:
            with _quiet_model_library(only_if_loaded=True):  # a module that loads a model when imported
                fn = getattr(importlib.import_module(module_name), fn_name)
        except (ImportError, AttributeError) as exc:
            raise InputError(f"cannot import embedding function {spec!r} ({exc})") from None

        def call(texts: Sequence[str]) -> np.ndarray:
            with _quiet_model_library(only_if_loaded=True):
                vectors = fn(list(texts))
            return np.asarray(vectors, dtype=np.float32)

        return call
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise MissingDependency('loading a model by name or path needs sentence-transformers: '
                                'pip install "vecbridge[models]"') from None
    offline = not Path(spec).exists() and not _hub_reachable()
    try:
        with _quiet_model_library():
            model = SentenceTransformer(spec, device=device or "cpu", local_files_only=offline)
    except Exception as exc:  # hub unreachable, bad path, corrupt weights
        hint = ("the model hub is unreachable and the model is not in the local cache: pass a local model "
                "directory" if offline else "offline? pass a local model directory")
        raise InputError(f"cannot load model {spec!r}: {str(exc).splitlines()[0][:200]} ({hint})") from None

    def embed(texts: Sequence[str]) -> np.ndarray:
        with _quiet_model_library():
            vectors = model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    return embed

