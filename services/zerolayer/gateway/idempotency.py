"""Idempotency-Key on POST requests, as an ASGI layer around the gateway's app.

A POST with an `Idempotency-Key` header (at most 255 characters) made with a valid API key is
claimed in Redis under that key's id, the path and the query, and the Idempotency-Key, before
it runs. A request without a valid key (none, unknown, revoked, or the admin key) passes
through untouched: the app answers it (401), nothing is claimed, nothing is replayed. A retry
with the same key:

- and the same body, after the first ended: the first result is replayed (status, body, and its
  x-request-id; a stream is replayed as the frames the first client was sent), with the header
  `Idempotent-Replayed: true`. Nothing runs, nothing is billed again.
- while the first is still running: 409 `idempotency_in_progress` with Retry-After.
- with another body (JSON compared by content): 422 `idempotency_key_reused`.
- after a first whose result must not be kept (a route marks it with `not_kept`: a response
  made with `store: false`): 409 `idempotency_result_not_kept`; the result itself was never
  written to Redis.
- after a first whose result is a stored object (marked with `kept_object`: a response, a
  conversation) that was deleted since (by the tenant, or with the tenant): 409
  `idempotency_result_deleted`; the kept copy is not sent.

A result is kept (or the key released) before the answer's last chunk is sent, so a retry
sent the moment the answer arrived finds it settled. A result is kept `idempotency.ttl_s`
(24 hours). Only results the request produced are kept
(2xx); a refusal (4xx, 5xx: nothing was billed) releases the key, so a retry runs again. A
claim is a lease renewed while its request runs: a gateway that dies mid-request leaves a key
that frees itself within `lease_s` (its request was not billed: its reservation is swept). A
stream whose client left is kept as what it was sent, and its replay ends with an in-band
`incomplete_result` error frame. The body has been read whole, within the gateway's size and
time limits, by the body layer outside this one, with or without the header.

Redis keys (zerolayer.store.keyspace): idem:<sha256 of the key id, path and query>:<sha256 of
the idempotency key>.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from starlette.requests import Request

from zerolayer.errors import openai_error_body
from zerolayer.gateway.bodies import replay, send_whole
from zerolayer.gateway.http import bearer
from zerolayer.store import keyspace
from zerolayer.store.keys import ApiKeyRecord

__all__ = ["Idempotency", "kept_object", "not_kept"]

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MAX_KEY = 255
_MARK = "zl_idempotency"  # the entry of the request's state (scope["state"]) routes mark
_NOT_KEPT = "not-kept"
# where each kind of stored object lives, to tell whether it still exists
_OBJECTS: dict[str, Callable[[str], str]] = {
    "response": keyspace.response,
    "conversation": keyspace.conversation,
}
_KEPT_HEADERS = {b"content-type", b"x-request-id", b"cache-control", b"content-disposition"}

# ARGV: name, value, ttl_ms; renews a running claim only if it is still this one's
_RENEW = """
if redis.call('GET', ARGV[1]) == ARGV[2] then
  return redis.call('PEXPIRE', ARGV[1], tonumber(ARGV[3]))
end
return 0
"""

# ARGV: name, claim, result, ttl_s; stores the result only over this request's own claim
_KEEP = """
if redis.call('GET', ARGV[1]) == ARGV[2] then
  redis.call('SET', ARGV[1], ARGV[3], 'EX', tonumber(ARGV[4]))
  return 1
