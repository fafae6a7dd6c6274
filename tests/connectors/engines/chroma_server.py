"""A real Chroma server (``chroma run``, the Rust frontend shipped in the ``chromadb`` wheel) on 127.0.0.1."""
from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

NAME = "chroma_server"
#: ``chroma run`` without the console script, so that the server is our direct child (pyenv shims fork)
_CHROMA_CLI = "import sys; from chromadb.cli.cli import app; sys.argv[0] = 'chroma'; app()"


def unavailable() -> str | None:
    for name in ("chromadb", "chromadb_rust_bindings"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed (pip install chromadb)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ChromaServer:
    """One server process on a data directory; it can be killed and started again on the same directory."""

    def __init__(self, workdir: Path):
        self.data = Path(workdir) / "data"
        self.log = Path(workdir) / "server.log"
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> "ChromaServer":
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _CHROMA_CLI, "run", "--path", str(self.data), "--host", "127.0.0.1",
                 "--port", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "ANONYMIZED_TELEMETRY": "False"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            if self._healthy():
                return self
            time.sleep(0.1)
        tail = self.log.read_text(errors="replace")[-800:]
        self.stop()
        raise RuntimeError(f"chroma server did not start within {timeout}s: {tail}")

    def _healthy(self) -> bool:
        import httpx

        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/api/v2/heartbeat", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def url(self, collection: str) -> str:
        return f"chroma://127.0.0.1:{self.port}/{collection}"

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        self.process = None

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL if it is still there after 15 s."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(10)
        self.process = None


class Engine:
    features: set[str] = set()

    def __init__(self, server: ChromaServer):
        self.server = server

    def url(self, collection: str) -> str:
        return self.server.url(collection)

    def stop(self) -> None:
        self.server.stop()


def start(workdir: Path) -> Engine:
    return Engine(ChromaServer(workdir).start())
