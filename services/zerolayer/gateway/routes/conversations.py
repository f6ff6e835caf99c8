"""The Conversations API under /v1/conversations: create (with up to 20 first items), retrieve,
update metadata, delete; and a conversation's items: add (up to 20), list by cursor, retrieve,
delete. Every object belongs to the key's tenant; any other tenant's key gets 404."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from zerolayer.conversations import Busy, input_items, new_id
from zerolayer.errors import ConversationBusy
from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.deps import ConversationsDep, StorageQuota, Tenant
from zerolayer.gateway.http import Cursor, cursor, found
from zerolayer.gateway.idempotency import kept_object
from zerolayer.gateway.replies import Conversation, ConversationDeleted, Item, ItemList, json_reply
from zerolayer.gateway.response_bodies import (
    AddItemsRequest,
    CreateConversationRequest,
    UpdateConversationRequest,
)

__all__ = ["router"]


router = APIRouter(prefix="/v1/conversations", route_class=BodyRoute)


@router.post("", responses=json_reply(Conversation))
async def create(
    request: Request,
    body: CreateConversationRequest,
    owner: Tenant,
    quota: StorageQuota,
    store: ConversationsDep,
) -> dict[str, Any]:
    """Create a conversation, with up to 20 first items (403 past the storage quota)."""
    items = input_items(body.items or [], "items")
    cid = new_id("conv")
    kept_object(request, "conversation", cid)
    return await found(store.create_conversation(owner, cid, body.metadata or {}, items, quota))


@router.get("/{conversation_id}", responses=json_reply(Conversation))
async def retrieve(owner: Tenant, store: ConversationsDep, conversation_id: str) -> dict[str, Any]:
    """A conversation of the tenant."""
    return await found(store.conversation(owner, conversation_id))


@router.post("/{conversation_id}", responses=json_reply(Conversation))
async def update(
    request: Request,
    body: UpdateConversationRequest,
    owner: Tenant,
    store: ConversationsDep,
    conversation_id: str,
) -> dict[str, Any]:
    """Replace a conversation's metadata."""
    kept_object(request, "conversation", conversation_id)
    return await found(store.update_conversation(owner, conversation_id, body.metadata or {}))


@router.delete("/{conversation_id}", responses=json_reply(ConversationDeleted))
async def delete(owner: Tenant, store: ConversationsDep, conversation_id: str) -> dict[str, Any]:
    """Delete a conversation and its items (409 while a response is generated on it)."""
    try:
        await found(store.delete_conversation(owner, conversation_id))
    except Busy as exc:
        raise ConversationBusy(
            f"a response is being generated on conversation {conversation_id}; delete it "
            "once that response ends",
            1.0,
        ) from exc
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


@router.post("/{conversation_id}/items", responses=json_reply(ItemList))
async def add_items(
    request: Request,
    body: AddItemsRequest,
    owner: Tenant,
    quota: StorageQuota,
    store: ConversationsDep,
    conversation_id: str,
) -> dict[str, Any]:
    """Add up to 20 items to a conversation (403 past the storage quota)."""
    kept_object(request, "conversation", conversation_id)
    items = input_items(body.items, "items")
    await found(store.add_items(owner, conversation_id, items, quota=quota))
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"],
        "last_id": items[-1]["id"],
        "has_more": False,
    }


@router.get("/{conversation_id}/items", responses=json_reply(ItemList))
async def list_items(
    owner: Tenant,
    store: ConversationsDep,
    conversation_id: str,
    at: Annotated[Cursor, Depends(cursor)],
) -> dict[str, Any]:
    """A page of a conversation's items, by cursor."""
    got = await found(store.item_page(owner, conversation_id, at.limit, at.order, at.after))
    return got.body()


@router.get("/{conversation_id}/items/{item_id}", responses=json_reply(Item))
async def retrieve_item(
    owner: Tenant, store: ConversationsDep, conversation_id: str, item_id: str
) -> Any:
    """One item of a conversation."""
    return await found(store.item(owner, conversation_id, item_id))


@router.delete("/{conversation_id}/items/{item_id}", responses=json_reply(Conversation))
async def delete_item(
    owner: Tenant, store: ConversationsDep, conversation_id: str, item_id: str
) -> Any:
    """Delete one item; the conversation after it."""
    await found(store.delete_item(owner, conversation_id, item_id))
    return await found(store.conversation(owner, conversation_id))
