"""``vecbridge serve``: one upgrade, or one wrapped old collection, behind an OpenAI-compatible HTTP service, so that
an application (several replicas, another language, or code that calls an embeddings API) upgrades by changing one
base URL.

The parts: :mod:`.config` (what is served, as the command line said it), :mod:`.backend` (the models, loaded once,
and the blocking work: embedding into the space the index is in now, searching at the stage the upgrade is in),
:mod:`.upstream` (a new model behind another OpenAI-compatible endpoint), :mod:`.bodies` (the request and response
documents), :mod:`.metrics` (Prometheus), :mod:`.app` (the ASGI app) and :mod:`.server` (uvicorn).
"""
from __future__ import annotations

import importlib.util

from ..errors import MissingDependency

#: the libraries of the ``serve`` extra: module -> distribution
NEEDS = {"starlette": "starlette", "uvicorn": "uvicorn", "prometheus_client": "prometheus-client"}


def require() -> None:
    """One line naming the extra to install where a library of the service is missing."""
    missing = [dist for module, dist in NEEDS.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise MissingDependency(f"vecbridge serve needs {', '.join(missing)}: pip install \"vecbridge[serve]\"")
