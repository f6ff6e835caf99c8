"""Request bodies at the gateway, in two places:

- `BodyLimits`, an ASGI layer around the app, reads every request body whole before any route
  sees it: 413 when it declares or reaches more than gateway.max_body_bytes (read piece by piece,
  so a chunked body that declares no length is never held past the cap), 408 when the client
  takes longer than gateway.body_timeout_s to send it. It answers those itself, in the OpenAI
  error format. A streamed body (text/plain to /v1/chunks, cut while it arrives) passes through:
  its route caps what it reads and has no whole-body deadline; so does an upload (multipart to
  /v1/files, read by its route as it arrives, to at most files.max_bytes). After the body, it
  alone reads
  the client's messages: `client_gone()` tells the request when its client has left.
- `BodyRoute`, the route class of every router, decodes the body the way FastAPI then validates
  it into the route's pydantic model (so FastAPI also writes the OpenAPI document). A body that
  is not UTF-8, not JSON or nested too deeply is not refused while it is read: it reaches the
  route's validation as an `Unparsed` value, after the route's dependencies (the API key first),
  and the app's handler of validation errors names what was wrong with it (`unparsed_message`).
  A missing content-type counts as JSON.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Collection, Coroutine, MutableMapping
from contextvars import ContextVar
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

from zerolayer.errors import APIError, InvalidRequest, PayloadTooLarge, RequestTimeout

__all__ = [
    "BodyLimits",
    "BodyRoute",
    "Unparsed",
    "client_gone",
    "decode",
    "is_json",
    "is_text_stream",
    "is_upload",
    "parse",
    "replay",
    "send_error",
    "send_whole",
    "unparsed_message",
    "validation_message",
]

M = TypeVar("M", bound=BaseModel)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_WITH_BODY = {"POST", "PUT", "PATCH"}


class _Gone(Exception):
    """The client left while it sent its body."""


class BodyLimits:
    """See the module doc. `streamed`: the paths whose text/plain bodies are streams."""

    def __init__(
        self,
        app: Any,
        max_bytes: int,
        timeout_s: float,
        streamed: Collection[str] = ("/v1/chunks",),
        uploads: Collection[str] = ("/v1/files",),
    ):
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.streamed = frozenset(streamed)
        self.uploads = frozenset(uploads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _WITH_BODY or self._streams(scope):
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await send_error(send, self._too_large())
            return
        try:
            body = await asyncio.wait_for(self._read(receive), self.timeout_s)
        except asyncio.TimeoutError:
            await send_error(
                send, RequestTimeout(f"the request body did not arrive within {self.timeout_s:g} s")
            )
            return
        except PayloadTooLarge as exc:
            await send_error(send, exc)
            return
        except _Gone:
            return  # nobody is left to answer
        # from here on, one reader of the client's messages: it tells the request (and the
        # app's own receive) when the client has gone
        gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watcher = asyncio.ensure_future(_watch(receive, gone))
        token = _GONE.set(gone)
        try:
            await self.app(scope, replay(body, False, _disconnect(gone)), send)
        finally:
            _GONE.reset(token)
            watcher.cancel()

    def _streams(self, scope: Scope) -> bool:
        path = str(scope["path"]).removeprefix(str(scope.get("root_path", "")))
        kind = _header(scope, b"content-type")
        if path in self.uploads and is_upload(kind):
            return True
        return path in self.streamed and is_text_stream(kind)

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(f"the request body is larger than {self.max_bytes} bytes")

    async def _read(self, receive: Receive) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                raise _Gone()
            piece = msg.get("body", b"")
            size += len(piece)
            if size > self.max_bytes:
                raise self._too_large()
            parts.append(piece)
            if not msg.get("more_body"):
                return b"".join(parts)


def _header(scope: Scope, name: bytes) -> str:
    for k, v in scope.get("headers") or []:
        if k.lower() == name:
            return bytes(v).decode("latin-1").strip().lower()
    return ""


_GONE: ContextVar[asyncio.Future[None] | None] = ContextVar("zl_client_gone", default=None)


def client_gone() -> asyncio.Future[None] | None:
    """Done once the client of the request being answered has closed its connection (None
    outside a request whose body BodyLimits read): a whole answer still being computed for it
    can stop (zerolayer.gateway.pipeline)."""
    return _GONE.get()


async def _watch(receive: Receive, gone: asyncio.Future[None]) -> None:
    """Read the client's messages after its body: the first http.disconnect (the client left,
    or the response ended) completes `gone`."""
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            if not gone.done():
                gone.set_result(None)
            return


def _disconnect(gone: asyncio.Future[None]) -> Receive:
    """A receive that answers http.disconnect once the client has left."""

    async def receive() -> Message:
        await asyncio.shield(gone)
        return {"type": "http.disconnect"}

    return receive


def replay(body: bytes, more: bool, receive: Receive) -> Receive:
    """A receive that hands over the body read already, then the client's own messages."""
    done = False

    async def again() -> Message:
        nonlocal done
        if not done:
            done = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return again


