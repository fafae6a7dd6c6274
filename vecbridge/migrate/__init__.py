"""Deprecated: the migration jobs live in :mod:`vecbridge.jobs` (``from vecbridge.jobs import migrate``)."""
from .._deprecated import moved

__getattr__ = moved("vecbridge.migrate", {
    **dict.fromkeys(["migrate", "merge", "plan_migration", "verify", "wrap", "WrappedCollection", "federated_search",
                     "MappedEmbeddings", "translate_queries", "Checkpoint"], "vecbridge.jobs")})
