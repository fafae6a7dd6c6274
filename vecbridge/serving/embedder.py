"""New-model texts -> vectors in the space the application's index is in now: the one place that says so, for the
LangChain and LlamaIndex integrations and for a service alike.

During a model upgrade the index an application searches holds the old model's vectors until the cutover and the
new model's after it. An application that embeds in process runs the new model only, and gets back:

* with an alignment (a wrapped old collection): the new model's vectors translated into the old space, exactly as
  ``search --wrap`` translates its queries (:func:`~vecbridge.serving.translate.translate_queries`), always;
* with an upgrade's state file: translated while the upgrade serves the old vectors (before ``cutover``, and again
  after a ``rollback``), the model's own vectors once it serves the new ones. A stage moved by another process is
  picked up on the next call (:class:`~vecbridge.serving.stage.StageWatch`), without a restart;
* with neither: the model's own vectors.
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence

import numpy as np

from ..align.artifact import Alignment
from ..connectors.base import check_metric
from ..errors import InputError, VecbridgeError
from ..runtime.models import load_model
from ..runtime.open import load_alignment
from .stage import StageWatch
from .translate import translate_queries

#: what a text is embedded as (both take the same translation: for a rotation it is the inverse map)
KINDS = ("query", "document")


def _model_name(model) -> str:
    if isinstance(model, str):
        return model
    return f"{getattr(model, '__module__', None) or '?'}:{getattr(model, '__qualname__', type(model).__name__)}"


class SpaceEmbedder:
    """Embed texts with the new model into the space the index is in now (see the module's docstring).

    ``model``: a model spec for :func:`~vecbridge.runtime.models.load_model` (a sentence-transformers name or
    directory, or ``module:function``; ``model_options`` such as ``device=`` or ``batch_size=`` go to it), or a
    callable from a list of texts to new-model vectors. With ``upgrade`` (the upgrade's state file) it defaults to
    the upgrade's model. ``alignment``: an :class:`~vecbridge.align.artifact.Alignment` or its file, for an old
    collection searched through it. ``metric``: the old index's metric (default: the one the alignment records).
    Safe to share between threads.
    """

    def __init__(self, model=None, *, alignment=None, metric: str | None = None, upgrade=None, **model_options):
        if alignment is not None and upgrade is not None:
            raise InputError("give an alignment (a wrapped old collection) or an upgrade's state file, not both")
        self._watch = StageWatch(upgrade) if upgrade is not None else None
        if model is None and self._watch is not None:
            model = self._watch.read().model
        if model is None:
            raise InputError("name the new model to embed with (a model name, directory or module:function)")
        if callable(model):
            if model_options:
                raise InputError(f"model options ({', '.join(sorted(model_options))}) apply to a model loaded by "
                                 f"name, not to a function")
            self._model: Callable[[Sequence[str]], np.ndarray] = model
        else:
            self._model = load_model(str(model), **model_options)
        self.model_name = _model_name(model)
        self.metric = check_metric(metric) if metric is not None else None
        self._alignment = load_alignment(alignment)[0] if alignment is not None else None
        self._loaded: dict[str, Alignment] = {}   # the upgrade's map, loaded once, when first translated through
        self._fingerprints: dict[int, str] = {}   # by the id of a map held above (kept for the embedder's life)
        self._lock = threading.Lock()
        self._native_dim: int | None = None

    @property
    def alignment(self) -> Alignment | None:
        """The map new-model vectors are translated through now (None: they are returned as the model gives them)."""
        return self._current()[0]

    def _upgrade_alignment(self, path: str) -> Alignment:
        with self._lock:
            if path not in self._loaded:
                if not path:
                    raise InputError(f"the upgrade state {self._watch.path} names no alignment to translate with")
                self._loaded[path] = load_alignment(path)[0]
            return self._loaded[path]

    def _current(self) -> tuple[Alignment | None, dict]:
        """``(the map to translate through or None, what the state says)`` now."""
        if self._watch is None:
            return self._alignment, {}
        now = self._watch.read()
        info = {"stage": now.stage, "serving": now.serving}
        return (self._upgrade_alignment(now.alignment) if now.serving == "old" else None), info

    def _metric(self, alignment: Alignment) -> str:
        return self.metric or alignment.metadata["metric"]

    def embed(self, texts: Sequence[str], kind: str = "query") -> np.ndarray:
        """Float32 vectors of ``texts`` (one row each) in the space the index is in now: translated for an old
        index (bit for bit what ``translate_queries(alignment, model(texts), metric)`` gives), else the model's
        own."""
        return self.embed_with_space(texts, kind)[0]

    def embed_with_space(self, texts: Sequence[str], kind: str = "query") -> tuple[np.ndarray, dict]:
        """:meth:`embed`, and the space its vectors are in (:meth:`space`'s document) from the same reading of the
        upgrade's stage: a stage moved meanwhile by another process never splits the two, so a service answers each
        request by exactly one stage and says which."""
        if kind not in KINDS:
            raise InputError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            space = self.space()
            return np.zeros((0, space["dim"] or 0), dtype=np.float32), space
        native = np.asarray(self._model(texts), dtype=np.float32)
        if native.ndim != 2 or len(native) != len(texts):
            raise InputError(f"the model {self.model_name} returned an array of shape {native.shape} for "
                             f"{len(texts)} texts (one vector per text expected)")
        self._native_dim = native.shape[1]
        alignment, info = self._current()   # after the model ran: the stage nearest to when the vectors are used
        if alignment is None:
            return native, self._space(alignment, info)
        if native.shape[1] != alignment.target_dim:
            raise InputError(f"the model {self.model_name} gives {native.shape[1]}-d vectors but the alignment "
                             f"translates {alignment.target_dim}-d new-model vectors")
        return translate_queries(alignment, native, self._metric(alignment)), self._space(alignment, info)

    def space(self) -> dict:
        """Which space :meth:`embed` answers in now: ``old`` (translated) or ``new`` (the model's own), the model, the
        vectors' dimension (None for the model's own before its first call), the upgrade's stage and what it
        serves (None without an upgrade), and the fingerprint of the map translated through."""
        return self._space(*self._current())

    def _space(self, alignment: Alignment | None, info: dict) -> dict:
        dim = alignment.source_dim if alignment is not None else self._native_dim
        if dim is None and self._watch is not None:   # the upgrade's map says what its new model gives
            try:
                dim = self._upgrade_alignment(self._watch.read().alignment).target_dim
            except VecbridgeError:
                dim = None
        return {"space": "new" if alignment is None else "old", "translated": alignment is not None,
                "model": self.model_name, "dim": dim, "stage": info.get("stage"), "serving": info.get("serving"),
                "alignment": self._fingerprint(alignment) if alignment is not None else None,
                "metric": self._metric(alignment) if alignment is not None else None}

    def _fingerprint(self, alignment: Alignment) -> str:
        """The map's fingerprint, hashed once per map (hashing its tensors took 12 ms, on every call)."""
        with self._lock:
            if id(alignment) not in self._fingerprints:
                self._fingerprints[id(alignment)] = alignment.fingerprint
            return self._fingerprints[id(alignment)]


class MappedEmbeddings(SpaceEmbedder):
    """Drop-in embedding function: new model in, old-space vectors out, for code that queries an old index (a
    :class:`SpaceEmbedder` with an alignment).

    ``embed`` is any callable from a list of texts to new-model vectors (e.g. ``SentenceTransformer.encode``).
    Provides ``__call__``, ``embed_documents`` and ``embed_query`` (the shapes LangChain-style stores expect).
    """

    def __init__(self, embed: Callable[[list[str]], np.ndarray], alignment, metric: str = "cosine"):
        super().__init__(embed, alignment=alignment, metric=metric)

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.embed(texts)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed(texts, kind="document").tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed([text])[0].tolist()
