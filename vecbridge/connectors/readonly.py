"""Reading an embedded store that this process may not write.

Milvus Lite, Qdrant Edge, Qdrant's local mode and Chroma's persistent client all open their files read-write, reads
included (they take a lock file, replay or append a write-ahead log, map segments writable). A source that only has
to be read (``migrate``, ``verify``, ``report`` ...) may sit on a read-only mount or belong to another user: such a
store is read from a private copy in the temporary directory, made once per process and removed at exit, instead of
being refused as "cannot write". Handles that may write never get a copy.
"""
from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import threading
import warnings

from ..errors import StoreError
from ..fs import unwritable_reason

_COPIES: dict[str, str] = {}
_LOCK = threading.Lock()


@atexit.register
def _remove_copies() -> None:
    for copy in _COPIES.values():
        shutil.rmtree(os.path.dirname(copy), ignore_errors=True)
    _COPIES.clear()


def _unwritable(path: str) -> bool:
    """Whether the store would fail to open ``path`` (a directory tree or one file) for writing: a real write attempt
    in every directory of it (the immutable flag and read-only mounts stop root too), ``os.access`` for its files."""
    if os.path.isfile(path):
        return unwritable_reason(os.path.dirname(path) or ".") is not None or not os.access(path, os.W_OK)
    for directory, _, files in os.walk(path):
        if unwritable_reason(directory) is not None:
            return True
        if any(not os.access(os.path.join(directory, f), os.W_OK) for f in files):
            return True
    return False


def _make_writable(path: str) -> None:
    """The copy is this process's own: owner read/write (and search, for folders) on everything in it, whatever
    modes the originals had."""
    entries = [(path, os.path.isdir(path))]
    for directory, dirs, files in os.walk(path):
        entries += [(os.path.join(directory, d), True) for d in dirs]
        entries += [(os.path.join(directory, f), False) for f in files]
    for entry, is_dir in entries:
        if not os.path.islink(entry):
            os.chmod(entry, os.stat(entry).st_mode | stat.S_IRUSR | stat.S_IWUSR | (stat.S_IXUSR if is_dir else 0))


def readable_path(path, *, read_only: bool, what: str) -> str:
    """Where a handle opens the store at ``path``: the path itself, or (for a ``read_only`` handle on files this
    process cannot write) a private copy of them, with a warning that says so."""
    given = os.fspath(path)
    path = os.path.realpath(given)
    if not read_only or not os.path.exists(path):
        return given
    with _LOCK:
        if path in _COPIES:
            return _COPIES[path]
        if not _unwritable(path):
            return given
        folder = tempfile.mkdtemp(prefix="vecbridge-readonly-")
        copy = os.path.join(folder, os.path.basename(path))
        try:
            if os.path.isdir(path):
                shutil.copytree(path, copy, symlinks=True)
            else:
                shutil.copy2(path, copy)
            _make_writable(copy)
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise StoreError(f"cannot read {what} {path}: it is read-only here and copying it to {folder} failed "
                             f"({exc.strerror or exc})") from None
        _COPIES[path] = copy
    warnings.warn(f"{what} {path} is read-only here: reading a private copy of it ({copy})", UserWarning,
                  stacklevel=3)
    return copy
