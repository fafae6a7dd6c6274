"""Deprecated: moved to :mod:`vecbridge.serving.rerank` and :mod:`vecbridge.quality.scoring`."""

from .._deprecated import moved

__getattr__ = moved(
    "vecbridge.jobs.rerank",
    {
        **dict.fromkeys(
            ["augment_documents", "augment_queries", "fused_scores", "hub_penalty", "rerank_candidates"],
            "vecbridge.quality.scoring",
        ),
        **dict.fromkeys(
            ["FusedSearch", "HubPenalizedSearch", "RerankedSearch", "fused_search"], "vecbridge.serving.rerank"
        ),
    },
)