async def send_whole(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    """Answer from an ASGI layer with a whole body (no route ran)."""
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_error(send: Send, exc: APIError) -> None:
    """Answer an APIError from an ASGI layer (no route ran)."""
    body = json.dumps(exc.body()).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *[(k.encode("latin-1"), v.encode("latin-1")) for k, v in exc.headers().items()],
    ]
    await send_whole(send, exc.status_code, headers, body)


class Unparsed:
    """A body that could not be decoded, and why; it fails the route's validation (it has no
    fields for pydantic to read)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


def unparsed_message(body: Any, whole: bool = True) -> str | None:
    """What was wrong with a body that failed validation: undecodable, or (when the error is
    about the body as a whole) not a JSON object; None when its fields are what failed."""
    if isinstance(body, Unparsed):
        return body.reason
    if not whole:
        return None
    if isinstance(body, bytes | bytearray):
        return "the request body is not JSON: send it with content-type: application/json"
    if body is None:
        return "the request body is missing: send a JSON object"
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    return None


def decode(raw: bytes) -> Any:
    """A body's JSON value, or Unparsed when it is not UTF-8, not JSON or nested too deeply."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return Unparsed(f"the request body is not valid UTF-8 (byte {exc.start}: {exc.reason})")
    except json.JSONDecodeError as exc:
        return Unparsed(f"the request body is not valid JSON: {exc}")
    except RecursionError:
        return Unparsed("the request body's JSON is nested too deeply")


def is_text_stream(content_type: str | None) -> bool:
    """Whether a body of this content-type is a text stream (text/plain): BodyLimits lets it
    through unread, and its route reads it as it arrives. One test for both, so a body one
    of them takes for a stream the other never reads whole."""
    return (content_type or "").strip().lower().startswith("text/plain")


def is_upload(content_type: str | None) -> bool:
    """Whether a body is a multipart form (a file upload): its route reads it as it arrives."""
    return (content_type or "").strip().lower().startswith("multipart/form-data")


def is_json(content_type: str | None) -> bool:
    """Whether a body of this content-type is read as JSON (as FastAPI reads one): none given,
    application/json, or application/*+json."""
    kind = (content_type or "").split(";")[0].strip().lower()
    return (
        not kind
        or kind == "application/json"
        or (kind.startswith("application/") and kind.endswith("+json"))
    )


def parse(raw: bytes, content_type: str | None, model: type[M]) -> M:
    """A body read by hand (a route that also takes a stream) as `model`; the same 400s as a
    body FastAPI validates."""
    data = (decode(raw) if is_json(content_type) else raw) if raw else None
    unparsed = unparsed_message(data)
    if unparsed is not None:
        raise InvalidRequest(unparsed)
    return validated(data, model)


def validated(data: Any, model: type[M]) -> M:
    """A decoded body as `model`; the 400 a body FastAPI validates would get otherwise (the
    first error's message, its field as `param`)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message, param = validation_message([dict(e) for e in exc.errors()], ("body",))
        raise InvalidRequest(message, param=param) from exc


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none", "any"})


def _union_member(part: Any) -> bool:
    """Whether a part of pydantic's error location names which member of a union was tried
    (`str`, `list[int]`, a model's class name), not a field of the client's body."""
    if not isinstance(part, str):
        return False
    return "[" in part or part in _TYPE_TAGS or part[:1].isupper()


def _path(loc: list[Any]) -> str:
    """A location as the client's field path: `tools[0].function.name`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def validation_message(
    errors: list[dict[str, Any]], prefix: tuple[str, ...] = ()
) -> tuple[str, str | None]:
    """(message, param) of pydantic's validation errors: the first one, and how many more."""
    first = errors[0]
    raw = [*prefix, *(p for p in first.get("loc", ()) if not _union_member(p))]
    what = {"path": "path parameter", "query": "query parameter"}.get(str(raw[0]) if raw else "")
    loc = raw[1:] if what or raw[:1] == ["body"] else raw
    param = _path(loc) or None
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if first.get("type") == "extra_forbidden" and not what:
        return f"Unrecognized request argument supplied: {param}{more}", param
    if what:
        return f"invalid {what} '{param}': {first.get('msg', 'invalid value')}{more}", param
    where = f" at '{param}'" if param else ""
    return f"invalid request body{where}: {first.get('msg', 'invalid value')}{more}", param


class _Decoded(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json: Any = decode(await self.body())
        return self._json


class BodyRoute(APIRoute):
    """A route whose JSON body is decoded as the module doc says."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["strict_content_type"] = False
        super().__init__(*args, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def decoded(request: Request) -> Response:
            return await handler(_Decoded(request.scope, request.receive))

        return decoded
