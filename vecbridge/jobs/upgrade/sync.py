"""Bringing an upgrade up to its source: records the application added, changed or deleted since their new vector was
made (what ``reembed`` does first, and ``cutover`` and ``finalize`` before they serve the new vectors)."""
from __future__ import annotations

import numpy as np

from ...connectors.base import VectorBatch
from ...faultpoint import fault_point
from ...runtime.record_stamps import digests_of
from .base import UpgradeBase


class Syncing(UpgradeBase):
    """:meth:`sync` and :meth:`changes`."""

    def sync(self) -> dict:
        """Bring the upgrade up to the source. Records added or changed since their new vector was made (a changed
        old vector or text) get the map of their current old vector, written now (stamped ``pending``, in the same
        upsert) so that nothing served is stale, and are re-embedded first; records gone from the source are
        deleted from the upgrade's own collection (a new vector field goes with its record).
        Returns ``{"added", "changed", "removed"}``."""
        return self._compare(write=True)

    def changes(self) -> dict:
        """What :meth:`sync` would pick up now (``{"added", "changed", "removed"}``), writing nothing."""
        return self._compare(write=False)

    def _compare(self, *, write: bool) -> dict:
        added = changed = 0
        text_field = self.meta["text_field"]
        for batch in self.source.scan(batch_size=2000):
            digests = digests_of(batch, text_field)
            known = self.records.digests(batch.ids)
            stale = [j for j, (i, d) in enumerate(zip(batch.ids, digests))
                     if i not in known or (known[i] is not None and known[i] != d)]
            if not stale:
                continue
            n_new = sum(batch.ids[j] not in known for j in stale)
            added, changed = added + n_new, changed + len(stale) - n_new
            if write:
                self._map_stale(batch.take(np.asarray(stale)), [digests[j] for j in stale])
        gone = self._gone()
        if write:
            self._drop(gone)
            if added or changed or gone:
                self.recount()
                self.state.event("sync", f"{added:,} added, {changed:,} changed, {len(gone):,} removed in the source")
        return {"added": added, "changed": changed, "removed": len(gone)}

    def _gone(self) -> list:
        """Ids the upgrade's own collection holds that the source no longer has (none for a vector field of the
        source: it goes with its record): a scan of the stamps, each batch looked up in the source."""
        if self.meta.get("field"):
            return []
        gone: list = []
        for ids in self.records.ids():
            have = set(self.source.get(ids).ids)
            gone.extend(i for i in ids if i not in have)
        return gone

    def _map_stale(self, part: VectorBatch, digests: list[str]) -> None:
        """Records added or changed in the source: their map written, stamped ``pending`` in the same upsert."""
        mapped = self.alignment.transform(part.vectors).astype(np.float32)
        stamps = self.stamper("pending")(len(part), digests=digests, hubness=self.hubness(mapped))
        self.target.upsert(part.with_vectors(mapped, stamps))
        fault_point("reembed.synced")

    def _drop(self, gone) -> None:
        """Records gone from the source: deleted from the upgrade's own collection, their stamps with them (a new
        vector field goes with its record)."""
        if gone and not self.meta.get("field"):
            self.target.delete(list(gone))
