"""Deprecated: moved to :mod:`vecbridge.runtime.checkpoint`."""

from .._deprecated import moved

__getattr__ = moved(
    "vecbridge.jobs.checkpoint",
    {
        **dict.fromkeys(["Checkpoint", "VERSION", "_MAX_BYTES", "_alive", "_now"], "vecbridge.runtime.checkpoint"),
    },
)
