"""Reply bodies of the gateway's routes that answer JSON (those OpenAI also has, zerolayer's own
customer routes, the silence maps and the operator's /admin routes), as pydantic models. The
routes declare them (`responses=json_reply(Model)`), so the OpenAPI document FastAPI writes
says what each answers. They document; the routes build their replies as they always did (a
model validated per reply would cost every request), and tests/gateway/test_replies.py checks
that real replies validate against what is declared. Objects carry more than these fields where
zerolayer adds its own (tier cards on models, the map-reduce summary's usage), so unknown
fields are allowed."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Account",
    "AdminAccount",
    "BatchList",
    "BatchObject",
    "Billing",
    "CanaryRun",
    "Deleted",
    "FileDeleted",
    "FileList",
    "FileObject",
    "KeyRecordList",
    "KeyView",
    "NewKey",
    "Operations",
    "PlainList",
    "SilenceChannel",
    "SilenceMap",
    "TenantObjects",
    "ChatCompletion",
    "ChunkList",
    "CompactedObject",
    "Invoice",
    "InvoiceList",
    "KeyList",
    "RequestLog",
    "TenantKey",
    "UsageReport",
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


class CompactedObject(_Reply):
    """POST /v1/responses/compact: the user's messages, then one compaction item."""

    id: str
    object: Literal["response.compaction"]
    created_at: int
    output: list[dict[str, Any]]
    usage: dict[str, Any]


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


class FileObject(_Reply):
    """An uploaded file (the Files API)."""

    id: str
    object: Literal["file"]
    bytes: int
    created_at: int
    expires_at: int | None
    filename: str
    purpose: str
    status: str


class FileList(_Reply):
    """A page of a tenant's files."""

    object: Literal["list"]
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(_Reply):
    """DELETE /v1/files/{file_id}."""

    id: str
    object: Literal["file"]
    deleted: bool


class BatchObject(_Reply):
    """A batch (the Batch API)."""

    id: str
    object: Literal["batch"]
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: int
    expires_at: int
    output_file_id: str | None
    error_file_id: str | None
    request_counts: dict[str, int]


class BatchList(_Reply):
    """A page of a tenant's batches."""

    object: Literal["list"]
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class ChunkObject(_Reply):
    """One chunk: its text, tokens, and character offsets into its input."""

    object: Literal["chunk"]
    index: int
    input_index: int
    text: str
    tokens: int
    start_char: int
    end_char: int


class ChunkList(_Reply):
    """POST /v1/chunks with a JSON body."""

    object: Literal["list"]
    model: str
    data: list[ChunkObject]
    usage: dict[str, int]


class KeyView(_Reply):
    """An API key's record (never the key)."""

    key_id: str
    plan: str
    name: str | None
    created: int
    revoked: bool
    tenant: str


class TenantKey(KeyView):
    """One of the tenant's keys, and whether it is the one that asked."""

    current: bool


class KeyList(_Reply):
    """GET /v1/keys."""

    object: Literal["list"]
    data: list[TenantKey]


class Account(_Reply):
    """GET /v1/account."""

    object: Literal["account"]
    key: KeyView
    plan: dict[str, Any]
    month: str
    spent_usd: str
    budget_usd: str | None
    remaining_usd: str | None
    storage: dict[str, int | None] | None = None


class UsageReport(_Reply):
    """GET /v1/usage: tokens and cost per group (day, key, model, tier) and in all."""

    object: Literal["usage"]
    start: str
    end: str
    group_by: list[str]
    data: list[dict[str, Any]]
    totals: dict[str, Any]


class RequestLog(_Reply):
    """GET /v1/requests as JSON: a page of the request log, newest first."""

    object: Literal["list"]
    data: list[dict[str, Any]]
    has_more: bool
    next_cursor: str | None


class InvoiceSummary(_Reply):
    """A month's invoice in the list: its status and total."""

    object: Literal["invoice"]
    id: str
    month: str
    status: Literal["open", "closed"]
    total_usd: str


class InvoiceList(_Reply):
    """GET /v1/invoices."""

    object: Literal["list"]
    data: list[InvoiceSummary]


class Invoice(InvoiceSummary):
    """GET /v1/invoices/{month} as JSON: its lines per model and tier."""

    currency: str
    lines: list[dict[str, Any]]
    subtotal_usd: str


class SilenceMap(_Reply):
    """GET /v1/models/{model}/silence_map: per kind of channel, how silent each layer is."""

    object: Literal["silence_map"]
    model: str
    quantile: float
    kinds: dict[str, Any]


class SilenceChannel(_Reply):
    """GET /v1/models/{model}/silence_map/{kind}/{layer}/{channel}: one channel's figures."""

    object: Literal["silence_map.channel"]
    model: str
    kind: str
    layer: int
    channel: int
    threshold: float
    silent_fraction: float
    samples: list[float]


# the operator's routes (/admin, the admin key)


class AdminAccount(_Reply):
    """GET /admin/account: the admin key's account (the console tells an operator by it)."""

    object: Literal["account"]
    admin: Literal[True]
    plans: list[str]


class NewKey(KeyView):
    """POST /admin/keys: the new key, shown this once, with its record."""

    key: str


class KeyRecordList(_Reply):
    """GET /admin/keys."""

    object: Literal["list"]
    data: list[KeyView]


class PlainList(_Reply):
    """A list of objects (a key's kept prompts, the tenants)."""

    object: Literal["list"]
    data: list[dict[str, Any]]


class Deleted(_Reply):
    """What a deletion of kept data removed."""

    deleted: int | dict[str, int]


class TenantObjects(_Reply):
    """GET /admin/tenants/{tenant}: its keys and the ids of its stored objects."""

    tenant: str
    keys: list[KeyView]
    objects: PlainList


class CanaryRun(_Reply):
    """POST /admin/canary: the canary's scores per tier."""

    object: Literal["canary"]
    tiers: Any


class Billing(_Reply):
    """GET /admin/billing: the tenants billed and the usage stream's state."""

    object: Literal["billing"]
    tenants: list[str]
    stream: dict[str, Any] | None  # None before the stream exists


class Operations(_Reply):
    """GET /admin/operations: live figures per tier, and the alerts."""

    object: Literal["operations"]
    at: int
    tiers: list[dict[str, Any]]
    alerts: list[Any]


def json_reply(model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """A route's `responses=`: its 200 is `model` as JSON."""
    return {200: {"model": model}}


def streamed_reply(
    model: type[BaseModel], what: str, media_type: str = "text/event-stream"
) -> dict[int | str, dict[str, Any]]:
    """A route's `responses=`: its 200 is `model` as JSON, or (asked for a stream) the
    `media_type` stream `what` describes."""
    events = {"schema": {"type": "string"}, "example": what}
    return {200: {"model": model, "content": {media_type: events}}}
