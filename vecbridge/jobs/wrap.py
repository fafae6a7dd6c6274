"""Deprecated: moved to :mod:`vecbridge.serving.wrap` and :mod:`vecbridge.serving.translate`."""

from .._deprecated import moved

__getattr__ = moved(
    "vecbridge.jobs.wrap",
    {
        **dict.fromkeys(
            ["MappedEmbeddings", "_orthogonal_isometry", "translate_queries"], "vecbridge.serving.translate"
        ),
        **dict.fromkeys(
            ["WrappedCollection", "attach_field", "federated_search", "search_collections", "wrap"],
            "vecbridge.serving.wrap",
        ),
    },
)
