"""Deprecated: moved to :mod:`vecbridge.runtime.pipeline`."""

from .._deprecated import moved

__getattr__ = moved(
    "vecbridge.jobs.pipeline",
    {
        **dict.fromkeys(
            ["T", "_DONE", "_Failure", "copy_stream", "read_ahead", "refuse_duplicate_ids"],
            "vecbridge.runtime.pipeline",
        ),
    },
)
