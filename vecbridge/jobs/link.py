"""``vecbridge link``: obtain correspondences between two collections with any mode, as a :class:`Links` file."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .._deprecated import moved
from ..errors import InputError
from ..linking.links import Links
from ..linking.pairspec import PairSpec
from ..pairing.learned import UNPAIRED_SAMPLE
from ..pairing.table import Request, pairing
from ..runtime.models import ModelOptions
from ..runtime.open import open_collection

#: moved to :mod:`vecbridge.pairing.learned` (``fit``, ``link`` and the report grow their pairs there)
__getattr__ = moved("vecbridge.jobs.link", dict.fromkeys(
    ["_estimator", "geh_fit", "unsupervised_fit", "VALIDATION_ROWS", "MIN_FRESH_ROWS", "MIN_GROWN_LINKS",
     "ADVICE_UNSUPERVISED", "ADVICE_GEH", "validation_samples", "check_map", "geh_map", "check_geh", "pseudo_pairs",
     "_with_seeds"], "vecbridge.pairing.learned"))


def link(source, target, pairs: "str | PairSpec", *, seeds: str | None = None, model: str | None = None,
         old_model: str | None = None, text_field: str = "text", sample: int = UNPAIRED_SAMPLE, seed: int = 0,
         params: dict | None = None, force: bool = False, on_step: Callable[[str], None] = lambda s: None,
         models: ModelOptions | None = None) -> Links:
    """Correspondences between ``source`` (old model) and ``target`` (new model), found as ``pairs`` says (any
    :class:`~vecbridge.linking.PairSpec`; ``"geh"`` with ``seeds=FILE`` is read as ``geh:FILE``).

    ``params`` go to the estimator of ``geh`` (:class:`~vecbridge.linking.geh.GEH`) or ``unsupervised``
    (:class:`~vecbridge.align.minivec2vec.MiniVec2Vec`); the papers' defaults otherwise. Links of those two are
    validated without labels (:func:`~vecbridge.pairing.learned.check_map`): a map that fails raises
    :class:`~vecbridge.errors.CheckFailed` unless ``force``, and the links' ``meta["validation"]`` records the
    outcome either way. Each pairing draws its sample as its row of :data:`vecbridge.pairing.table.PAIRINGS` says
    (a file of pairs: every listed pair). ``models`` says where the models of ``reembed`` and ``reference`` run
    (and keeps their throughput)."""
    if pairs == "geh" and seeds:
        pairs = f"geh:{seeds}"
    spec = PairSpec.parse(pairs)
    row = pairing(spec)
    source = open_collection(source)
    target = open_collection(target) if target is not None else None
    params = dict(params or {})
    if params and not row.takes_params:
        raise InputError(f"estimator parameters apply to the geh and unsupervised pairings, not {str(spec)!r}")
    if "target" in row.needs and target is None:
        raise InputError(f"the pairing {str(spec)!r} needs a target collection")
    found = row.sample(source, target, spec, Request(n=sample, seed=seed, model=model, old_model=old_model,
                                                     text_field=text_field, params=params, force=force,
                                                     on_step=on_step, models=models or ModelOptions()))
    n = len(found)
    return Links(list(found.source.ids), list(found.target.ids),
                 found.confidence if found.confidence is not None else np.ones(n, dtype=np.float32),
                 row.link_mode.format(spec=spec), None if found.records else found.source.vectors,
                 None if found.records else found.target.vectors, found.meta)
