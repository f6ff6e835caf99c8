"""client.conversations: conversations kept by the platform, and their items."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from .._base_client import Call, json_as
from .._models import body_of
from .._pagination import AsyncPaginator, Page
from .._resource import AsyncAPIResource, SyncAPIResource
from ..types.conversations import (
    Conversation,
    ConversationCreateParams,
    ConversationDeleted,
    ConversationItemList,
    ConversationUpdateParams,
    ItemCreateParams,
)
from ..types.responses import Message

__all__ = ["Conversations", "AsyncConversations", "Items", "AsyncItems"]

ItemsIn = Sequence[Mapping[str, Any]]


def _conv(method: str, cid: str = "", body: Any = None) -> Call:
    return Call(method, f"/conversations/{cid}".rstrip("/"), parse=json_as(Conversation), json=body)


def _create(items: ItemsIn | None, metadata: Mapping[str, str] | None) -> Call:
    return _conv("POST", body=body_of(ConversationCreateParams, items=items, metadata=metadata))


def _update(cid: str, metadata: Mapping[str, str]) -> Call:
    return _conv("POST", cid, body_of(ConversationUpdateParams, metadata=metadata))


def _delete(cid: str) -> Call:
    return Call("DELETE", f"/conversations/{cid}", parse=json_as(ConversationDeleted))


def _add(cid: str, items: ItemsIn) -> Call:
    body = body_of(ItemCreateParams, items=items)
    return Call(
        "POST", f"/conversations/{cid}/items", parse=json_as(ConversationItemList), json=body
    )


def _item(method: str, cid: str, item_id: str, parse: Any) -> Call:
    return Call(method, f"/conversations/{cid}/items/{item_id}", parse=json_as(parse))


def _page(limit: int | None, order: str | None, after: str | None) -> dict[str, Any]:
    return {"limit": limit, "order": order, "after": after}


class Items(SyncAPIResource):
    """client.conversations.items"""

    def create(self, conversation_id: str, *, items: ItemsIn) -> ConversationItemList:
        """Add 1 to 20 items (messages) to a conversation."""
        return cast("ConversationItemList", self._send(_add(conversation_id, items)))

    add = create

    def list(
        self,
        conversation_id: str,
        *,
        limit: int | None = None,
        order: Literal["asc", "desc"] | None = None,
        after: str | None = None,
    ) -> Page[Message]:
        """A conversation's items (newest first unless order="asc"); iterating the page goes
        through all of them."""
        return self._list(
            f"/conversations/{conversation_id}/items", Message, _page(limit, order, after)
        )

    def retrieve(self, item_id: str, *, conversation_id: str) -> Message:
        """One item of a conversation."""
        return cast("Message", self._send(_item("GET", conversation_id, item_id, Message)))

    def delete(self, item_id: str, *, conversation_id: str) -> Conversation:
        """Delete an item; the conversation is returned."""
        return cast(
            "Conversation", self._send(_item("DELETE", conversation_id, item_id, Conversation))
        )


class AsyncItems(AsyncAPIResource):
    """client.conversations.items (async)"""

    async def create(self, conversation_id: str, *, items: ItemsIn) -> ConversationItemList:
        """Add 1 to 20 items (messages) to a conversation."""
        return cast("ConversationItemList", await self._send(_add(conversation_id, items)))

    add = create

    def list(
        self,
        conversation_id: str,
        *,
        limit: int | None = None,
        order: Literal["asc", "desc"] | None = None,
        after: str | None = None,
    ) -> AsyncPaginator[Message]:
        """A conversation's items (see Items.list)."""
        return self._list(
            f"/conversations/{conversation_id}/items", Message, _page(limit, order, after)
        )

    async def retrieve(self, item_id: str, *, conversation_id: str) -> Message:
        """One item of a conversation."""
        return cast("Message", await self._send(_item("GET", conversation_id, item_id, Message)))

    async def delete(self, item_id: str, *, conversation_id: str) -> Conversation:
        """Delete an item; the conversation is returned."""
        return cast(
            "Conversation",
            await self._send(_item("DELETE", conversation_id, item_id, Conversation)),
        )


class Conversations(SyncAPIResource):
    """The Conversations API."""

    def __init__(self, client: Any):
        super().__init__(client)
        self.items = Items(client)

    def create(
        self, *, items: ItemsIn | None = None, metadata: Mapping[str, str] | None = None
    ) -> Conversation:
        """A new conversation, with up to 20 first items and up to 16 metadata pairs."""
        return cast("Conversation", self._send(_create(items, metadata)))

    def retrieve(self, conversation_id: str) -> Conversation:
        """A conversation."""
        return cast("Conversation", self._send(_conv("GET", conversation_id)))

    def update(self, conversation_id: str, *, metadata: Mapping[str, str]) -> Conversation:
        """Replace a conversation's metadata."""
        return cast("Conversation", self._send(_update(conversation_id, metadata)))

    def delete(self, conversation_id: str) -> ConversationDeleted:
        """Delete a conversation and its items."""
        return cast("ConversationDeleted", self._send(_delete(conversation_id)))


class AsyncConversations(AsyncAPIResource):
    """The Conversations API (async)."""

    def __init__(self, client: Any):
        super().__init__(client)
        self.items = AsyncItems(client)

    async def create(
        self, *, items: ItemsIn | None = None, metadata: Mapping[str, str] | None = None
    ) -> Conversation:
        """A new conversation, with up to 20 first items and up to 16 metadata pairs."""
        return cast("Conversation", await self._send(_create(items, metadata)))

    async def retrieve(self, conversation_id: str) -> Conversation:
        """A conversation."""
        return cast("Conversation", await self._send(_conv("GET", conversation_id)))

    async def update(self, conversation_id: str, *, metadata: Mapping[str, str]) -> Conversation:
        """Replace a conversation's metadata."""
        return cast("Conversation", await self._send(_update(conversation_id, metadata)))

    async def delete(self, conversation_id: str) -> ConversationDeleted:
        """Delete a conversation and its items."""
        return cast("ConversationDeleted", await self._send(_delete(conversation_id)))
