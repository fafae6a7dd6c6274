"""Everything that opens a store: fit from collections, link, report, evaluate, drift, migrate, merge, verify, wrap.

The layers below never see a store (``align``, ``linking``) or a job (``connectors``); the CLI only parses and
prints what these return.
"""
from ..results import Evaluation, MergeResult, MigrationResult, Report, VerifyResult
from .checkpoint import Checkpoint
from .evaluate import collect_pairs, evaluate_alignment
from .merge import merge
from .report import compatibility_report
from .rewrite import migrate, plan_migration
from .verify import verify
from .wrap import MappedEmbeddings, WrappedCollection, federated_search, translate_queries, wrap

__all__ = ["migrate", "merge", "plan_migration", "verify", "wrap", "WrappedCollection", "federated_search",
           "MappedEmbeddings", "translate_queries", "Checkpoint", "evaluate_alignment", "collect_pairs",
           "compatibility_report", "Report", "Evaluation", "MigrationResult", "MergeResult", "VerifyResult"]
