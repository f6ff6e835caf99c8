"""The gateway's HTTP surface: OpenAI routes under /v1, the admin API under /admin, /healthz and
/metrics. Built as a plain FastAPI app over a Backend, so it runs inside Ray Serve and in unit
tests alike."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from zerolayer.config import PlatformConfig
from zerolayer.errors import (
    APIError,
    AuthenticationFailed,
    InvalidRequest,
    PayloadTooLarge,
    openai_error_body,
)
from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.flow import Flow
from zerolayer.gateway.limits import Limiter
from zerolayer.gateway.metrics import Metrics
from zerolayer.gateway.openapi import body_schema, install_schema
from zerolayer.gateway.schemas import (
    ChangePlanRequest,
    ChatCompletionRequest,
    ChunksRequest,
    CompletionRequest,
    CreateKeyRequest,
)
from zerolayer.store.keys import ApiKeyRecord, KeyStore

__all__ = ["Backend", "GatewayParts", "create_app", "read_json", "authorise"]


class Backend(Protocol):
    """Where the gateway sends a request once it is authorised and parsed: the tokenfix and
    chunker steps and the tier replicas (Ray Serve handles, or in-process objects in tests)."""

    async def prepare(self, model: str, req: dict[str, Any]) -> dict[str, Any]:
        """tokenfix: {"event": "prompt", "prompt_token_ids": [...]} or an error event."""

    async def chunk(self, model: str, text: str, **options: Any) -> dict[str, Any]:
        """chunker: {"event": "chunks", "chunks": [...], "rest": offset} or an error event."""

    def stream(self, target: str, req: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Events of one request (see zerolayer.replicas.core)."""

    async def complete(self, target: str, req: dict[str, Any]) -> dict[str, Any]:
        """The final event of one request, with the whole text."""

    async def cards(self) -> dict[str, dict[str, Any]]:
        """Tier cards of the served tiers that answered, by '<model>:<tier>'."""


BODY_MODELS: list[type[BaseModel]] = [
    ChatCompletionRequest,
    CompletionRequest,
    ChunksRequest,
    CreateKeyRequest,
    ChangePlanRequest,
]

KeyLookup = Callable[[str], Awaitable[ApiKeyRecord | None]]
HealthCheck = Callable[[], Awaitable[dict[str, Any]]]


@dataclass
class GatewayParts:
    """What one gateway replica works with."""

    backend: Backend
    lookup_key: KeyLookup
    config: PlatformConfig
    health: HealthCheck
    limiter: Limiter
    metrics: Metrics
    keys: KeyStore | None = None  # the admin API's key store (synchronous; admin calls are rare)


def _error(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.headers())


def _validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body",)]
    param = ".".join(loc) or None
    where = f" at '{param}'" if param else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"invalid request body{where}: {first.get('msg', 'invalid value')}{more}", param


async def authorise(request: Request, lookup_key: KeyLookup) -> ApiKeyRecord:
    """The key record of a request's bearer key; 401 if missing, unknown or revoked."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise AuthenticationFailed(
            "no API key given: send 'Authorization: Bearer <key>' "
            "(create one with `zerolayer keys create --plan NAME`)"
        )
    record = await lookup_key(key.strip())
    if record is None or record.revoked:
        raise AuthenticationFailed("the API key is unknown or revoked")
    return record


async def read_body(request: Request, max_bytes: int) -> str:
    """The request body as text: 413 over max_bytes, 400 if it is not UTF-8."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"the request body is larger than {max_bytes} bytes")
    raw = await request.body()
    if len(raw) > max_bytes:
        raise PayloadTooLarge(f"the request body is larger than {max_bytes} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"the request body is not valid UTF-8 (byte {exc.start}: {exc.reason})"
        ) from exc


async def read_json(request: Request, model: type[BaseModel], max_bytes: int) -> Any:
    """The body parsed into `model`; OpenAI-format 400/413 errors otherwise."""
    text = await read_body(request, max_bytes)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidRequest("the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message, param = _validation_message(list(exc.errors()))
        raise InvalidRequest(message, param=param) from exc


def create_app(parts: GatewayParts) -> FastAPI:
    """The gateway's FastAPI app."""
    from zerolayer.gateway.admin import admin_router
    from zerolayer.gateway.chunks import chunks_router

    cfg = parts.config
    catalog = Catalog(cfg)
    flow = Flow(parts.backend, cfg, catalog, parts.limiter, parts.metrics)
    app = FastAPI(title="zerolayer", version="0.1.0", docs_url=None, redoc_url=None)
    app.state.flow = flow

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return _error(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(list(exc.errors()))
        return _error(InvalidRequest(message, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        body = openai_error_body(str(exc.detail), kind)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        body = openai_error_body(f"internal error ({type(exc).__name__})", "server_error")
        return JSONResponse(body, status_code=500)

    max_bytes = cfg.gateway.max_body_bytes

    @app.post("/v1/chat/completions", openapi_extra=body_schema(ChatCompletionRequest))
    async def chat_completions(request: Request) -> Response:
        record = await authorise(request, parts.lookup_key)
        return await flow(await read_json(request, ChatCompletionRequest, max_bytes), record)

    @app.post("/v1/completions", openapi_extra=body_schema(CompletionRequest))
    async def completions(request: Request) -> Response:
        record = await authorise(request, parts.lookup_key)
        return await flow(await read_json(request, CompletionRequest, max_bytes), record)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        await authorise(request, parts.lookup_key)
        return {
            "object": "list",
            "data": catalog.cards(int(time.time()), await parts.backend.cards()),
        }

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        report = await parts.health()
        return JSONResponse(report, status_code=200 if report.get("status") == "ok" else 503)

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        waits = {t: flow.admission.wait_s(t) for t in catalog.served()}
        text = await parts.metrics.render({"zerolayer_queue_wait_seconds": waits})
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    app.include_router(chunks_router(parts, catalog, flow))
    app.include_router(admin_router(parts))
    install_schema(app, BODY_MODELS)
    return app
