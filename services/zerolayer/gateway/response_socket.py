"""The WebSocket mode of the Responses API: a client opens one long-lived WebSocket on
/v1/responses (its bearer key in the handshake's Authorization header) and sends a
`response.create` event per turn, the body of POST /v1/responses with `"type":
"response.create"` (and no `stream`: every answer is streamed). Each turn's events come back as
text messages, the same JSON objects (and sequence numbers) as the server-sent events of a
streamed POST, without the closing [DONE].

Turns run one after another in the order they were sent (a lane, as a `stream_id` names it, is
echoed on each event of its turn; there is one lane per connection). A turn runs exactly as the
same request over HTTP would: admission, limits, billing, storage. The connection keeps its most
recent unstored response (store: false) in memory, so the next turn may continue it by
previous_response_id although nothing of it was written (zerolayer.gateway.responses'
LocalChain). A refused turn is an `error` event (its HTTP status, and the OpenAI error object)
and the connection stays open; a key that is missing, unknown or revoked is refused at the
handshake (HTTP 401 where the server can answer a handshake with a response, else close code
1008). A connection lasts at most MAX_CONNECTION_S, as OpenAI's do, then ends with an `error`
event `websocket_connection_limit_reached` and close code 1000. A client that leaves mid-turn
is a client that left a streamed POST: what was delivered is stored and billed.

An open connection holds one of its gateway replica's request slots for its whole life, so a
replica takes at most half its `gateway.max_ongoing_requests` in sockets (the rest stays for
HTTP; over it the handshake is a 503), and one key at most its plan's `concurrent_requests`
sockets on a replica (over it, a 429 `concurrent_sockets`)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from fastapi import WebSocket
from fastapi.websockets import WebSocketDisconnect

from zerolayer.conversations import new_id
from zerolayer.errors import APIError, InvalidRequest, Overloaded, RateLimited
from zerolayer.gateway.bodies import Unparsed, decode, validated
from zerolayer.gateway.http import ClosingStream, KeyLookup, authorise, error_response
from zerolayer.gateway.response_bodies import MAX_ID_CHARS, CreateResponseRequest
from zerolayer.gateway.responses import LocalChain, Responder
from zerolayer.store.keys import ApiKeyRecord

__all__ = ["MAX_CONNECTION_S", "Sockets", "serve_socket"]

log = logging.getLogger(__name__)

MAX_CONNECTION_S = 3600.0  # OpenAI closes a Responses WebSocket after 60 minutes too
_GONE = (WebSocketDisconnect, OSError, RuntimeError)  # how a send to a gone client fails


class Sockets:
    """The WebSocket connections open on this gateway replica, in all and per key."""

    def __init__(self, most: int):
        self.most = most
        self.open: dict[str, int] = {}

    def take(self, record: ApiKeyRecord, per_key: int | None) -> None:
        """Count a new connection of the key's, or refuse it (503 when the replica has its
        most sockets open, 429 when the key has)."""
        if sum(self.open.values()) >= self.most:
            raise Overloaded(
                f"this gateway replica has its most WebSocket connections open ({self.most}); "
                "retry shortly, or send the turn as a POST",
                5.0,
                code="too_many_sockets",
            )
        mine = self.open.get(record.key_id, 0)
        if per_key is not None and mine >= per_key:
            raise RateLimited(
                f"this key has {mine} WebSocket connections open, its plan's most at once; "
                "close one, or send the turn as a POST",
                5.0,
                code="concurrent_sockets",
            )
        self.open[record.key_id] = mine + 1

    def give(self, record: ApiKeyRecord) -> None:
        left = self.open.get(record.key_id, 0) - 1
        if left > 0:
            self.open[record.key_id] = left
        else:
            self.open.pop(record.key_id, None)


class _LimitReached(APIError):
    status_code = 400
    error_type = "invalid_request_error"
    code = "websocket_connection_limit_reached"


def error_event(exc: APIError, lane: str | None = None) -> dict[str, Any]:
    """A refused turn (or connection) as the WebSocket `error` event."""
    event: dict[str, Any] = {"type": "error", "status": exc.status_code, **exc.body()}
    if lane is not None:
        event["stream_id"] = lane
    return event


def create_event(text: str) -> tuple[CreateResponseRequest, str | None]:
    """A client event's request (streamed) and lane; InvalidRequest naming the field that is
    wrong, as the same body's POST would."""
    data = decode(text.encode("utf-8", "surrogatepass"))
    if isinstance(data, Unparsed):
        raise InvalidRequest(data.reason.replace("request body", "event"))
    if not isinstance(data, dict):
        raise InvalidRequest("a client event is a JSON object with a 'type'", param="type")
    kind = data.pop("type", None)
    if kind != "response.create":
        raise InvalidRequest(
            f"unknown client event type {kind!r}: 'response.create' is served", param="type"
        )
    lane = data.pop("stream_id", None)
    if lane is not None and (not isinstance(lane, str) or not 0 < len(lane) <= MAX_ID_CHARS):
        raise InvalidRequest(
            f"stream_id must be a string of 1 to {MAX_ID_CHARS} characters", param="stream_id"
        )
    if "stream" in data:
        raise InvalidRequest(
            "stream is implicit on a WebSocket (every answer is streamed): leave it out",
            param="stream",
        )
    if data.pop("generate", True) is not True:
        raise InvalidRequest(
            "generate: false (a warm-up turn without output) is not served: send the turn "
            "itself; only true is accepted",
            param="generate",
        )
    return validated({**data, "stream": True}, CreateResponseRequest), lane


