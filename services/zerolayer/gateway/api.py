"""The gateway's HTTP surface: OpenAI routes under /v1, the admin API under /admin, /healthz and
/metrics. Built as a plain FastAPI app over a Backend (gateway.parts), so it runs inside Ray
Serve and in unit tests alike. Every error of every route becomes its HTTP response here, in the
app's exception handlers."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException

from zerolayer.errors import APIError, InvalidRequest, StoreUnavailable, openai_error_body
from zerolayer.gateway.account import account_router
from zerolayer.gateway.admin import admin_router
from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.chunks import chunks_router
from zerolayer.gateway.console import console_router
from zerolayer.gateway.conversations import conversations_router
from zerolayer.gateway.deps import CurrentKey, Reader, current_tenant
from zerolayer.gateway.flow import Flow
from zerolayer.gateway.http import error_response, read_json, validation_message
from zerolayer.gateway.idempotency import Idempotency
from zerolayer.gateway.keys import keys_router
from zerolayer.gateway.live import render_live
from zerolayer.gateway.metrics import tier_stats
from zerolayer.gateway.openapi import body_schema, install_schema
from zerolayer.gateway.operations import operations_router
from zerolayer.gateway.parts import GatewayParts
from zerolayer.gateway.response_bodies import (
    AddItemsRequest,
    CreateConversationRequest,
    CreateResponseRequest,
    UpdateConversationRequest,
)
from zerolayer.gateway.responses import Responder, responses_router
from zerolayer.gateway.schemas import (
    ChangePlanRequest,
    ChatCompletionRequest,
    ChunksRequest,
    CompletionRequest,
    CreateKeyRequest,
    RenameKeyRequest,
)
from zerolayer.gateway.silence import silence_router
from zerolayer.gateway.usage import add_billing_routes
from zerolayer.store.tiers import state_of

__all__ = ["create_app"]


BODY_MODELS: list[type[BaseModel]] = [
    ChatCompletionRequest,
    CompletionRequest,
    ChunksRequest,
    CreateKeyRequest,
    ChangePlanRequest,
    RenameKeyRequest,
    CreateResponseRequest,
    CreateConversationRequest,
    UpdateConversationRequest,
    AddItemsRequest,
]


def create_app(parts: GatewayParts) -> FastAPI:
    """The gateway's FastAPI app."""
    cfg = parts.config
    catalog = Catalog(cfg)
    flow = Flow(
        parts.backend, cfg, catalog, parts.limiter, parts.metrics, parts.tiers, parts.traffic
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        flow.start()  # lease renewal and the sweep run from the start, not from a first request
        if parts.canary is not None:
            parts.canary.start()
        yield
        if parts.canary is not None:
            await parts.canary.close()
        # shutdown: settle what is pending (bounded) before the replica goes
        await flow.close(cfg.gateway.drain_s)

    app = FastAPI(
        title="zerolayer", version="0.1.0", docs_url=None, redoc_url=None, lifespan=lifespan
    )
    app.state.flow = flow
    app.state.parts = parts  # what the routes' dependencies read (gateway.deps)

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(list(exc.errors()))
        return error_response(InvalidRequest(message, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        body = openai_error_body(str(exc.detail), kind)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RedisError)
    async def _store_down(_: Request, exc: RedisError) -> JSONResponse:
        # Redis did not answer (down, restarting, loading its AOF): nothing was taken, retry
        return error_response(
            StoreUnavailable(
                f"the platform's store is unavailable ({type(exc).__name__}); retry shortly", 2.0
            )
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        body = openai_error_body(f"internal error ({type(exc).__name__})", "server_error")
        return JSONResponse(body, status_code=500)

    max_bytes, timeout = cfg.gateway.max_body_bytes, cfg.gateway.body_timeout_s

    @app.post("/v1/chat/completions", openapi_extra=body_schema(ChatCompletionRequest))
    async def chat_completions(request: Request, record: CurrentKey) -> Response:
        return await flow(
            await read_json(request, ChatCompletionRequest, max_bytes, timeout), record
        )

    @app.post("/v1/completions", openapi_extra=body_schema(CompletionRequest))
    async def completions(request: Request, record: CurrentKey) -> Response:
        body = await read_json(request, CompletionRequest, max_bytes, timeout)
        return await flow(body, record)

    @app.get("/v1/models")
    async def models(record: Reader) -> dict[str, Any]:
        states = await flow.states() or {}
        ready = [t for t in catalog.served() if state_of(states, t).ready]
        cards = await parts.backend.cards(ready)
        if parts.live is not None:  # the live signals' verdicts go on each card
            report = await parts.live.report([str(t) for t in cards])
            cards = {t: {**c, "monitoring": report.get(str(t), {})} for t, c in cards.items()}
        measured = await tier_stats(parts.metrics)
        plan = None if record is None else record.plan  # the admin key: no plan, no prices
        data = catalog.cards(int(time.time()), cards, states, plan, measured)
        return {"object": "list", "data": data}

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        report = await parts.health()
        return JSONResponse(report, status_code=200 if report.get("status") == "ok" else 503)

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        waits = {str(t): flow.admission.wait_s(str(t)) for t in catalog.served()}
        up = "# HELP zerolayer_redis_up 1 when this gateway reaches Redis\n"
        up += "# TYPE zerolayer_redis_up gauge\nzerolayer_redis_up {}\n"
        try:
            text = await parts.metrics.render({"zerolayer_queue_wait_seconds": waits})
            if parts.live is not None:
                text += render_live(await parts.live.report([str(t) for t in catalog.served()]))
        except (RedisError, OSError):
            # the counters live in Redis: without it there are none, and that is the news
            return PlainTextResponse(up.format(0), media_type="text/plain; version=0.0.4")
        return PlainTextResponse(up.format(1) + text, media_type="text/plain; version=0.0.4")

    app.include_router(chunks_router(parts, catalog, flow))
    if parts.conversations is not None:
        responder = Responder(flow, parts.conversations)
        app.include_router(responses_router(responder, max_bytes, timeout))
        app.include_router(conversations_router(parts.conversations, max_bytes, timeout))
    if parts.ledger is not None:
        billing = APIRouter()
        add_billing_routes(billing, "/v1", current_tenant, parts.ledger)
        app.include_router(billing)
    app.include_router(account_router(parts))
    app.include_router(console_router())
    app.include_router(silence_router(parts))
    app.include_router(admin_router(parts))
    app.include_router(keys_router(parts))
    app.include_router(operations_router(parts, flow, catalog))
    install_schema(app, BODY_MODELS)
    idem = cfg.idempotency
    app.add_middleware(
        Idempotency,
        client=parts.limiter.client,
        ttl_s=idem.ttl_s,
        max_bytes=idem.max_body_bytes,
        max_body_bytes=max_bytes,
        lease_s=cfg.gateway.concurrency_lease_s,
    )
    return app
