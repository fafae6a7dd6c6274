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
from ...runtime.provenance import spaces_of
from ...runtime.record_stamps import ORIGINS, NativeStamps, RecordStamps, Stamper
from ...runtime.reembed_worker import open_target
from .stages import check
from .state import UpgradeState, exclusive

#: reference queries per record in a hub score (``r(d)``: mean cosine to its nearest reference queries)
HUB_K = 10
#: what an upgrade whose source holds no texts says of its mapped vectors (start, status, reembed)
TEXTS_GONE = "no texts: the mapped vectors are final"


def about_map(meta: dict) -> dict:
    """What ``status`` says of the map beyond the counts: its label-free validation (a map fitted without true
    pairs) and, where the source's texts are gone, that the mapped vectors are final."""
    out = {}
    if meta.get("validation"):
        out["map_validation"] = meta["validation"]
    if meta.get("no_texts"):
        out["texts_gone"] = TEXTS_GONE
    return out


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
        self.records = RecordStamps(self.target, log=self.meta.get("query_log"))
        if state.has_legacy_rows():   # a state file of an earlier version: its stamps move into the store, once
            with exclusive(state.path):
                self.carry_over()

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

    def stamper(self, origin: str) -> "Stamper":
        """The stamps of records this upgrade writes as ``origin``: made by its map (mapped, pending), by its model
        (native) or kept (no-text), all in the new model's space."""
        spaces = spaces_of(self.alignment)
        made_by = {"native": self.meta["model"], "no-text": "kept its mapped vector"}.get(
            origin, self.alignment.fingerprint)
        return Stamper(origin, made_by, spaces["target"] if spaces else None, self.alignment.target_dim)

    def native_stamps(self) -> NativeStamps:
        """The stamps of records the new model embeds (``reembed``, the cascade)."""
        return NativeStamps(self.stamper("native"), self.meta["text_field"], self._reference, HUB_K)

    def counts(self) -> dict[str, int]:
        """Records per origin as the state last counted them (every command that changes stamps keeps them up to
        date; :meth:`recount` counts the store's stamps again)."""
        kept = self.meta.get("counts")
        if not isinstance(kept, dict):
            return self.recount()
        return {o: int(kept.get(o, 0)) for o in ORIGINS}

    def recount(self) -> dict[str, int]:
        """Count the stamps in the store (one scan) and keep the counts in the state."""
        counts = self.records.counts()
        self.meta = self.state.update(counts=counts)
        return counts

    def count(self, moved: dict[str, int]) -> None:
        """Add ``moved`` (origin -> records gained, negative for lost) to the kept counts, as a batch lands."""
        counts = self.counts()
        for origin, n in moved.items():
            counts[origin] = max(0, counts[origin] + int(n))
        self.meta = self.state.update(counts=counts)

    def carry_over(self) -> int:
        """Write the per-record stamps a state file of an earlier version kept into the store, beside the vectors
        they describe (each record read and written again once), then empty them from the file: the store holds
        every stamp from then on. Returns the records carried over."""
        if not self.state.has_legacy_rows():
            return 0
        spaces = spaces_of(self.alignment)
        log = self.meta.get("query_log") or self.meta.get("hub_reference") or None
        moved = self.records.carry_over(self.state.legacy_rows(), spaces["target"] if spaces else None,
                                        self.alignment.target_dim, log)
        if log and not self.meta.get("query_log"):
            self.meta = self.state.update(query_log=log)
            self.records.log = log
        self.state.drop_legacy_rows()
        self.state.event("carried-over", f"{moved:,} record stamps moved from the state file into the store")
        self.recount()
        return moved

    def _fusion_shown(self):
        """How ``status`` names the fusion weight searches with old-model queries use now."""
        if self.meta.get("fusion_stays"):
            return "old model alone"
        if self.meta.get("fusion_beta") is not None:
            return self.meta["fusion_beta"]
        alone = "the old model alone" if self.meta.get("serving", "old") == "old" else "the new model alone"
        return (f"not tuned: {alone} (what the application had before; `vecbridge upgrade tune` with queries "
                f"with known answers picks the fusion)")

    def status(self) -> dict:
        counts = self.counts()
        total = sum(counts.values())
        return {"state": str(self.state.path), "stage": self.meta["stage"], "serving": self.meta["serving"],
                "serving_via": self.meta.get("serving_via"), "switching": self.meta.get("switching"),
                "source": redact(self.meta["source"]), "vectors": self.meta.get("field") or
                redact(self.meta["target"]), "model": self.meta["model"], "alignment": self.meta["alignment"],
                "text_field": self.meta["text_field"], "counts": counts, "total": total,
                "native_fraction": counts["native"] / total if total else 0.0,
                "fusion_beta": self._fusion_shown(),
                "hub_weight": self.meta.get("hub_weight", 0.0),
                "cascade_beta": self.meta.get("cascade_beta"), "cascade_rerank": self.meta.get("cascade_k"),
                "cascade_hub_weight": self.meta.get("cascade_hub_weight", 0.0),
                "hub_reference": self.meta.get("hub_reference"), "dropped": self.meta.get("dropped"),
                "dropping": self.meta.get("dropping"),
                "probe": self.meta.get("probe"), "maps": self.meta.get("maps"), **about_map(self.meta),
                "events": self.state.events()}
