"""Local file-system checks shared by the stores and the jobs (bottom layer: imports nothing of ours)."""
from __future__ import annotations

import os
import tempfile

from .errors import StoreError


def unwritable_reason(path) -> tuple[str, str] | None:
    """``(directory, reason)`` if a file cannot be created in ``path`` (or in its nearest existing parent
    directory, where ``path`` would be created); None if it can.

    A real write attempt, not ``os.access``: read-only file systems and ACLs count as they will for the job, and
    root is not waved through."""
    directory = os.path.abspath(os.path.expanduser(str(path)))
    while not os.path.lexists(directory):
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    if not os.path.isdir(directory):
        if os.path.abspath(os.path.expanduser(str(path))) == directory:
            directory = os.path.dirname(directory)   # an existing file that will be replaced: its folder counts
        else:
            return directory, "not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".vecbridge-probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return directory, exc.strerror or str(exc)
    return None


def require_writable(path, what: str, hint: str = "") -> None:
    """Raise :class:`StoreError` (exit 4) now if ``what`` cannot be written at ``path``: jobs call this before they
    create anything, so a refused write never leaves an empty target or a lost fit behind."""
    problem = unwritable_reason(path)
    if problem:
        raise StoreError(f"cannot write {what} in {problem[0]}: {problem[1]}" + (f"; {hint}" if hint else ""))
