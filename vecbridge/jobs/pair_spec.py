"""Deprecated: moved to :mod:`vecbridge.pairing.spec`."""

from .._deprecated import moved

__getattr__ = moved(
    "vecbridge.jobs.pair_spec",
    {
        **dict.fromkeys(["STORED", "describe_pairs", "iter_pairs"], "vecbridge.pairing.spec"),
    },
)
