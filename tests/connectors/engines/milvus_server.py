"""A real Milvus 2.3.5 standalone server from the ``milvus`` wheel (``milvus-server``), on 127.0.0.1.

``milvus-server`` (a Python launcher) unpacks the server binaries into its data directory and runs the child
``milvus run standalone``. Every listening port is chosen free and passed explicitly, every component's ``ip`` is
127.0.0.1 (without that they talk over the external interface), and the embedded etcd gets its own config file
and endpoint (``ETCD_CONFIG_PATH``, ``ETCD_ENDPOINTS``: the launcher's etcd options leave etcd itself on 2379/2380)
so that several servers can run side by side. The launcher moves a port it finds busy to the next free one (a
restart soon after a crash finds the old ports in TIME_WAIT), so the proxy port is read back from the config it
wrote. etcd listens on 127.0.0.1 only; the gRPC and metrics servers listen on all interfaces, as Milvus 2.3.5 has
no setting to bind them to one address. Stopping sends SIGINT to the launcher (which stops its child) and then
makes sure the child is gone; a plain SIGTERM to the launcher would orphan it.

The binaries (~250 MB, ~5 s of CPU to unpack) are unpacked once per process and hard-linked into later servers'
data directories.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

NAME = "milvus_server"
COMPONENTS = ("rootCoord", "proxy", "queryCoord", "queryNode", "indexCoord", "indexNode", "dataCoord", "dataNode")
PORT_OPTIONS = ("proxy-port", "proxy-internal-port", "root-coord-port", "query-coord-port", "query-node-port",
                "index-coord-port", "index-node-port", "data-coord-port", "data-node-port")
LAUNCHER = "import sys; from milvus import main; sys.argv[0] = 'milvus-server'; main()"
ROOT_PASSWORD = "Milvus"  # the default password of the ``root`` user when authorization is enabled
#: settings for test servers (benchmarks keep the defaults): tick every 50 ms instead of 200 ms, since a
#: Strong-consistency read waits for the next tick and the tests make hundreds of small reads (~5% more of a core
#: while idle); sessions expire after 10 s instead of 30 s, since a server restarted after a crash waits for the
#: dead one's sessions to expire
TEST_CONFIG = {"proxy.timeTickInterval": 50, "common.session.ttl": 10}


def unavailable() -> str | None:
    try:
        import milvus  # noqa: F401
        import pymilvus  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install milvus==2.3.5 pymilvus)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_binaries: Path | None = None
_running: set["MilvusServer"] = set()


def _seed_binaries(data_dir: Path) -> None:
    """Hard-link binaries unpacked by an earlier server (the launcher then skips unpacking: same checksums)."""
    if _binaries is None or not _binaries.is_dir():
        return
    target = data_dir / "bin"
    target.mkdir(parents=True, exist_ok=True)
    for src in _binaries.iterdir():
        dst = target / src.name
        if not dst.exists():
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class MilvusServer:
    """One private Milvus standalone: start, SIGKILL (like a crash), stop, and start again on the same data."""

    def __init__(self, workdir: Path, *, auth: bool = False, config: dict | None = None):
        self.workdir = Path(workdir)
        self.data = self.workdir / "data"
        self.auth = auth
        self.config = dict(config or {})
        self.ports = {option: free_port() for option in PORT_OPTIONS}
        self.etcd_ports = (free_port(), free_port())  # client, peer: fixed for the life of the data directory
        self.launcher: subprocess.Popen | None = None
        self.standalone_pid: int | None = None

    @property
    def port(self) -> int:
        return self.ports["proxy-port"]

    def url(self, collection: str, **params: str) -> str:
        user = f"root:{ROOT_PASSWORD}@" if self.auth else ""
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"milvus://{user}127.0.0.1:{self.port}/{collection}" + (f"?{query}" if query else "")

    def _write_etcd_config(self) -> Path:
        client, peer = (f"http://127.0.0.1:{port}" for port in self.etcd_ports)
        path = self.workdir / "etcd.yaml"
        path.write_text(f"name: default\nlisten-client-urls: {client}\nadvertise-client-urls: {client}\n"
                        f"listen-peer-urls: {peer}\ninitial-advertise-peer-urls: {peer}\n"
                        f"initial-cluster: default={peer}\n")
        return path

    def start(self, timeout: float = 240.0) -> "MilvusServer":
        global _binaries
        self.workdir.mkdir(parents=True, exist_ok=True)
        _seed_binaries(self.data)
        cmd = [sys.executable, "-c", LAUNCHER, "--data", str(self.data)]
        for option, port in self.ports.items():
            cmd += [f"--{option}", str(port)]
        for component in COMPONENTS:
            cmd += ["--extra-config", f"{component}.ip=127.0.0.1"]
        if self.auth:
            cmd += ["--authorization-enabled", "true"]
        for key, value in self.config.items():
            cmd += ["--extra-config", f"{key}={value}"]
        env = dict(os.environ, ETCD_CONFIG_PATH=str(self._write_etcd_config()),
                   ETCD_ENDPOINTS=f"127.0.0.1:{self.etcd_ports[0]}")
        log_path = self.workdir / "milvus-server.log"
        with open(log_path, "w") as log:
            self.launcher = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                             stdin=subprocess.DEVNULL)
        _running.add(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(r"Process:\s+(\d+)", log_path.read_text(errors="replace"))
            if match:
                self.standalone_pid = int(match.group(1))
                self.ports["proxy-port"] = self._configured_proxy_port()
                if _binaries is None:
                    _binaries = self.data / "bin"
                return self
            if self.launcher.poll() is not None:
                break
            time.sleep(0.25)
        self.stop()
        tail = (self.data / "logs" / "milvus-stderr.log")
        detail = tail.read_text(errors="replace")[-1500:] if tail.exists() else log_path.read_text()[-1500:]
        raise RuntimeError(f"milvus-server did not start within {timeout:.0f} s:\n{detail}")

    def _configured_proxy_port(self) -> int:
        section = re.search(r"^proxy:\n(.*?)^\S", (self.data / "configs" / "milvus.yaml").read_text(), re.M | re.S)
        return int(re.search(r"^  port: (\d+)", section.group(1), re.M).group(1))

    def kill(self) -> None:
        """SIGKILL the server process (a crash), then let the launcher exit."""
        if self.standalone_pid and _alive(self.standalone_pid):
            os.kill(self.standalone_pid, signal.SIGKILL)
        self.stop()

    def stop(self) -> None:
        launcher, self.launcher = self.launcher, None
        if launcher is not None and launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
            try:
                launcher.wait(timeout=20)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.wait(timeout=5)
        pid, self.standalone_pid = self.standalone_pid, None
        if pid and _alive(pid):
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
        _running.discard(self)


@atexit.register
def _stop_all() -> None:
    for server in list(_running):
        server.stop()


class SharedServer:
    """A server another test process started and shared (:meth:`Engine.share`): its port and folder, and a stop
    that works from any process (SIGINT to its launcher, then its child is made sure gone, as
    :meth:`MilvusServer.stop` does for its own)."""

    def __init__(self, shared: dict):
        self.shared = shared
        self.port, self.workdir = shared["port"], Path(shared["workdir"])

    def url(self, collection: str) -> str:
        return f"milvus://127.0.0.1:{self.port}/{collection}"

    def alive(self) -> bool:
        return _alive(self.shared["launcher"])

    def stop(self) -> None:
        launcher, standalone = self.shared["launcher"], self.shared["standalone"]
        for pid, sig, wait in ((launcher, signal.SIGINT, 20.0), (launcher, signal.SIGKILL, 5.0),
                               (standalone, signal.SIGKILL, 10.0)):
            if pid and _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                deadline = time.monotonic() + wait
                while _alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.1)


class Engine:
    """A server for tests: its own, or one another test process started (:class:`SharedServer`)."""

    features: set[str] = set()

    def __init__(self, server: "MilvusServer | SharedServer"):
        self.server = server

    def url(self, collection: str) -> str:
        return self.server.url(collection)

    def share(self) -> dict:
        """What another process needs to use and stop this server; from now on it outlives this process."""
        _running.discard(self.server)
        shared = {"port": self.server.port, "workdir": str(self.server.workdir),
                  "launcher": self.server.launcher.pid, "standalone": self.server.standalone_pid}
        self.server, self.server.owned = SharedServer(shared), self.server   # owned: its process handle, kept
        return shared

    def alive(self) -> bool:
        return self.server.alive() if isinstance(self.server, SharedServer) else self.server.launcher is not None

    def stop(self):
        self.server.stop()


def start(workdir: Path) -> Engine:
    return Engine(MilvusServer(workdir, config=TEST_CONFIG).start())


def attach(shared: dict) -> Engine:
    """The server another test process started and shared (:meth:`Engine.share`)."""
    return Engine(SharedServer(shared))
