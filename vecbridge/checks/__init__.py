"""Deprecated: the checks live in :mod:`vecbridge.jobs` (``from vecbridge.jobs import evaluate_alignment``)."""
from .._deprecated import moved

__getattr__ = moved("vecbridge.checks", dict.fromkeys(["evaluate_alignment", "collect_pairs"], "vecbridge.jobs"))
