"""Correspondences between two embedding spaces, found from the vectors alone: GEH grows a few seed pairs into
links (Vector Linking via Cross-Model Local Isometric Consistency, 2026), and :class:`Links` carries them. Pairs that
need a store (shared ids, a payload key, a re-embedded sample) are found by :mod:`vecbridge.pairing`."""
from .._deprecated import moved
from .geh import GEH, GEHSearch, GEHStopping, GEHViews, GEHVotes
from .links import Links
from .pairspec import PairSpec

__all__ = ["GEH", "GEHViews", "GEHVotes", "GEHStopping", "GEHSearch", "Links", "PairSpec"]

__getattr__ = moved("vecbridge.linking", {
    "MiniVec2Vec": "vecbridge.align",
    **dict.fromkeys(["pairs_by_ids", "pairs_by_field", "pairs_from_list", "read_pairs_file", "in_holdout"],
                    "vecbridge.pairing.pairs"),
    **dict.fromkeys(["iter_pairs", "describe_pairs"], "vecbridge.pairing.spec")})
