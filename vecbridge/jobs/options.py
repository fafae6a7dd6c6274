"""Deprecated: moved to :mod:`vecbridge.quality.options`."""

from .._deprecated import moved

__getattr__ = moved(
    "vecbridge.jobs.options",
    {
        **dict.fromkeys(
            [
                "CostModel",
                "DEFAULT_FRACTIONS",
                "DEFAULT_RERANK_K",
                "Option",
                "STRATEGIES",
                "_first_stage",
                "_fmt_s",
                "anchor_residuals",
                "measure_options",
                "measure_options_split",
                "recall",
                "recommend",
                "relevant_ranks",
                "reliability_scores",
                "rerank_recall",
                "select",
            ],
            "vecbridge.quality.options",
        ),
    },
)