def _data_of(frame: bytes) -> bytes | None:
    """The JSON of one server-sent event of the Responses stream (None for the [DONE] frame)."""
    for line in frame.split(b"\n"):
        if line.startswith(b"data: "):
            data = line[len(b"data: ") :]
            return None if data == b"[DONE]" else data
    return None


class _Connection:
    """One accepted WebSocket: its key, its unstored chain, its turns in order."""

    def __init__(self, ws: WebSocket, responder: Responder, record: ApiKeyRecord):
        self.ws = ws
        self.responder = responder
        self.record = record
        self.local = LocalChain()

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send_text(json.dumps(event, separators=(",", ":")))

    async def turn(self, text: str) -> None:
        """One client event: its response's events, or an error event. Raises one of _GONE
        when the client is gone (the response then settles as a client that left)."""
        lane = None
        try:
            body, lane = create_event(text)
            reply = await self.responder.create(body, self.record, new_id("resp"), self.local)
        except APIError as exc:
            await self.send(error_event(exc, lane))
            return
        assert isinstance(reply, ClosingStream), "a streamed response"
        try:
            async for frame in reply.body_iterator:
                data = _data_of(bytes(frame) if not isinstance(frame, str) else frame.encode())
                if data is None:
                    continue
                if lane is None:
                    await self.ws.send_text(data.decode())
                else:
                    await self.send({**json.loads(data), "stream_id": lane})
        finally:
            await reply.finish()


async def serve_socket(
    ws: WebSocket,
    responder: Responder,
    lookup_key: KeyLookup,
    sockets: Sockets,
    max_s: float | None = None,
) -> None:
    """Serve one WebSocket connection of the Responses API until the client closes it or its
    time is up (max_s, MAX_CONNECTION_S when None)."""
    max_s = MAX_CONNECTION_S if max_s is None else max_s
    try:
        record = await authorise(ws, lookup_key)
        plan = responder.pipeline.config.plans.get(record.plan)
        sockets.take(record, plan.limits.concurrent_requests if plan is not None else None)
    except APIError as exc:
        if "websocket.http.response" in ws.scope.get("extensions", {}):
            await ws.send_denial_response(error_response(exc))
        else:
            await ws.close(code=1008, reason=exc.message[:120])
        return
    try:
        await _serve(ws, responder, record, max_s)
    finally:
        sockets.give(record)


async def _serve(ws: WebSocket, responder: Responder, record: ApiKeyRecord, max_s: float) -> None:
    await ws.accept()
    conn = _Connection(ws, responder, record)
    deadline = time.monotonic() + max_s
    try:
        while True:
            try:
                message = await asyncio.wait_for(ws.receive(), deadline - time.monotonic())
            except TimeoutError:
                limit = _LimitReached(
                    f"a Responses WebSocket lasts at most {max_s:.0f} s: open a new one and "
                    "continue by previous_response_id"
                )
                await conn.send(error_event(limit))
                await ws.close(code=1000)
                return
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                text = (message.get("bytes") or b"").decode("utf-8", "replace")
            await conn.turn(text)
    except _GONE as exc:
        log.info("a Responses WebSocket of key %s ended: %s", record.key_id, type(exc).__name__)
