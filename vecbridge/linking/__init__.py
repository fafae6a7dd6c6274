"""Find correspondences between two embedding spaces: shared keys, re-embedded samples, a reference corpus, GEH from a
few seed pairs (the Vector Linking paper (2026)) and unsupervised mini-vec2vec (the mini-vec2vec paper (Dar, 2025)).
``vecbridge.linking.run.link`` drives them all."""
from .geh import GEH
from .keys import in_holdout, pairs_by_field, pairs_by_ids, pairs_from_list, read_pairs_file
from .minivec2vec import MiniVec2Vec
from .spec import describe_pairs, iter_pairs

__all__ = ["GEH", "MiniVec2Vec", "pairs_by_ids", "pairs_by_field", "pairs_from_list", "read_pairs_file",
           "in_holdout", "iter_pairs", "describe_pairs"]
