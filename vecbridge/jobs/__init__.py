"""Everything that opens a store: fit from collections, link, report, evaluate, drift, migrate, merge, verify, wrap,
upgrade.

The layers below never see a store (``align``, ``linking``) or a job (``connectors``); the CLI only parses and
prints what these return.
"""
import importlib

from ..results import Evaluation, MergeResult, MigrationResult, Report, VerifyResult
from ..runtime.checkpoint import Checkpoint
from ..serving.rerank import FusedSearch, HubPenalizedSearch, RerankedSearch
from ..serving.translate import MappedEmbeddings, translate_queries
from ..serving.wrap import WrappedCollection, federated_search, wrap
from .evaluate import collect_pairs, evaluate_alignment
from .merge import merge
from .report import compatibility_report
from .rewrite import migrate, plan_migration
from .upgrade import Upgrade, open_upgrade
from .upgrade import plan as plan_upgrade
from .upgrade import start as start_upgrade
from .verify import verify

__all__ = ["migrate", "merge", "plan_migration", "verify", "wrap", "WrappedCollection", "federated_search",
           "MappedEmbeddings", "translate_queries", "Checkpoint", "evaluate_alignment", "collect_pairs",
           "compatibility_report", "Report", "Evaluation", "MigrationResult", "MergeResult", "VerifyResult",
           "FusedSearch", "HubPenalizedSearch", "RerankedSearch", "Upgrade", "open_upgrade", "plan_upgrade",
           "start_upgrade", "migrate_on_ray", "merge_on_ray", "reembed_on_ray",
           "fit_on_ray", "verify_on_ray", "evaluate_on_ray", "report_on_ray"]


#: the removed Ray twins of fit, verify, evaluate and report: old name -> the job that replaces it
_REDUCTIONS = {"verify_on_ray": "verify.verify", "evaluate_on_ray": "evaluate.evaluate_alignment",
               "report_on_ray": "report.compatibility_report", "fit_on_ray": "fit.fit_alignment"}


def __getattr__(name: str):
    """The Ray engine's entry points, imported on first use (Ray itself only when a job runs)."""
    if name in ("merge_on_ray", "migrate_on_ray", "reembed_on_ray"):   # replaced by the jobs' engine=; kept one release
        from .._deprecated import on_engine
        from ..runtime.engine import make_engine

        job = {"merge_on_ray": "merge", "migrate_on_ray": "migrate", "reembed_on_ray": "Upgrade.reembed"}[name]
        run = Upgrade.reembed if name == "reembed_on_ray" else globals()[job]
        return on_engine(f"{__name__}.{name}", f"{__name__}.{job}", run, make_engine)
    if name in _REDUCTIONS:   # replaced by the jobs' engine=; kept for one release
        from .._deprecated import on_engine
        from ..runtime.engine import make_engine

        module, _, job = _REDUCTIONS[name].partition(".")
        return on_engine(f"{__name__}.{name}", f"{__name__}.{_REDUCTIONS[name]}",
                         getattr(importlib.import_module(f"{__name__}.{module}"), job), make_engine)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
