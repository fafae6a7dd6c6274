"""Deprecated: moved to :mod:`vecbridge.runtime.open`."""

from .._deprecated import moved

__getattr__ = moved(
    "vecbridge.jobs.open",
    {
        **dict.fromkeys(["describe", "load_alignment", "open_collection"], "vecbridge.runtime.open"),
    },
)