end
return 0
"""

_RELEASE = """
if redis.call('GET', ARGV[1]) == ARGV[2] then return redis.call('DEL', ARGV[1]) end
return 0
"""


def not_kept(request: Request) -> None:
    """Mark a request whose result must not be kept for replay (its caller asked for it not to
    be stored): a retry with its Idempotency-Key gets a 409 instead of a copy."""
    setattr(request.state, _MARK, _NOT_KEPT)


def kept_object(request: Request, kind: str, object_id: str) -> None:
    """Mark a request whose result is the stored object `object_id` ("response" or
    "conversation"): its result is replayed only while that object exists."""
    if kind not in _OBJECTS:
        raise ValueError(f"unknown kind of stored object {kind!r}")
    setattr(request.state, _MARK, f"{kind}:{object_id}")


def _error(
    status: int, message: str, kind: str, code: str, headers: dict[str, str] | None = None
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    body = json.dumps(openai_error_body(message, kind, "Idempotency-Key", code)).encode()
    head = [(b"content-type", b"application/json")]
    head += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    return status, head, body


class Idempotency:
    """The ASGI layer (see the module's docstring)."""

    def __init__(
        self,
        app: Any,
        client: aioredis.Redis,
        lookup: Callable[[str], Awaitable[ApiKeyRecord | None]],
        ttl_s: int = 86400,
        max_bytes: int = 4 * 1024 * 1024,
        max_body_bytes: int = 1024 * 1024,
        lease_s: float = 60.0,
    ):
        self.app = app
        self.client = client
        self.lookup = lookup  # an API key's record (the gateway's key store)
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes  # largest result kept
        self.max_body_bytes = max_body_bytes  # largest request body (the gateway's own limit)
        self.lease_ms = int(lease_s * 1000)
        self._renew = client.register_script(_RENEW)
        self._keep = client.register_script(_KEEP)
        self._release = client.register_script(_RELEASE)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        raw = headers.get(b"idempotency-key")
        if raw is None:
            await self.app(scope, receive, send)
            return
        key = raw.decode("latin-1").strip()
        if not key or len(key) > MAX_KEY:
            await send_whole(
                send,
                *_error(
                    400,
                    f"Idempotency-Key must be 1 to {MAX_KEY} characters",
                    "invalid_request_error",
                    "invalid_idempotency_key",
                ),
            )
            return
        try:
            record = await self._caller(headers)
            if record is None:  # no valid API key: the app refuses it, nothing is kept
                await self.app(scope, receive, send)
                return
            body, more = await self._body(receive)
            if more:  # over the gateway's own limit: let the app refuse it as it does
                await self.app(scope, replay(body, True, receive), send)
                return
            query = scope.get("query_string", b"")
            who = hashlib.sha256(
                f"{record.key_id}\0{scope['path']}\0".encode() + bytes(query)
            ).hexdigest()
            name = keyspace.idempotency(who[:32], hashlib.sha256(key.encode()).hexdigest()[:32])
            digest = _digest(body)
            claim = json.dumps({"state": "running", "body": digest, "id": secrets.token_hex(8)})
            claimed = await self.client.set(name, claim, nx=True, px=self.lease_ms)
            kept = None if claimed else await self.client.get(name)
            if kept is not None:
                kept_json = json.loads(kept)
                gone = await self._gone(kept_json)
        except RedisError as exc:
            await send_whole(
                send,
                *_error(
                    503,
                    f"the platform's store is unavailable ({type(exc).__name__}); retry shortly",
                    "server_error",
                    "store_unavailable",
                    {"retry-after": "2"},
                ),
            )
            return
        if not claimed:
            if kept is None:  # the first one was released just now: run this one as new
                await self(scope, replay(body, False, receive), send)
                return
            await self._answer_kept(send, kept_json, digest, gone)
            return
        await self._run(scope, receive, send, body, name, claim)

    async def _caller(self, headers: dict[bytes, bytes]) -> ApiKeyRecord | None:
        """The record of the request's API key when it is a valid one (else None)."""
        key = bearer(headers.get(b"authorization", b"").decode("latin-1"))
        if key is None:
            return None
        record = await self.lookup(key)
        return None if record is None or record.revoked else record

    async def _gone(self, kept: dict[str, Any]) -> bool:
        """Whether the stored object a kept result is was deleted since."""
        ref = kept.get("object")
        if not ref or ref == _NOT_KEPT:
            return False
        kind, _, object_id = str(ref).partition(":")
        return not await self.client.exists(_OBJECTS[kind](object_id))

    async def _body(self, receive: Receive) -> tuple[bytes, bool]:
        """The request's body (up to max_body_bytes + 1), and whether more was left unread."""
        parts: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                return b"".join(parts), False
            chunk = msg.get("body", b"")
            parts.append(chunk)
            size += len(chunk)
            if not msg.get("more_body"):
                return b"".join(parts), False
            if size > self.max_body_bytes:
                return b"".join(parts), True

    async def _answer_kept(self, send: Send, kept: dict[str, Any], digest: str, gone: bool) -> None:
        if kept.get("body") != digest:
            await send_whole(
                send,
                *_error(
                    422,
                    "this Idempotency-Key was used with another request body; use a new key "
                    "for another request",
                    "invalid_request_error",
                    "idempotency_key_reused",
                ),
            )
            return
        if kept.get("state") == "running":
            await send_whole(
                send,
                *_error(
                    409,
                    "a request with this Idempotency-Key is still running; retry once it ended",
                    "invalid_request_error",
                    "idempotency_in_progress",
                    {"retry-after": "1"},
                ),
            )
            return
        if kept.get("object") == _NOT_KEPT or gone:
            what = (
                "its result was not kept (it was made with store: false)"
                if not gone
                else "what it made was deleted since"
            )
            await send_whole(
                send,
                *_error(
                    409,
                    f"a request with this Idempotency-Key already ran; {what}. Use a new key "
                    "to run it again",
                    "invalid_request_error",
                    "idempotency_result_deleted" if gone else "idempotency_result_not_kept",
                ),
            )
            return
        head = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in kept["headers"]]
        head.append((b"idempotent-replayed", b"true"))
        body = base64.b64decode(kept["content"])
        if not kept.get("complete", True):
            err = openai_error_body(
                "the first request with this Idempotency-Key ended before its result was "
                "complete (its client left); this is what it was sent",
                "server_error",
                None,
                "incomplete_result",
            )
            body += f"data: {json.dumps(err)}\n\ndata: [DONE]\n\n".encode()
        await send_whole(send, int(kept["status"]), head, body)

    async def _run(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, name: str, claim: str
    ) -> None:
        status = 0
        head: list[list[str]] = []
        sent: list[bytes] = []
        size = 0
        complete = False
        settled = False

        def take(chunk: bytes) -> None:
            nonlocal size
            size += len(chunk)
            if size <= self.max_bytes:
                sent.append(chunk)

        async def capture(msg: Message) -> None:
            nonlocal status, complete
            if msg["type"] == "http.response.start":
                status = int(msg["status"])
                for k, v in msg.get("headers") or []:
                    if k.lower() in _KEPT_HEADERS:
                        head.append([k.decode("latin-1"), v.decode("latin-1")])
            elif msg["type"] == "http.response.body" and not msg.get("more_body"):
                # the last chunk is kept (or the key released) before it goes out: a client
                # that retries the moment it has the whole answer finds it settled
                take(msg.get("body", b""))
                complete = True
                await settle()
            await send(msg)  # raises when the client is gone: that chunk was not delivered
            if msg["type"] == "http.response.body" and not complete:
                take(msg.get("body", b""))

        state = scope.setdefault("state", {})  # where the routes mark what may be kept

        async def settle() -> None:
            nonlocal settled
            if settled:
                return
            settled = True
            mark = state.get(_MARK)
            if 200 <= status < 300 and mark == _NOT_KEPT:  # that it ran, not what it said
                result = {"state": "done", "body": json.loads(claim)["body"], "object": mark}
                await self._settle(self._keep, name, claim, json.dumps(result), self.ttl_s)
            elif 200 <= status < 300 and size <= self.max_bytes and (complete or sent):
                result = {
                    "state": "done",
                    "body": json.loads(claim)["body"],
                    "status": status,
                    "headers": head,
                    "content": base64.b64encode(b"".join(sent)).decode(),
                    "complete": complete,
                    "object": mark,
                }
                await self._settle(self._keep, name, claim, json.dumps(result), self.ttl_s)
            else:
                await self._settle(self._release, name, claim)

        keeper = asyncio.ensure_future(self._keep_claim(name, claim))
        try:
            await self.app(scope, replay(body, False, receive), capture)
        finally:
            keeper.cancel()
            await settle()

    async def _keep_claim(self, name: str, claim: str) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            with contextlib.suppress(RedisError):
                await self._renew(args=[name, claim, self.lease_ms])

    async def _settle(self, script: Any, *args: Any) -> None:
        """Keep the result (or release the key); a Redis error leaves the claim to run out."""
        try:
            await asyncio.shield(script(args=list(args)))
        except (RedisError, asyncio.CancelledError) as exc:
            log.warning("idempotency key not settled: %s", type(exc).__name__)


def _digest(body: bytes) -> str:
    """What makes two bodies the same request: their JSON's content when they are JSON (key
    order and spacing aside), else their bytes."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    except ValueError:
        canonical = body
    return hashlib.sha256(canonical).hexdigest()
