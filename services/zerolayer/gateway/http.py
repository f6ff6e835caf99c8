"""HTTP helpers the gateway's routes use: the bearer key, the one place an error becomes an HTTP
response, a streamed response that settles however it ends, and for the stored objects' routes,
their 404 and the cursor of their lists. (Bodies: zerolayer.gateway.bodies.)"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from fastapi import Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.requests import ClientDisconnect, HTTPConnection

from zerolayer.conversations import NotFound, QuotaExceeded
from zerolayer.errors import (
    APIError,
    AuthenticationFailed,
    InvalidRequest,
    ObjectNotFound,
    StorageQuotaExceeded,
)
from zerolayer.store.keys import ApiKeyRecord, hash_key

__all__ = [
    "KeyLookup",
    "bearer",
    "error_response",
    "authorise",
    "is_admin",
    "ClosingStream",
    "Cursor",
    "cursor",
    "found",
    "query_value",
]

KeyLookup = Callable[[str], Awaitable[ApiKeyRecord | None]]


def error_response(exc: APIError) -> JSONResponse:
    """An APIError as the HTTP response OpenAI clients understand."""
    return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.headers())


def bearer(header: str) -> str | None:
    """The key of an `Authorization: Bearer <key>` header (the scheme in any case), or None."""
    scheme, _, key = header.partition(" ")
    return (key.strip() or None) if scheme.lower() == "bearer" else None


async def authorise(request: HTTPConnection, lookup_key: KeyLookup) -> ApiKeyRecord:
    """The key record of a request's (or a WebSocket handshake's) bearer key; 401 if missing,
    unknown or revoked."""
    key = bearer(request.headers.get("authorization", ""))
    if key is None:
        raise AuthenticationFailed(
            "no API key given: send 'Authorization: Bearer <key>' "
            "(create one with `zerolayer keys create --plan NAME`)"
        )
    record = await lookup_key(key)
    if record is None or record.revoked:
        raise AuthenticationFailed("the API key is unknown or revoked")
    return record


def is_admin(request: Request, admin_sha256: str | None) -> bool:
    """Whether the request's bearer key is the admin key (whose SHA-256 the config holds)."""
    key = bearer(request.headers.get("authorization", ""))
    if admin_sha256 is None or key is None:
        return False
    return hmac.compare_digest(hash_key(key), admin_sha256)


class ClosingStream(StreamingResponse):
    """A streamed response that ends its work however it ends: finished, failed, the client gone,
    or gone before the body started. Its body iterator is closed first (a started generator
    settles what it delivered in its own `finally`), then on_close() runs (for one that never
    started, whose `finally` never runs; on_close must be a no-op after such a settlement).

    duplex: the body reads the request while it answers. Starlette's own response listens for a
    disconnect on `receive` meanwhile (under ASGI < 2.4), which would eat the request's messages;
    a duplex stream sees a gone client as a failing send instead."""

    def __init__(
        self, content: Any, on_close: Callable[[], None], duplex: bool = False, **kwargs: Any
    ):
        super().__init__(content, **kwargs)
        self._on_close = on_close
        self._duplex = duplex

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            if not self._duplex:
                await super().__call__(scope, receive, send)
                return
            try:
                await self.stream_response(send)
            except OSError as exc:
                raise ClientDisconnect() from exc
        finally:
            await self.finish()

    async def finish(self) -> None:
        """End its work: close the body iterator, then on_close() (also for a body that was
        read by another sender than ASGI's, such as a WebSocket)."""
        aclose = getattr(self.body_iterator, "aclose", None)  # an async generator's
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
        self._on_close()


async def found(pending: Awaitable[Any]) -> Any:
    """What a conversation-store call returns; its NotFound as the API's 404, its
    QuotaExceeded as the API's 403 storage_quota_exceeded."""
    try:
        return await pending
    except NotFound as exc:
        raise ObjectNotFound(str(exc)) from exc
    except QuotaExceeded as exc:
        raise StorageQuotaExceeded(str(exc)) from exc


@dataclass(frozen=True)
class Cursor:
    """Where a page of a list starts and how long it is."""

    limit: int
    order: Literal["asc", "desc"]
    after: str | None


async def cursor(
    limit: int = Query(default=20, ge=1, le=100, description="Items per page"),
    order: Literal["asc", "desc"] = Query(default="desc", description="Oldest first: asc"),
    after: str | None = Query(default=None, description="The id of the item before"),
) -> Cursor:
    """The query parameters of a list route (a FastAPI dependency)."""
    return Cursor(limit, order, after)


_V = TypeVar("_V", int, float)


def query_value(
    request: Request,
    name: str,
    default: _V,
    parse: Callable[[str], _V],
    ok: Callable[[_V], bool],
    takes: str,
) -> _V:
    """A query parameter parsed and checked, or its default when absent; a 400 naming it and
    what it takes (`takes`) otherwise."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise InvalidRequest(f"{name} takes {takes} (got {raw!r})", param=name)
    return value
