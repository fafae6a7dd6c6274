"""Deprecated: moved to :mod:`vecbridge.pairing.pairs`."""

from .._deprecated import moved

__getattr__ = moved(
    "vecbridge.jobs.pairs",
    {
        **dict.fromkeys(
            [
                "PairBatch",
                "_align",
                "_get_with_id_coercion",
                "_source_batches",
                "in_holdout",
                "pairs_by_field",
                "pairs_by_ids",
                "pairs_from_list",
                "pairs_through_index",
                "read_pairs_file",
            ],
            "vecbridge.pairing.pairs",
        ),
    },
)
