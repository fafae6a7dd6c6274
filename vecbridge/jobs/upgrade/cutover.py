"""Moving what the store serves: ``cutover`` (the new model's vectors), ``rollback`` (the old ones, never written) and
``finalize`` (no more rollback; ``--drop-old`` removes the old vectors). Each writes its intent to the state before
it touches the store and confirms after, so a run killed in between is completed by the next one."""
from __future__ import annotations

from ...connectors import connect
from ...connectors.url import redact
from ...errors import InputError, StoreError
from ...faultpoint import fault_point
from .state import exclusive
from .sync import Syncing

#: what each switching verb serves
_SERVES = {"cutover": "new", "rollback": "old"}


class Switching(Syncing):
    """:meth:`cutover`, :meth:`rollback`, :meth:`finalize` and :meth:`settle`."""

    def cutover(self) -> dict:
        """Serve the new model's vectors (where the store has a serving view, switched in one transaction), after
        bringing them up to the source (records added or changed since the last ``reembed`` get mapped vectors)."""
        return self._move("cutover")

    def rollback(self) -> dict:
        """Serve the old model's vectors again, exactly as before the upgrade (they were never written)."""
        return self._move("rollback")

    def _move(self, verb: str) -> dict:
        with exclusive(self.state.path):
            self.meta = self.state.meta
            pending = self.meta.get("switching")
            self._complete_switch()
            to_stage = self._check(verb, completed=(pending or {}).get("stage"))   # a rerun: completed above
            serving = _SERVES[verb]
            if serving == "new":   # what is served must hold every record the source holds now
                self.sync()
            self._switch(to_stage, serving)
        return self.status()

    def _switch(self, to_stage: str, serving: str) -> None:
        """Intent, switch, confirm: the state says where it is going before the store is switched, and where it is
        once it was, so a run killed in between leaves an intent that the next cutover, rollback or finalize
        completes first (switching the store again is harmless: a view or alias is pointed, not toggled)."""
        self.meta = self.state.update(switching={"stage": to_stage, "serving": serving})
        via = self._serve(serving)
        fault_point(f"{to_stage}.switched")
        self.meta = self.state.update(stage=to_stage, serving=serving, serving_via=via, switching=None)
        self.state.event(to_stage, f"serving the {serving} model's vectors through {via}")

    def _complete_switch(self) -> None:
        """Finish a cutover or rollback that was interrupted between its intent and its confirmation."""
        pending = self.meta.get("switching")
        if pending:
            self._switch(pending["stage"], pending["serving"])

    def finalize(self, *, drop_old: bool = False) -> dict:
        """End the upgrade after a cutover, once every record is native: no more rollback. The old vectors stay
        unless ``drop_old`` (now, or in a later call once finalized): then the old vector column is removed
        (PostgreSQL+pgvector) or, when the new vectors are a collection of their own, the old collection is
        dropped."""
        with exclusive(self.state.path):
            self.meta = self.state.meta
            if self.meta.get("dropping"):   # a drop killed before the state recorded it: this run completes it
                self._drop_recorded()
                return self.status()
            self._complete_switch()
            to_stage = self._check("drop-old" if drop_old else "finalize")
            if self.meta["stage"] != to_stage:   # finalizing now (not dropping after a finalize)
                self._require_native()
            if drop_old:
                self._drop_recorded()
            else:
                fault_point("finalize.dropped")   # (nothing dropped: the same point, for the crash tests)
                self.meta = self.state.update(stage=to_stage, dropped=None)
                self.state.event(to_stage, "old vectors kept: drop them when ready")
        return self.status()

    def _require_native(self) -> None:
        """Bring the upgrade up to the source and refuse to finalize while a record has no native vector (where the
        source's texts are gone, ``no_texts``, its records without text keep their mapped vectors for good)."""
        self.sync()
        c = self.recount()
        waiting, no_text = c["mapped"] + c["pending"], 0 if self.meta.get("no_texts") else c["no-text"]
        if waiting or no_text:
            why = ([f"{waiting:,} still have mapped vectors: run `vecbridge upgrade reembed` to the end first"]
                   if waiting else []) + ([
                f"{no_text:,} without text in {self.meta['text_field']!r} keep their mapped vectors: give them "
                f"text and run `vecbridge upgrade reembed`, or delete them from the source"] if no_text else [])
            raise InputError(f"{waiting + no_text:,} records have no native vector yet: {'; '.join(why)}")

    def _drop_recorded(self) -> None:
        """Intent, drop, record (as :meth:`_switch`): the state says the old vectors are being dropped before they
        are, and that the upgrade is finalized with them dropped once they are, so a run killed in between leaves an
        intent that the next ``finalize`` (or ``status``, once they are gone) completes, never a state that still
        counts on old vectors the store no longer holds."""
        finalizing = self.meta["stage"] != "finalized"
        if not self.meta.get("dropping"):
            self.meta = self.state.update(dropping=self._old_vectors())
        dropped = self._drop_old()
        fault_point("finalize.dropped")
        self.meta = self.state.update(stage="finalized", dropped=dropped, dropping=None)
        self.state.event("finalized" if finalizing else "dropped", f"dropped {dropped}" if finalizing else dropped)

    def settle(self) -> None:
        """Record a ``finalize --drop-old`` that was killed after the old vectors were dropped and before the state
        said so (what ``status`` does first). Only the state is written; a drop not done yet is left to
        ``finalize``, and a busy upgrade (another run holds it) is left as it is."""
        self.meta = self.state.meta
        if not self.meta.get("dropping") or self._old_held():
            return
        try:
            with exclusive(self.state.path):
                self.meta = self.state.meta
                if self.meta.get("dropping"):
                    self._drop_recorded()   # the old vectors are gone: nothing is dropped, the state records it
        except StoreError:
            pass

    def _old_field(self) -> str:
        return self.meta.get("source_field") or connect(self.meta["source"]).vector_field

    def _old_vectors(self) -> str:
        """The old vectors, in words: what ``finalize --drop-old`` drops."""
        if self.meta.get("field"):
            return f"the old vector field {self._old_field()!r}"
        return f"the old collection {redact(self.meta['source'])}"

    def _old_held(self) -> bool:
        """Whether the store still holds the old vectors (the source's old field is read through the new one's
        view: the source's own may be gone)."""
        if self.meta.get("field"):
            return self._old_field() in self.target.info().vector_fields
        return connect(self.meta["source"]).exists()

    def _drop_old(self) -> str:
        """Remove the old vectors (the source's old vector field, or the old collection) unless they are gone
        already (a drop killed before the state recorded it). Returns what was dropped."""
        if self._old_held():
            old = connect(self.meta["source"])
            if self.meta.get("field"):
                old.drop_vector_field(self._old_field())
            else:
                old.drop()
        return self._old_vectors()

    def _serve(self, which: str) -> str:
        """Switch what the store serves, where it can: a pgvector view ``<table>_serving`` over the serving vector
        column, or a Qdrant / Milvus alias ``<collection>_serving`` over the serving collection (new vectors in a
        new collection of the same server). Elsewhere nothing in the store moves: the answer says what clients must
        query instead. Returns how it is served."""
        field = self.meta.get("field")
        can = self.source.capabilities
        if can.serving_view and field:
            name = self.source.serving_view(field if which == "new" else self.source.vector_field)
            return f"view {name}"
        same_store = self.target.identity.location == self.source.identity.location and \
            self.target.identity.store == self.source.identity.store
        if not field and same_store and can.alias:
            alias = f"{self.source.identity.name}_serving"
            (self.target if which == "new" else self.source).point_alias(alias)
            return f"alias {alias}"
        if field:   # named vectors without a view (Qdrant): a query names the vector it searches
            name = field if which == "new" else self.meta.get("source_field")
            vector = f"the named vector {name!r} (using={name!r})" if name else "the default vector (no using=)"
            return (f"nothing switched (this store has no serving view): clients query {vector} of "
                    f"{redact(self.meta['source'])}")
        where = self.meta["target"] if which == "new" else self.meta["source"]
        why = "the new collection is on another server: no alias spans both" if can.alias else "this store has no alias"
        return f"nothing switched ({why}): clients query {redact(where)}"
