"""The gateway's FastAPI app: the routers of gateway.routes (OpenAI routes under /v1, the admin
API under /admin, /healthz and /metrics) over one replica's parts, set on app.state for the
routes' dependencies. Built as a plain FastAPI app over a Backend (gateway.parts), so it runs
inside Ray Serve and in unit tests alike. Every error of every route becomes its HTTP response
here, in the app's exception handlers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import OutOfMemoryError, RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException

from zerolayer.errors import (
    APIError,
    InvalidRequest,
    StoreFull,
    StoreUnavailable,
    openai_error_body,
)
from zerolayer.gateway import routes
from zerolayer.gateway.batches import BatchWorker
from zerolayer.gateway.bodies import BodyLimits, unparsed_message, validation_message
from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.http import error_response
from zerolayer.gateway.idempotency import Idempotency
from zerolayer.gateway.meter import Meter
from zerolayer.gateway.parts import GatewayParts
from zerolayer.gateway.pipeline import Pipeline
from zerolayer.gateway.response_socket import Sockets
from zerolayer.gateway.responses import Responder
from zerolayer.gateway.silence import SilenceMaps
from zerolayer.store.keys import AsyncKeyStore

__all__ = ["create_app"]


def create_app(parts: GatewayParts) -> FastAPI:
    """The gateway's FastAPI app."""
    cfg = parts.config
    catalog = Catalog(cfg)
    meter = Meter(parts.limiter, parts.metrics, cfg, catalog.prices)
    pipeline = Pipeline(parts.backend, cfg, catalog, meter, parts.tiers, parts.traffic)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        meter.start()  # lease renewal and the sweep run from the start, not from a first request
        if parts.canary is not None:
            parts.canary.start()
        worker = app.state.batch_worker
        if worker is not None:
            worker.start()
        yield
        if worker is not None:
            await worker.close(cfg.gateway.drain_s)
        if parts.canary is not None:
            await parts.canary.close()
        # shutdown: settle what is pending (bounded) before the replica goes
        await meter.close(cfg.gateway.drain_s)

    app = FastAPI(
        title="zerolayer", version="0.1.0", docs_url=None, redoc_url=None, lifespan=lifespan
    )
    # what the routes' dependencies read (gateway.deps)
    app.state.parts = parts
    app.state.meter = meter
    app.state.pipeline = pipeline
    app.state.catalog = catalog
    app.state.silence = SilenceMaps(parts)

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        unparsed = unparsed_message(exc.body, whole=errors[0].get("loc") == ("body",))
        if unparsed is not None:
            return error_response(InvalidRequest(unparsed))
        message, param = validation_message(errors)
        return error_response(InvalidRequest(message, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        body = openai_error_body(str(exc.detail), kind)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RedisError)
    async def _store_down(_: Request, exc: RedisError) -> JSONResponse:
        if isinstance(exc, OutOfMemoryError):  # at its memory limit: it refuses every write
            return error_response(
                StoreFull(
                    "the platform's store is full and refuses new data; nothing was taken. "
                    "Retry later (the operator has been alerted)",
                    30.0,
                )
            )
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

    app.include_router(routes.completions.router)
    app.include_router(routes.models.router)
    app.include_router(routes.health.router)
    app.include_router(routes.chunks.router)
    if parts.conversations is not None:
        app.state.responder = Responder(pipeline, parts.conversations)
        # half the replica's request slots at most are held by WebSocket connections
        app.state.sockets = Sockets(max(1, cfg.gateway.max_ongoing_requests // 2))
        app.include_router(routes.responses.router)
        app.include_router(routes.conversations.router)
    if parts.ledger is not None:
        app.include_router(routes.usage.router)
    app.include_router(routes.account.router)
    app.include_router(routes.console.router)
    app.include_router(routes.silence.router)
    app.include_router(routes.admin.router)
    if parts.ledger is not None:
        app.include_router(routes.usage.admin_router)
        app.include_router(routes.admin.billing_router)
    app.include_router(routes.keys.router)
    if parts.files is not None:
        app.include_router(routes.files.router)
    worker = None
    if parts.files is not None and parts.batches is not None:
        app.include_router(routes.batches.router)
        worker = BatchWorker(
            cfg,
            pipeline,
            getattr(app.state, "responder", None),
            parts.batches,
            parts.files,
            AsyncKeyStore(parts.limiter.client),
        )
    app.state.batch_worker = worker
    app.include_router(routes.operations.router)
    idem = cfg.idempotency
    app.add_middleware(
        Idempotency,
        client=parts.limiter.client,
        lookup=parts.lookup_key,
        ttl_s=idem.ttl_s,
        max_bytes=idem.max_body_bytes,
        max_body_bytes=cfg.gateway.max_body_bytes,
        lease_s=cfg.gateway.concurrency_lease_s,
    )
    # outermost: every body is whole and within the limits before anything else reads it
    app.add_middleware(
        BodyLimits, max_bytes=cfg.gateway.max_body_bytes, timeout_s=cfg.gateway.body_timeout_s
    )
    return app
