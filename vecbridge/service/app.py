"""The ASGI app (Starlette): ``POST /v1/embeddings`` (OpenAI's API), ``POST /search``, ``GET /status``,
``GET /healthz`` and ``GET /metrics``.

Every endpoint but ``/healthz`` asks for ``Authorization: Bearer <token>`` when the service has a token. The
blocking work (models, stores, the state file) runs in a pool of ``threads`` threads, so the event loop keeps
answering; the JSON of a response is written there too. Bad requests get a 4xx error document as OpenAI writes it,
anything unexpected a 500 with one line; no message carries a secret.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import ArtifactError, InputError, StoreError, VecbridgeError
from ..secrets import environment_secrets, redact_text
from .backend import Backend
from .bodies import (
    BadRequest,
    embeddings_request,
    embeddings_response,
    error_document,
    parse_json,
    search_request,
    search_response,
)
from .config import ServeConfig
from .metrics import ServiceMetrics
from .upstream import UpstreamError

log = logging.getLogger("vecbridge.service")


def _json(doc, status: int = 200, headers: dict | None = None) -> Response:
    body = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


class Service:
    """The endpoints over one :class:`~vecbridge.service.backend.Backend`."""

    def __init__(self, config: ServeConfig, backend: Backend):
        self.config, self.backend = config, backend
        self.token = config.token()
        self.secrets = [s for s in (self.token, config.upstream_key()) if s] + environment_secrets()
        self.pool = ThreadPoolExecutor(max_workers=config.threads, thread_name_prefix="vecbridge-serve")
        self.metrics = ServiceMetrics()

    async def _run(self, fn, *args):
        """``fn(*args)`` in the pool (it blocks: a model, a store, the state file)."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, functools.partial(fn, *args))

    # --- the frame of every endpoint: token, errors, metrics ----------------------------------------------------
    def endpoint(self, name: str, handler, *, open_to_all: bool = False):
        async def answer(request: Request) -> Response:
            t0 = time.perf_counter()
            try:
                if not open_to_all:
                    self._authorize(request)
                response = await handler(request)
            except Exception as exc:
                response = self.error(exc)
            self.metrics.observe(name, request.method, response.status_code, time.perf_counter() - t0)
            return response
        return answer

    def _authorize(self, request: Request) -> None:
        if self.token is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            raise BadRequest("missing or wrong token: send the header Authorization: Bearer <token>", status=401,
                             code="invalid_api_key")

    def error(self, exc: Exception) -> Response:
        """One error document: a bad request 4xx, a store or upstream that cannot answer 503 / 502, else 500."""
        if isinstance(exc, BadRequest):
            status, kind, code = exc.status, exc.kind, exc.code
        elif isinstance(exc, InputError):
            status, kind, code = 400, "invalid_request_error", None
        elif isinstance(exc, UpstreamError):
            status, kind, code = 502, "upstream_error", None
        elif isinstance(exc, StoreError):
            status, kind, code = 503, "store_error", None
        elif isinstance(exc, (ArtifactError, VecbridgeError)):
            status, kind, code = 500, "server_error", None
        else:
            status, kind, code = 500, "server_error", None
            first = (str(exc).splitlines() or [""])[0][:300]
            exc = RuntimeError(f"internal error: {type(exc).__name__}" + (f": {first}" if first else ""))
        message = redact_text((str(exc).splitlines() or [""])[0], self.secrets)
        if status >= 500:
            log.error("vecbridge serve: %s", message)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return _json(error_document(message, kind, code), status, headers)

    # --- the endpoints -------------------------------------------------------------------------------------------
    async def embeddings(self, request: Request) -> Response:
        parsed = embeddings_request(parse_json(await request.body()))
        return await self._run(self._embed, parsed)

    def _embed(self, parsed) -> Response:
        vectors, space = self.backend.embed(parsed.texts)
        doc = embeddings_response(vectors, parsed, self.backend.model_name, space)
        return _json(doc, headers=self._stage_headers(space))

    async def search(self, request: Request) -> Response:
        parsed = search_request(parse_json(await request.body()), new_dim=self.backend.new_dim,
                                old_dim=self.backend.old_dim)
        return await self._run(self._search, parsed)

    def _search(self, parsed) -> Response:
        ids, scores, answered = self.backend.search(parsed)
        return _json(search_response(ids, scores, answered), headers=self._stage_headers(answered))

    @staticmethod
    def _stage_headers(space: dict) -> dict:
        return {"X-Vecbridge-Stage": str(space.get("stage")), "X-Vecbridge-Serving": str(space.get("serving"))}

    async def status(self, request: Request) -> Response:
        return _json(await self._run(self._status))

    def _status(self) -> dict:
        from ..secrets import scrub

        return scrub(self.backend.status(), self.secrets)

    async def healthz(self, request: Request) -> Response:
        try:
            space = await self._run(self.backend.space)
        except VecbridgeError as exc:
            return _json({"status": "unavailable", "error": redact_text(str(exc), self.secrets)}, 503)
        return _json({"status": "ok", "mode": self.backend.mode, "stage": space["stage"], "space": space["space"]})

    async def prometheus(self, request: Request) -> Response:
        body, content_type = await self._run(self._scrape)
        return Response(body, media_type=content_type)

    def _scrape(self) -> tuple[bytes, str]:
        if self.backend.mode == "upgrade":
            self.metrics.upgrade(self.backend.status())
        return self.metrics.exposition()

    async def not_found(self, request: Request, exc) -> Response:
        status = getattr(exc, "status_code", 404)
        what = "no such endpoint" if status == 404 else f"{request.method} is not allowed here"
        message = (f"{what}: {request.method} {request.url.path} (endpoints: POST /v1/embeddings, POST /search, "
                   f"GET /status, GET /healthz, GET /metrics)")
        return _json(error_document(redact_text(message, self.secrets), "invalid_request_error"), status)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def create_app(config: ServeConfig, backend: Backend | None = None) -> Starlette:
    """The app serving ``config`` (its models loaded now, once)."""
    service = Service(config, backend if backend is not None else Backend(config))
    routes = [Route("/v1/embeddings", service.endpoint("/v1/embeddings", service.embeddings), methods=["POST"]),
              Route("/search", service.endpoint("/search", service.search), methods=["POST"]),
              Route("/status", service.endpoint("/status", service.status), methods=["GET"]),
              Route("/healthz", service.endpoint("/healthz", service.healthz, open_to_all=True), methods=["GET"]),
              Route("/metrics", service.endpoint("/metrics", service.prometheus), methods=["GET"])]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        service.shutdown()

    app = Starlette(routes=routes, exception_handlers={404: service.not_found, 405: service.not_found},
                    lifespan=lifespan)
    app.state.service = service
    return app


def app_from_environment() -> Starlette:
    """uvicorn's factory in each worker process (``vecbridge serve --workers N``)."""
    return create_app(ServeConfig.from_environment())
