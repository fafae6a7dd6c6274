"""What one service does, without HTTP: the models loaded once, texts embedded into the space the application's
index is in now (:class:`~vecbridge.serving.embedder.SpaceEmbedder`), searches of the upgrade at the stage it is in
(:meth:`~vecbridge.jobs.upgrade.serving.Serving.search_vectors`, with the tuned fusion and hub settings) or of the
wrapped collection, and the upgrade's status. Every method blocks: the app calls them in its thread pool.

Each thread opens its own handles on the upgrade (its state file, its collections): a SQLite connection belongs to
the thread that opened it, and a store's client is not made to be shared. Each request reads the upgrade's state
once, at its start, and is answered by that stage throughout; a stage moved by another process (``upgrade cutover``,
``rollback``, ``tune``, ``reembed``) is seen by the next request, without a restart.
"""
from __future__ import annotations

import threading

import numpy as np

from ..errors import InputError
from ..jobs.upgrade import Upgrade, open_upgrade
from ..runtime.models import ModelOptions
from ..runtime.open import open_collection
from ..serving.embedder import SpaceEmbedder
from ..serving.rerank import FusedSearch
from ..serving.wrap import WrappedCollection
from .bodies import BadRequest, SearchRequest
from .config import ServeConfig
from .upstream import UpstreamModel

#: candidates per query re-scored by fusion over a wrapped collection (as ``vecbridge search``)
FUSION_CANDIDATES = 100


class Backend:
    """The service's work for ``config`` (:class:`~vecbridge.service.config.ServeConfig`): ``mode`` is ``upgrade``,
    ``wrap`` or ``model`` (the model's own vectors, nothing to search)."""

    def __init__(self, config: ServeConfig):
        self.config = config
        self._local = threading.local()
        self.mode = "upgrade" if config.state else "wrap" if config.wrap else "model"
        self.new_dim = self.old_dim = None
        alignment = metric = None
        if self.mode == "upgrade":
            with open_upgrade(config.state) as up:   # refused in one line before any model loads
                self.model_name = config.model or up.meta["model"]
                self.new_dim, self.old_dim = up.target.info().dim, up.source.info().dim
                self.collection = up.source.display_url
        elif self.mode == "wrap":
            url, alignment_file = config.wrap
            wrapped = WrappedCollection(open_collection(url), alignment_file, force=config.force)
            alignment, metric = wrapped.alignment, wrapped.metric
            self.new_dim, self.old_dim = alignment.target_dim, alignment.source_dim
            self.collection = wrapped.collection.display_url
            self.model_name = config.model
        else:
            self.model_name, self.collection = config.model, None
        models = ModelOptions(config.device, config.model_batch_size, config.precision)
        if config.upstream:
            self.model = UpstreamModel(config.upstream, self.model_name, key=config.upstream_key())
        else:
            self.model = models.load(self.model_name)
        self.old_model = models.load(config.old_model) if config.old_model else None
        if self.mode == "upgrade":
            self.embedder = SpaceEmbedder(self.model, upgrade=config.state)
        else:
            self.embedder = SpaceEmbedder(self.model, alignment=alignment, metric=metric)
        self._alignment = alignment

    # --- embeddings ---------------------------------------------------------------------------------------------
    def embed(self, texts: list[str]) -> tuple[np.ndarray, dict]:
        """Vectors of ``texts`` in the space the index is in now, and that space (one reading of the stage)."""
        vectors, space = self.embedder.embed_with_space(texts)
        return vectors, self._wrapped_stage(space)

    def space(self) -> dict:
        return self._wrapped_stage(self.embedder.space())

    def _wrapped_stage(self, space: dict) -> dict:
        """A wrapped collection has no upgrade: its "stage" is ``wrapped``, serving the old vectors, always."""
        return {**space, "stage": "wrapped", "serving": "old"} if self.mode == "wrap" else space

    # --- search -------------------------------------------------------------------------------------------------
    def _upgrade(self) -> Upgrade:
        """This thread's handle on the upgrade, its state read again: the stage this request is answered by."""
        up = getattr(self._local, "upgrade", None)
        if up is None:
            up = self._local.upgrade = Upgrade.open(self.config.state)
        up.meta = up.state.meta
        return up

    def _wrapped(self) -> WrappedCollection:
        wrapped = getattr(self._local, "wrapped", None)
        if wrapped is None:   # its space was checked once, at startup
            wrapped = self._local.wrapped = WrappedCollection(open_collection(self.config.wrap[0]), self._alignment,
                                                              check=False)
        return wrapped

    def search(self, request: SearchRequest) -> tuple[list[list], np.ndarray, dict]:
        """``(ids, scores, what answered)`` for new-model queries (texts encoded here, or vectors)."""
        if self.mode == "model":
            raise BadRequest("this service has nothing to search: start it with --state (an upgrade) or --wrap "
                             "(an old collection)", status=404)
        up = self._upgrade() if self.mode == "upgrade" else None   # the stage, read once, at the start
        fuse = self.old_model is not None and not (up is not None and up.meta.get("dropped"))
        if request.texts is not None:
            q_new = self._encode(self.model, request.texts, self.new_dim, "new")
            q_old = self._encode(self.old_model, request.texts, self.old_dim, "old") if fuse else None
        else:
            q_new, q_old = request.vectors, request.old_vectors
        if up is not None:
            ids, scores = up.search_vectors(q_new, request.k, old_queries=q_old, rerank=self.config.rerank,
                                            embed=lambda texts: self._encode(self.model, texts, self.new_dim, "new"))
            return ids, scores, {"stage": up.meta["stage"], "serving": up.meta["serving"]}
        wrapped = self._wrapped()
        if q_old is not None:
            ids, scores = FusedSearch(wrapped.collection, self._alignment, q_old,
                                      k_candidates=FUSION_CANDIDATES).search(q_new, request.k)
        else:
            ids, scores = wrapped.search(q_new, request.k)
        return ids, scores, {"stage": "wrapped", "serving": "old"}

    @staticmethod
    def _encode(model, texts: list[str], dim: int | None, which: str) -> np.ndarray:
        vectors = np.asarray(model(texts), dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts) or (dim is not None and vectors.shape[1] != dim):
            raise InputError(f"the {which} model gave vectors of shape {vectors.shape} for {len(texts)} texts; the "
                             f"collection holds {dim}-d {which}-model vectors")
        return vectors

    # --- status -------------------------------------------------------------------------------------------------
    def status(self) -> dict:
        """The upgrade's status (as ``vecbridge upgrade status --json``), else what is served."""
        served = {"mode": self.mode, "model": self.model_name, "old_model": self.config.old_model,
                  "upstream": getattr(self.model, "name", None) if self.config.upstream else None,
                  # where the local model runs and how fast it has embedded so far (an upstream one: None)
                  "model_run": None if self.config.upstream else self.model.run()}
        if self.mode == "upgrade":
            return {**self._upgrade().status(), "service": served}
        space = self.space()
        return {"stage": "wrapped" if self.mode == "wrap" else None, "serving": space["space"],
                "collection": self.collection, "alignment": space["alignment"], "metric": space["metric"],
                "dim": space["dim"], "service": served}
