"""Find correspondences between two embedding spaces: shared keys, re-embedded samples, a reference corpus, GEH from a
few seed pairs (seed 003) and unsupervised mini-vec2vec (seed 002). ``vecbridge.linking.run.link`` drives them all."""
from .geh import GEH
from .keys import in_holdout, pairs_by_field, pairs_by_ids, pairs_from_list, read_pairs_file
from .minivec2vec import MiniVec2Vec
from .spec import describe_pairs, iter_pairs

__all__ = ["GEH", "MiniVec2Vec", "pairs_by_ids", "pairs_by_field", "pairs_from_list", "read_pairs_file",
           "in_holdout", "iter_pairs", "describe_pairs"]
