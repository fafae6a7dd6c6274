"""Starting the service on uvicorn: one process (the app built here, its models loaded once), or ``workers``
processes, each building its own from the configuration passed in the environment (checked here first, so that a
bad state file or model is one line before any worker starts)."""
from __future__ import annotations

import os
import shutil
import socket
import tempfile

from ..errors import UsageError
from ..secrets import redact_text
from .config import ENVIRONMENT, ServeConfig


def _check_port(host: str, port: int) -> None:
    """Refuse a port another process listens on, in one line (uvicorn would log a traceback-like error)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): choose another --port or "
                             f"--host") from None


def describe(backend, host: str, port: int) -> str:
    """The line saying what is served where, and the base URL an OpenAI client takes."""
    what = {"upgrade": f"the upgrade {backend.config.state} ({backend.collection})",
            "wrap": f"{backend.collection} through {backend.config.wrap[1] if backend.config.wrap else ''}",
            "model": "the model's own vectors"}[backend.mode]
    where = f"[{host}]" if ":" in host else host
    return redact_text(f"serving {what} with {backend.model_name} on http://{where}:{port} (OpenAI base URL "
                      f"http://{where}:{port}/v1)")


def run(config: ServeConfig, *, host: str = "127.0.0.1", port: int = 8000, workers: int = 1,
        log_level: str = "info", on_ready=None) -> None:
    """Serve ``config`` until interrupted. ``on_ready(line)``: told what is served where, once it is loaded."""
    import uvicorn

    from .app import create_app
    from .backend import Backend

    config.check()
    _check_port(host, port)
    if workers == 1:
        backend = Backend(config)
        if on_ready:
            on_ready(describe(backend, host, port))
        uvicorn.run(create_app(config, backend), host=host, port=port, log_level=log_level)
        return
    made = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):   # every worker's counts, added up at each scrape
        made = tempfile.mkdtemp(prefix="vecbridge-serve-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = made
    try:
        checked = Backend(config)   # a bad state file or model: one line, before any worker starts
        if on_ready:
            on_ready(describe(checked, host, port))
        del checked
        os.environ[ENVIRONMENT] = config.to_environment()
        uvicorn.run("vecbridge.service.app:app_from_environment", factory=True, host=host, port=port,
                    workers=workers, log_level=log_level)
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)
