"""Checks on alignments: held-out evaluation now; compatibility reports and drift checks build on it."""
from .evaluate import collect_pairs, evaluate_alignment

__all__ = ["evaluate_alignment", "collect_pairs"]
