"""The real service in a process of its own (``vecbridge serve`` on uvicorn, 127.0.0.1, a free port), called over
HTTP as an application would."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.connectors.engines.pgvector import free_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "svc-token-5d1e8a"   # what clients send; also in the environment of the service only


class Served:
    """One ``vecbridge serve`` process: ``url`` (its root), ``call`` (plain HTTP), ``log()`` (what it printed)."""

    def __init__(self, args: list[str], log: Path, env: dict | None = None, token: str | None = TOKEN):
        self.port, self.token, self.log_path = free_port(), token, log
        self.url = f"http://127.0.0.1:{self.port}"
        environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        if token:
            environ["SVC_TOKEN"] = token
            args = [*args, "--token-env", "SVC_TOKEN"]
        self._log = open(log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "vecbridge.cli", "serve", *args, "--port", str(self.port),
                                      "--log-level", "warning"], cwd=ROOT, env=environ, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the service exited with {self.proc.returncode}: {self.log()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the service did not answer within 120 s: {self.log()[-2000:]}")

    def call(self, path: str, body=None, *, token: str | None = "default", raw: bytes | None = None,
             method: str | None = None) -> tuple[int, dict | str, dict]:
        """``(status, JSON document or text, headers by their lower-case names)``."""
        token = self.token if token == "default" else token
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.url + path, data=data, headers=headers,
                                         method=method or ("POST" if data is not None else "GET"))
        try:
            with urllib.request.urlopen(request, timeout=120) as r:
                status, text, got = r.status, r.read().decode(), r.headers
        except urllib.error.HTTPError as exc:
            status, text, got = exc.code, exc.read().decode(), exc.headers
        got = {k.lower(): v for k, v in got.items()}
        try:
            return status, json.loads(text), got
        except ValueError:
            return status, text, got

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    """``serve(args, env=..., token=...)``: a started service, stopped after the module's tests."""
    started = []
    folder = tmp_path_factory.mktemp("served")

    def start(args, **kw) -> Served:
        s = Served([str(a) for a in args], folder / f"service{len(started)}.log", **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def error_of(doc) -> str:
    """The message of an OpenAI-style error document (and that it is one)."""
    assert isinstance(doc, dict) and set(doc) == {"error"}, doc
    assert set(doc["error"]) == {"message", "type", "param", "code"} and "\n" not in doc["error"]["message"]
    return doc["error"]["message"]
