"""Bringing an upgrade up to its source: records the application added, changed or deleted since their new vector was
made (what ``reembed`` does first, and ``cutover`` and ``finalize`` before they serve the new vectors)."""
from __future__ import annotations

import numpy as np

from ...connectors.base import VectorBatch
from ...faultpoint import fault_point
from .base import UpgradeBase
from .state import record_digest


def digests_of(batch: VectorBatch, text_field: str) -> list[str]:
    """:func:`~vecbridge.jobs.upgrade.state.record_digest` of each record of ``batch``: what its new vector is made
    from."""
    return [record_digest(v, (p or {}).get(text_field)) for v, p in zip(batch.vectors, batch.payloads)]


class Syncing(UpgradeBase):
    """:meth:`sync` and :meth:`changes`."""

    def sync(self) -> dict:
        """Bring the state up to the source. Records added or changed since their new vector was made (a changed
        old vector or text) get the map of their current old vector, written now so that nothing served is stale,
        and are stamped ``pending`` (re-embedded first); records gone from the source are deleted from the upgrade's
        own collection (a new vector field goes with its record) and forgotten.
        Returns ``{"added", "changed", "removed"}``."""
        return self._compare(write=True)

    def changes(self) -> dict:
        """What :meth:`sync` would pick up now (``{"added", "changed", "removed"}``), writing nothing."""
        return self._compare(write=False)

    def _compare(self, *, write: bool) -> dict:
        added = changed = 0
        text_field = self.meta["text_field"]
        with self.state.seen() as seen:
            for batch in self.source.scan(batch_size=2000):
                seen(batch.ids)
                digests = digests_of(batch, text_field)
                known = self.state.digests(batch.ids)
                stale = [j for j, (i, d) in enumerate(zip(batch.ids, digests))
                         if i not in known or (known[i] is not None and known[i] != d)]
                if not stale:
                    continue
                n_new = sum(batch.ids[j] not in known for j in stale)
                added, changed = added + n_new, changed + len(stale) - n_new
                if write:
                    self._map_stale(batch.take(np.asarray(stale)), [digests[j] for j in stale])
            gone = seen.missing()
        if write:
            self._drop(gone)
            if added or changed or gone:
                self.state.event("sync", f"{added:,} added, {changed:,} changed, {len(gone):,} removed in the source")
        return {"added": added, "changed": changed, "removed": len(gone)}

    def _map_stale(self, part: VectorBatch, digests: list[str]) -> None:
        """Records added or changed in the source: their map written, then stamped ``pending``."""
        mapped = self.alignment.transform(part.vectors).astype(np.float32)
        self.target.upsert(part.with_vectors(mapped))
        fault_point("reembed.synced")
        self.state.stamp(part.ids, "pending", self.alignment.fingerprint, digests=digests,
                         hubness=self.hubness(mapped))

    def _drop(self, gone) -> None:
        """Records gone from the source: deleted from the upgrade's own collection (a new vector field goes with its
        record), then forgotten, in that order (a run killed in between deletes them again)."""
        if gone:
            if not self.meta.get("field"):
                self.target.delete(list(gone))
            self.state.forget(gone)
