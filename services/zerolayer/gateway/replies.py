"""Reply bodies of the routes OpenAI also has, as pydantic models: the routes declare them
(`responses=REPLY[...]`), so the OpenAPI document FastAPI writes says what each answers. They
document; the routes build their replies as they always did (a model validated per reply would
cost every request), and tests/gateway/test_replies.py checks that real replies validate
against what is declared. Objects carry more than these fields where zerolayer adds its own
(tier cards on models, the map-reduce summary's usage), so unknown fields are allowed."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ChatCompletion",
    "Conversation",
    "ConversationDeleted",
    "Item",
    "ItemList",
    "ModelList",
    "ModelObject",
    "ResponseDeleted",
    "ResponseObject",
    "TextCompletion",
    "json_reply",
    "streamed_reply",
]


class _Reply(BaseModel):
    model_config = ConfigDict(extra="allow")


class Usage(_Reply):
    """Tokens a completion was billed for (map-reduce calls of a summarised prompt included)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class _Message(_Reply):
    role: Literal["assistant"]
    content: str


class ChatChoice(_Reply):
    index: int
    message: _Message
    logprobs: None = None
    finish_reason: str


class ChatCompletion(_Reply):
    """POST /v1/chat/completions, answered whole."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str = Field(description="'<model>:<tier>': the tier that answered")
    choices: list[ChatChoice]
    usage: Usage


class TextChoice(_Reply):
    index: int
    text: str
    logprobs: None = None
    finish_reason: str


class TextCompletion(_Reply):
    """POST /v1/completions, answered whole."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str = Field(description="'<model>:<tier>': the tier that answered")
    choices: list[TextChoice]
    usage: Usage


class ModelObject(_Reply):
    """A model, or one of its tiers ('<model>:<tier>', with its state and tier card)."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(_Reply):
    """GET /v1/models."""

    object: Literal["list"]
    data: list[ModelObject]


class ResponseObject(_Reply):
    """A response of the Responses API."""

    id: str
    object: Literal["response"]
    created_at: int
    status: str
    model: str
    output: list[dict[str, Any]]
    usage: dict[str, Any] | None


class ResponseDeleted(_Reply):
    """DELETE /v1/responses/{response_id}."""

    id: str
    object: Literal["response"]
    deleted: bool


class Item(_Reply):
    """A stored item (a message: its role, content and status)."""

    id: str
    type: str


class ItemList(_Reply):
    """A page of items (a response's input, a conversation's items)."""

    object: Literal["list"]
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool


class Conversation(_Reply):
    """A conversation of the Conversations API."""

    id: str
    object: Literal["conversation"]
    created_at: int
    metadata: dict[str, str]


class ConversationDeleted(_Reply):
    """DELETE /v1/conversations/{conversation_id}."""

    id: str
    object: Literal["conversation.deleted"]
    deleted: bool


def json_reply(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """A route's `responses=`: its 200 is `model` as JSON."""
    return {200: {"model": model}}


def streamed_reply(model: type[BaseModel], what: str) -> dict[int | str, dict[str, Any]]:
    """A route's `responses=`: its 200 is `model` as JSON, or with "stream": true the
    server-sent events `what` describes."""
    events = {"schema": {"type": "string"}, "example": what}
    return {200: {"model": model, "content": {"text/event-stream": events}}}
