"""Find correspondences between two embedding spaces (shared keys now; re-embedding, GEH and unsupervised next)."""
from .keys import in_holdout, pairs_by_field, pairs_by_ids, pairs_from_list, read_pairs_file
from .spec import describe_pairs, iter_pairs

__all__ = ["pairs_by_ids", "pairs_by_field", "pairs_from_list", "read_pairs_file", "in_holdout", "iter_pairs",
           "describe_pairs"]
