"""HTTP helpers every gateway route uses: the bearer key, the body (size, UTF-8, JSON, schema),
the one place an error becomes an HTTP response, and for the stored objects' routes, their
404 and the cursor of their lists."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from fastapi import Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from zerolayer.conversations import NotFound
from zerolayer.errors import (
    APIError,
    AuthenticationFailed,
    InvalidRequest,
    ObjectNotFound,
    PayloadTooLarge,
    RequestTimeout,
)
from zerolayer.store.keys import ApiKeyRecord, hash_key

__all__ = [
    "KeyLookup",
    "error_response",
    "validation_message",
    "authorise",
    "is_admin",
    "authorise_reader",
    "read_body",
    "read_json",
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


def validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """(message, param) of pydantic's validation errors: the first one, and how many more."""
    first = errors[0]
    raw = [str(p) for p in first.get("loc", ())]
    what = {"path": "path parameter", "query": "query parameter"}.get(raw[0] if raw else "")
    loc = raw[1:] if what or raw[:1] == ["body"] else raw
    param = ".".join(loc) or None
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if what:
        return f"invalid {what} '{param}': {first.get('msg', 'invalid value')}{more}", param
    where = f" at '{param}'" if param else ""
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


def is_admin(request: Request, admin_sha256: str | None) -> bool:
    """Whether the request's bearer key is the admin key (whose SHA-256 the config holds)."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if admin_sha256 is None or scheme.lower() != "bearer" or not key.strip():
        return False
    return hmac.compare_digest(hash_key(key.strip()), admin_sha256)


async def authorise_reader(
    request: Request, lookup_key: KeyLookup, admin_sha256: str | None
) -> ApiKeyRecord | None:
    """For the routes that read the catalogue (models, silence maps): an API key's record, or
    None for the admin key; 401 for anything else."""
    if is_admin(request, admin_sha256):
        return None
    return await authorise(request, lookup_key)


async def _capped(request: Request, max_bytes: int) -> bytes:
    """The body, read piece by piece: 413 as soon as it passes max_bytes (a chunked body that
    declares no length is never held whole)."""
    raw = bytearray()
    async for piece in request.stream():
        raw += piece
        if len(raw) > max_bytes:
            raise PayloadTooLarge(f"the request body is larger than {max_bytes} bytes")
    return bytes(raw)


async def read_body(request: Request, max_bytes: int, timeout_s: float = 30.0) -> str:
    """The request body as text: 413 over max_bytes (declared or while reading), 408 when the
    client takes longer than timeout_s to send it, 400 if it is not UTF-8."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"the request body is larger than {max_bytes} bytes")
    try:
        raw = await asyncio.wait_for(_capped(request, max_bytes), timeout_s)
    except asyncio.TimeoutError as exc:
        raise RequestTimeout(f"the request body did not arrive within {timeout_s:g} s") from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"the request body is not valid UTF-8 (byte {exc.start}: {exc.reason})"
        ) from exc


async def read_json(
    request: Request, model: type[BaseModel], max_bytes: int, timeout_s: float = 30.0
) -> Any:
    """The body parsed into `model`; OpenAI-format 400/408/413 errors otherwise."""
    text = await read_body(request, max_bytes, timeout_s)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidRequest("the request body's JSON is nested too deeply") from exc
    if not isinstance(data, dict):
        raise InvalidRequest("the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message, param = validation_message([dict(e) for e in exc.errors()])
        raise InvalidRequest(message, param=param) from exc


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
            aclose = getattr(self.body_iterator, "aclose", None)  # an async generator's
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
            self._on_close()


async def found(pending: Awaitable[Any]) -> Any:
    """What a conversation-store call returns; its NotFound as the API's 404."""
    try:
        return await pending
    except NotFound as exc:
        raise ObjectNotFound(str(exc)) from exc


@dataclass(frozen=True)
class Cursor:
    """Where a page of a list starts and how long it is."""

    limit: int
    order: Literal["asc", "desc"]
    after: str | None


def cursor(
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
