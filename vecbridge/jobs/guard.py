"""Deprecated: moved to :mod:`vecbridge.runtime.guard`."""

from .._deprecated import moved

__getattr__ = moved(
    "vecbridge.jobs.guard",
    {
        **dict.fromkeys(
            [
                "_file_lock",
                "check_checkpoint_path",
                "check_checkpoint_writable",
                "exclusive_writer",
                "lock_dir",
                "refuse_inputs_as_target",
                "run_lock",
            ],
            "vecbridge.runtime.guard",
        ),
    },
)
