"""The outermost HTTP layer of a gateway replica: an ASGI middleware that Ray Serve puts around its
own request handling (RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=zerolayer.gateway.edge:middlewares,
set by the launcher for every Ray process).

Ray Serve answers some requests itself, before the application runs, and adds a header of its own
to every answer. At the edge:

- `x-request-timeout-seconds` is removed from requests: with it any client could set its own
  timeout and get Ray's plain-text 408; the platform's own limits apply (gateway.tier_wait_s,
  gateway.request_timeout_s, gateway.body_timeout_s).
- `x-request-id` appears once in every answer: the gateway's own id when it set one, else Ray's
  (Ray appends its id after the application's).
- An error Ray answers itself in plain text (a full queue, a timeout, a client gone) is rewritten
  in the OpenAI error format, with the same status.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.middleware import Middleware

from zerolayer.errors import openai_error_body

__all__ = ["EdgeMiddleware", "middlewares"]

_DROP_REQUEST = {b"x-request-timeout-seconds"}
_CLIENT = ("invalid_request", "invalid_request_error")
_KINDS = {
    408: ("request_timeout", "invalid_request_error"),
    429: ("rate_limit_exceeded", "rate_limit_error"),
    499: ("client_closed_request", "invalid_request_error"),
    500: ("server_error", "server_error"),
    503: ("service_unavailable", "server_error"),
    504: ("gateway_timeout", "server_error"),
}


class EdgeMiddleware:
    """See the module doc."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() not in _DROP_REQUEST]
        scope = {**scope, "headers": headers}
        rewrite: dict[str, Any] = {}

        async def edge_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                out, seen = [], False
                for k, v in message.get("headers", []):
                    if k.lower() == b"x-request-id":
                        if seen:
                            continue
                        seen = True
                    out.append((k, v))
                message = {**message, "headers": out}
                kind = dict((k.lower(), v) for k, v in out).get(b"content-type", b"")
                status = int(message["status"])
                if status >= 400 and kind.startswith(b"text/plain"):
                    rewrite.update(start=message, body=b"")  # Ray's own plain-text error
                    return
            elif message["type"] == "http.response.body" and rewrite:
                rewrite["body"] += message.get("body", b"")
                if message.get("more_body"):
                    return
                await _send_json(send, rewrite["start"], rewrite["body"])
                return
            await send(message)

        await self.app(scope, receive, edge_send)


async def _send_json(send: Any, start: dict[str, Any], text: bytes) -> None:
    status = int(start["status"])
    other = ("server_error", "server_error") if status >= 500 else _CLIENT
    code, kind = _KINDS.get(status, other)
    message = text.decode("utf-8", "replace").strip() or f"HTTP {status}"
    body = json.dumps(openai_error_body(message, kind, code=code)).encode()
    keep = [
        (k, v)
        for k, v in start.get("headers", [])
        if k.lower() not in (b"content-type", b"content-length")
    ]
    headers = [
        *keep,
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def middlewares() -> list[Middleware]:
    """What Ray Serve's HTTP callback asks for: the edge around its own handling."""
    return [Middleware(EdgeMiddleware)]
