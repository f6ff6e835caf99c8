"""The Conversations API: conversations and their items."""

from __future__ import annotations

from typing import Any

from .._models import BaseModel, RequestModel
from .responses import Message

__all__ = [
    "ConversationCreateParams",
    "ConversationUpdateParams",
    "ItemCreateParams",
    "Conversation",
    "ConversationDeleted",
    "ConversationItemList",
]


class ConversationCreateParams(RequestModel):
    """The body of POST /v1/conversations."""

    items: list[dict[str, Any]] | None = None
    metadata: dict[str, str] | None = None


class ConversationUpdateParams(RequestModel):
    """The body of POST /v1/conversations/{id}: metadata replacing the old."""

    metadata: dict[str, str]


class ItemCreateParams(RequestModel):
    """The body of POST /v1/conversations/{id}/items."""

    items: list[dict[str, Any]]


class Conversation(BaseModel):
    """A conversation (its items are listed apart)."""

    id: str
    object: str = "conversation"
    created_at: int = 0
    metadata: dict[str, str] = {}


class ConversationDeleted(BaseModel):
    """What DELETE /v1/conversations/{id} answers."""

    id: str
    object: str = "conversation.deleted"
    deleted: bool = True


class ConversationItemList(BaseModel):
    """The items added by one call."""

    object: str = "list"
    data: list[Message]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False
