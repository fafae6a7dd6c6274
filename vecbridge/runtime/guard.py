"""What keeps a write job from damaging data: it never writes into one of its own inputs, and only one run at a
time writes a target.

Both rules work on a collection's canonical identity (:class:`vecbridge.connectors.base.CollectionIdentity`), not
on the URL string: ``file:///data/docs`` and ``file://./docs`` run from ``/data`` are one collection, and so are
two pgvector URLs that differ only in ``&vector=``.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ..connectors.base import Collection
from ..connectors.url import resolved_path
from ..errors import InputError, StoreError
from ..fs import require_writable
from .checkpoint import Checkpoint


def refuse_inputs_as_target(target: Collection, inputs: Sequence[tuple[Collection, str]], hint: str) -> None:
    """Raise :class:`InputError` if ``target`` is the same stored collection as one of ``inputs`` (``(collection,
    role)`` pairs), however either URL is spelled; checked before anything is created, dropped or written."""
    for coll, role in inputs:
        if coll.identity == target.identity:
            spelled = ("" if coll.display_url == target.display_url
                       else f" ({coll.display_url} and {target.display_url} name the same collection)")
            raise InputError(f"refusing to write into {role}{spelled}: {hint}")


def lock_dir() -> Path:
    """Where run locks live: ``$VECBRIDGE_LOCK_DIR``, else one shared folder in the system's temporary directory."""
    configured = os.environ.get("VECBRIDGE_LOCK_DIR")
    path = Path(configured) if configured else Path(tempfile.gettempdir()) / "vecbridge-locks"
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        if not configured:
            try:
                path.chmod(0o1777)   # every user's runs lock here, each only its own files
            except OSError:
                pass
    return path


@contextmanager
def _file_lock(target: Collection) -> Iterator[None]:
    """:func:`run_lock` on the target's identity."""
    with run_lock(str(target.identity), lambda pid: f"another run is writing this target (pid {pid}): "
                  f"{target.display_url}; wait for it to finish, or stop it and rerun with --resume"):
        yield


@contextmanager
def run_lock(name: str, busy: Callable[[str], str]) -> Iterator[None]:
    """An exclusive ``flock`` on a file named after ``name`` in :func:`lock_dir`; the kernel releases it when the
    process dies, so a ``kill -9``-ed run never leaves a stale lock behind. Held: :class:`StoreError` with
    ``busy(holder's pid)``."""
    key = hashlib.sha256(name.encode()).hexdigest()[:32]
    path = lock_dir() / f"{key}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot create the run lock {path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StoreError(f"cannot take the run lock {path}: {exc.strerror or exc}") from None
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise StoreError(busy(holder)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)   # closing releases the flock


@contextmanager
def exclusive_writer(target: Collection) -> Iterator[None]:
    """Hold the target for this run: a lock file on this machine, plus the store's own lock where it has one
    (:meth:`Collection.writer_lock`, e.g. a PostgreSQL advisory lock, which also covers runs on other machines)."""
    with ExitStack() as stack:
        stack.enter_context(_file_lock(target))
        stack.enter_context(target.writer_lock())
        yield


def check_checkpoint_path(path, collections: Sequence[Collection], alignment_path=None) -> None:
    """Refuse (before anything is created) a checkpoint path that a job would damage by writing and then removing a
    file there: the alignment file, a path inside a collection's local files (a file store's folder, an embedded
    store's directory or database), or an existing file that is not a vecbridge checkpoint."""
    given = Path(path)
    where = Path(resolved_path(given))
    hint = "choose another file with --checkpoint PATH"
    if alignment_path is not None and where == Path(resolved_path(alignment_path)):
        raise InputError(f"refusing the checkpoint {given}: it is the alignment file; {hint}")
    for coll in collections:
        local = coll.local_path
        if local is not None and (where == Path(local) or Path(local) in where.parents):
            raise InputError(f"refusing the checkpoint {given}: it lies inside the collection {coll.display_url} "
                             f"({local}); {hint}")
    if os.path.lexists(where) and not Checkpoint.holds_one(where):
        raise InputError(f"refusing the checkpoint {given}: it exists and is not a vecbridge checkpoint, and a "
                         f"job replaces and then removes its checkpoint; {hint}")


def check_checkpoint_writable(path: Path) -> None:
    """The checkpoint's folder must take a file before the job creates anything (else the run would die after its
    first batch and leave a half-written target)."""
    require_writable(path, f"the checkpoint {Path(path).name}", "choose a writable place with --checkpoint PATH")
