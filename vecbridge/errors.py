"""One exception family, each with the process exit code the CLI maps it to.

The CLI never shows a traceback for these: it prints ``error: <message>`` on one line and exits with ``exit_code``.
Messages must never contain credentials: they show URLs through the one secret filter, :mod:`vecbridge.secrets`
(the CLI passes its error and warning lines and its JSON through it as well).
"""
from __future__ import annotations


class VecbridgeError(Exception):
    """Base class: something the user can fix; printed as one line."""

    exit_code = 1


class CheckFailed(VecbridgeError):
    """A check ran and its answer is 'no' (verification mismatch, threshold breached)."""

    exit_code = 1


class InputError(VecbridgeError, ValueError):
    """Bad vectors or arguments: wrong shape or dimension, NaN/inf, zero rows, empty input."""

    exit_code = 3


class UsageError(InputError):
    """The command line or the API was called wrong (an unknown store scheme, a missing required choice): exit 2,
    as click's own usage errors."""

    exit_code = 2


class StoreError(VecbridgeError):
    """A store cannot be used: unreachable, wrong credentials, missing or empty collection, unsupported feature."""

    exit_code = 4


class NotFound(StoreError):
    """The collection or table a URL names does not exist (``collection not found: URL``)."""

    exit_code = 4


class MissingDependency(StoreError, ImportError):
    """An optional client library is not installed; the message names the extra to install."""

    exit_code = 4


class ArtifactError(VecbridgeError):
    """An alignment artifact is missing, truncated, tampered with, or of an unknown schema version."""

    exit_code = 5


class SpaceMismatch(CheckFailed):
    """A collection is not in the embedding space a map expects on that side (or holds a mixture of spaces)."""
