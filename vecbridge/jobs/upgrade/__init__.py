"""A model upgrade on a live collection: map now, re-embed in the background, cut over, roll back, finalize.

``start`` fits the map on a re-embedded sample (or takes one), writes mapped vectors *beside* the old ones — a new
vector field where the store has named vectors (PostgreSQL+pgvector, Qdrant), a new collection elsewhere — and
stamps every record in the store, in the same write as its new vector (:mod:`vecbridge.runtime.record_stamps`; the
state file, :mod:`vecbridge.runtime.upgrade_state`, keeps the upgrade's own document). ``reembed`` then replaces
mapped vectors by the new model's own, batch by batch, resumable after ``kill -9``, picking up records the source
gained meanwhile; ``search`` serves new-model queries over the upgrade's vectors at every stage (optionally fused
with old-model queries over the old vectors). ``cutover`` and ``rollback`` move what the store serves — a
PostgreSQL view in one transaction — and the state's serving pointer; ``finalize`` ends the upgrade. The old
vectors are never written.

The parts: :mod:`.stages` (the stage table every verb checks), :mod:`.state` (the state file), :mod:`.starting`,
:mod:`.planning`, :mod:`.sync` (bringing the upgrade up to its source), :mod:`.scheduler` (re-embedding),
:mod:`.cutover` (cutover, rollback, finalize), :mod:`.serving` (search, tune, measure) and :mod:`.core`
(:class:`Upgrade`, with every verb).
"""
from ...serving.weights import FUSION_BETAS, HUB_WEIGHTS
from .base import HUB_K, open_target
from .core import Upgrade, learn_queries, measure, open_upgrade, tune
from .planning import PLAN_FIT_SAMPLE, PLAN_FRACTIONS, PLAN_POOL, plan, plan_sizes, predict_stages
from .scheduler import IN_FLIGHT, embed_and_write
from .stages import STAGES, TRANSITIONS
from .starting import default_state_path, start, url_without_secrets

__all__ = ["Upgrade", "open_upgrade", "start", "plan", "plan_sizes", "predict_stages", "tune", "measure",
           "learn_queries", "url_without_secrets", "default_state_path", "open_target", "embed_and_write",
           "STAGES", "TRANSITIONS", "FUSION_BETAS", "HUB_WEIGHTS", "HUB_K", "IN_FLIGHT", "PLAN_FRACTIONS",
           "PLAN_POOL", "PLAN_FIT_SAMPLE"]
