"""What every part of an upgrade under way shares: its state, collections and models, the stage guard, the status.

The verbs build on this: :mod:`.cutover` (cutover, rollback, finalize), :mod:`.scheduler` (re-embedding),
:mod:`.serving` (search, tune, measure); :class:`vecbridge.jobs.upgrade.core.Upgrade` has them all.
"""
from __future__ import annotations

import numpy as np

from ...align.artifact import Alignment
from ...connectors import connect
from ...connectors.base import Collection
from ...connectors.url import redact
from ...quality.scoring import hub_penalty
from ...runtime.models import ModelOptions
from ...runtime.open import load_alignment
from .stages import check
from .state import UpgradeState

#: reference queries per record in a hub score (``r(d)``: mean cosine to its nearest reference queries)
HUB_K = 10


def open_target(source: str, field: str | None, target: str | None) -> Collection:
    """Where an upgrade writes its new vectors: the vector ``field`` of the source, else the collection ``target``
    (the driver and each Ray worker of ``reembed`` open it alike)."""
    if field:
        return connect(source).with_vector_field(field)
    return connect(target)


class UpgradeBase:
    """An upgrade under way, opened from its state file: the collections, the models, and its status."""

    def __init__(self, state: UpgradeState):
        self.state = state
        self.meta = state.meta
        self.source = connect(self.meta["source"], read_only=True)
        self.target = self._target()
        self._model = None
        self.models = ModelOptions()   # where its models run: this machine's choice, never kept in the state
        self._alignment = None
        self._reference = state.reference()

    @classmethod
    def open(cls, path):
        return cls(UpgradeState.open(path))

    def _target(self) -> Collection:
        return open_target(self.meta["source"], self.meta.get("field"), self.meta.get("target"))

    @property
    def model(self):
        if self._model is None:
            self._model = self.models.load(self.meta["model"])
        return self._model

    def run_models(self, models: ModelOptions | None) -> None:
        """Run the upgrade's models as ``models`` says from now on (the model is loaded again on first use)."""
        if models is not None and models is not self.models:
            self.models, self._model = models, None

    @property
    def alignment(self) -> Alignment:
        if self._alignment is None:
            self._alignment = load_alignment(self.meta["alignment"])[0]
        return self._alignment

    def hubness(self, new_vectors) -> np.ndarray | None:
        """Hub scores ``r(d)`` of new vectors against the reference queries (None before there are any)."""
        if self._reference is None or not len(new_vectors):
            return None
        return hub_penalty(new_vectors, self._reference, HUB_K)

    def close(self) -> None:
        self.state.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check(self, verb: str, *, completed: str | None = None) -> str:
        """Re-read the state (another run may have moved it) and check ``verb`` against the stage table
        (:func:`vecbridge.jobs.upgrade.stages.check`): the stage it leads to, or one line saying why not."""
        self.meta = self.state.meta
        return check(self.meta, verb, self.state.path, completed=completed)

    def status(self) -> dict:
        counts = self.state.counts()
        total = sum(counts.values())
        return {"state": str(self.state.path), "stage": self.meta["stage"], "serving": self.meta["serving"],
                "serving_via": self.meta.get("serving_via"), "switching": self.meta.get("switching"),
                "source": redact(self.meta["source"]), "vectors": self.meta.get("field") or
                redact(self.meta["target"]), "model": self.meta["model"], "alignment": self.meta["alignment"],
                "text_field": self.meta["text_field"], "counts": counts, "total": total,
                "native_fraction": counts["native"] / total if total else 0.0,
                "fusion_beta": "old model alone" if self.meta.get("fusion_stays") else self.meta.get("fusion_beta"),
                "hub_weight": self.meta.get("hub_weight", 0.0),
                "hub_reference": self.meta.get("hub_reference"), "dropped": self.meta.get("dropped"),
                "dropping": self.meta.get("dropping"),
                "probe": self.meta.get("probe"),
                "events": self.state.events()}
