"""Move a collection into the new model's space: rewrite (resumable, verified), or wrap it at search time."""
from .checkpoint import Checkpoint
from .merge import merge
from .rewrite import migrate, plan_migration
from .verify import verify
from .wrap import MappedEmbeddings, WrappedCollection, federated_search, translate_queries, wrap

__all__ = ["migrate", "merge", "plan_migration", "verify", "wrap", "WrappedCollection", "federated_search",
           "MappedEmbeddings", "translate_queries", "Checkpoint"]
