"""Deprecated: moved to :mod:`vecbridge.runtime.models` and :mod:`vecbridge.pairing.reembed`."""

from .._deprecated import moved

__getattr__ = moved(
    "vecbridge.jobs.reembed",
    {
        **dict.fromkeys(
            ["Embedder", "_hub_reachable", "_quiet_model_library", "load_model"], "vecbridge.runtime.models"
        ),
        **dict.fromkeys(["_texts", "read_texts", "reembed_pairs", "reference_pairs"], "vecbridge.pairing.reembed"),
    },
)
