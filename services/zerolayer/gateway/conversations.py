"""The Conversations API under /v1/conversations: create (with up to 20 first items), retrieve,
update metadata, delete; and a conversation's items: add (up to 20), list by cursor, retrieve,
delete. Every object belongs to the key's tenant; any other tenant's key gets 404."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from zerolayer.conversations import ConversationStore, input_items, new_id
from zerolayer.gateway.deps import Tenant
from zerolayer.gateway.http import Cursor, cursor, found, read_json
from zerolayer.gateway.openapi import body_schema
from zerolayer.gateway.response_bodies import (
    AddItemsRequest,
    CreateConversationRequest,
    UpdateConversationRequest,
)

__all__ = ["conversations_router"]


def conversations_router(store: ConversationStore, max_bytes: int, timeout_s: float) -> APIRouter:
    """Routes of the Conversations API."""
    router = APIRouter(prefix="/v1/conversations")

    @router.post("", openapi_extra=body_schema(CreateConversationRequest))
    async def create(request: Request, owner: Tenant) -> dict[str, Any]:
        body = await read_json(request, CreateConversationRequest, max_bytes, timeout_s)
        items = input_items(body.items or [], "items")
        return await store.create_conversation(owner, new_id("conv"), body.metadata or {}, items)

    @router.get("/{conversation_id}")
    async def retrieve(owner: Tenant, conversation_id: str) -> dict[str, Any]:
        return await found(store.conversation(owner, conversation_id))

    @router.post("/{conversation_id}", openapi_extra=body_schema(UpdateConversationRequest))
    async def update(request: Request, owner: Tenant, conversation_id: str) -> dict[str, Any]:
        body = await read_json(request, UpdateConversationRequest, max_bytes, timeout_s)
        return await found(store.update_conversation(owner, conversation_id, body.metadata or {}))

    @router.delete("/{conversation_id}")
    async def delete(owner: Tenant, conversation_id: str) -> dict[str, Any]:
        await found(store.delete_conversation(owner, conversation_id))
        return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}

    @router.post("/{conversation_id}/items", openapi_extra=body_schema(AddItemsRequest))
    async def add_items(request: Request, owner: Tenant, conversation_id: str) -> dict[str, Any]:
        body = await read_json(request, AddItemsRequest, max_bytes, timeout_s)
        items = input_items(body.items, "items")
        await found(store.add_items(owner, conversation_id, items))
        return {
            "object": "list",
            "data": items,
            "first_id": items[0]["id"],
            "last_id": items[-1]["id"],
            "has_more": False,
        }

    @router.get("/{conversation_id}/items")
    async def list_items(
        owner: Tenant,
        conversation_id: str,
        at: Annotated[Cursor, Depends(cursor)],
    ) -> dict[str, Any]:
        got = await found(store.item_page(owner, conversation_id, at.limit, at.order, at.after))
        return got.body()

    @router.get("/{conversation_id}/items/{item_id}")
    async def retrieve_item(owner: Tenant, conversation_id: str, item_id: str) -> Any:
        return await found(store.item(owner, conversation_id, item_id))

    @router.delete("/{conversation_id}/items/{item_id}")
    async def delete_item(owner: Tenant, conversation_id: str, item_id: str) -> Any:
        await found(store.delete_item(owner, conversation_id, item_id))
        return await found(store.conversation(owner, conversation_id))

    return router
