"""The Responses API under /v1/responses: create (whole or streamed, continued by
previous_response_id or on a conversation; or turn by turn over a WebSocket), compact,
retrieve, delete, and a response's input items. The work is zerolayer.gateway.responses' Responder,
over the same request path as a chat completion."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, WebSocket
from fastapi.responses import Response

from zerolayer.conversations import new_id, page
from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.compaction import compact
from zerolayer.gateway.deps import ConversationsDep, CurrentKey, ModelKey, ResponderDep
from zerolayer.gateway.http import Cursor, cursor, found
from zerolayer.gateway.idempotency import kept_object, not_kept
from zerolayer.gateway.replies import (
    CompactedObject,
    ItemList,
    ResponseDeleted,
    ResponseObject,
    json_reply,
    streamed_reply,
)
from zerolayer.gateway.response_bodies import CompactRequest, CreateResponseRequest
from zerolayer.gateway.response_socket import serve_socket

__all__ = ["router"]

router = APIRouter(prefix="/v1/responses", route_class=BodyRoute)


@router.post(
    "", responses=streamed_reply(ResponseObject, "event: response.created ... response.completed")
)
async def create(
    request: Request, body: CreateResponseRequest, record: ModelKey, responder: ResponderDep
) -> Response:
    """Generate a response, and store it before its id reaches the client."""
    rid = new_id("resp")
    if body.store is False:
        not_kept(request)
    else:
        kept_object(request, "response", rid)
    return await responder.create(body, record, rid)


@router.post("/compact", responses=json_reply(CompactedObject))
async def compact_items(
    body: CompactRequest, record: ModelKey, responder: ResponderDep
) -> dict[str, Any]:
    """Compact a conversation: its user messages and one sealed summary of everything
    (zerolayer.gateway.compaction)."""
    return await compact(responder, body, record)


@router.websocket("")
async def connect(ws: WebSocket) -> None:
    """The WebSocket mode: one connection, a `response.create` event per turn, each turn's
    events back as messages (zerolayer.gateway.response_socket)."""
    state = ws.app.state
    await serve_socket(ws, state.responder, state.parts.lookup_key, state.sockets)


@router.get("/{response_id}", responses=json_reply(ResponseObject))
async def retrieve(record: CurrentKey, response_id: str, store: ConversationsDep) -> dict[str, Any]:
    """A stored response of the tenant."""
    return (await found(store.response(record.owner, response_id))).obj


@router.delete("/{response_id}", responses=json_reply(ResponseDeleted))
async def delete(record: CurrentKey, response_id: str, store: ConversationsDep) -> dict[str, Any]:
    """Delete a stored response."""
    await found(store.delete_response(record.owner, response_id))
    return {"id": response_id, "object": "response", "deleted": True}


@router.get("/{response_id}/input_items", responses=json_reply(ItemList))
async def input_items_of(
    record: CurrentKey,
    response_id: str,
    at: Annotated[Cursor, Depends(cursor)],
    store: ConversationsDep,
) -> dict[str, Any]:
    """A page of a response's input items, by cursor."""
    stored = await found(store.response(record.owner, response_id))
    return page(stored.input, at.limit, at.order, at.after).body()
