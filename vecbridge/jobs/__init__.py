"""The verbs, one module per command group: fit, link, report, evaluate, verify, drift, migrate (``rewrite``), merge,
demo and the staged upgrade. Each job is written once (plan units -> run a body over each on an engine -> combine)
and returns a result the CLI prints; the layers below never see a job.
"""

from ..results import Evaluation, MergeResult, MigrationResult, Report, VerifyResult
from ..runtime.checkpoint import Checkpoint
from ..serving.embedder import MappedEmbeddings
from ..serving.rerank import FusedSearch, HubPenalizedSearch, RerankedSearch
from ..serving.translate import translate_queries
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



def __getattr__(name: str):
    """The removed ``*_on_ray`` entry points, kept for one release (:data:`vecbridge._deprecated.RAY_TWINS`)."""
    from .._deprecated import ray_twin
    from ..runtime.engine import make_engine

    return ray_twin(__name__, name, make_engine)
