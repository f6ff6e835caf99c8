"""The Responses API: the request, the response resource, its items and its stream events."""

from __future__ import annotations

from typing import Any, Literal

from .._models import BaseModel, RequestModel

__all__ = [
    "ResponseCreateParams",
    "ContentPart",
    "Message",
    "ResponseError",
    "ResponseUsage",
    "ConversationRef",
    "Response",
    "ResponseDeleted",
    "ResponseStreamEvent",
    "ResponseLifecycleEvent",
    "ResponseOutputItemEvent",
    "ResponseContentPartEvent",
    "ResponseTextDeltaEvent",
    "ResponseTextDoneEvent",
    "ResponseErrorEvent",
    "EVENT_TYPES",
]


class ResponseCreateParams(RequestModel):
    """The body of POST /v1/responses."""

    model: str
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, str] | None = None
    store: bool | None = None
    truncation: Literal["auto", "disabled"] | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    metadata: dict[str, str] | None = None
    stream: bool | None = None
    user: str | None = None


class ContentPart(BaseModel):
    """A part of a message: input_text or output_text."""

    type: str
    text: str | None = None


class Message(BaseModel):
    """A message item: of a conversation, a response's input or its output."""

    type: str = "message"
    id: str
    status: str | None = None
    role: str | None = None
    content: list[ContentPart] = []

    @property
    def text(self) -> str:
        """The message's text, all parts joined."""
        return "".join(p.text or "" for p in self.content)


class ResponseError(BaseModel):
    """Why a response failed."""

    code: str | None = None
    message: str = ""


class ResponseUsage(BaseModel):
    """Tokens billed for a response."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    input_tokens_details: dict[str, int] | None = None
    output_tokens_details: dict[str, int] | None = None


class ConversationRef(BaseModel):
    """The conversation a response was added to."""

    id: str


class Response(BaseModel):
    """A response: its status, output items and usage. `model` names the tier that answered."""

    id: str
    object: str = "response"
    created_at: int = 0
    completed_at: int | None = None
    status: str | None = None
    model: str = ""
    output: list[Message] = []
    usage: ResponseUsage | None = None
    error: ResponseError | None = None
    incomplete_details: dict[str, Any] | None = None
    previous_response_id: str | None = None
    instructions: str | None = None
    conversation: ConversationRef | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None

    @property
    def output_text(self) -> str:
        """The text of every output_text part of the output, joined (as the openai package's
        property of the same name)."""
        return "".join(
            p.text or "" for item in self.output for p in item.content if p.type == "output_text"
        )


class ResponseDeleted(BaseModel):
    """What DELETE /v1/responses/{id} answers."""

    id: str
    object: str = "response"
    deleted: bool = True


class ResponseStreamEvent(BaseModel):
    """An event of a streamed response; `type` says which (an event type this SDK does not know
    arrives as this class, with its fields kept)."""

    type: str
    sequence_number: int = 0


class ResponseLifecycleEvent(ResponseStreamEvent):
    """response.created, .in_progress, .completed, .incomplete, .failed: the whole response."""

    response: Response


class ResponseOutputItemEvent(ResponseStreamEvent):
    """response.output_item.added / .done."""

    output_index: int = 0
    item: Message


class ResponseContentPartEvent(ResponseStreamEvent):
    """response.content_part.added / .done."""

    item_id: str = ""
    output_index: int = 0
    content_index: int = 0
    part: ContentPart


class ResponseTextDeltaEvent(ResponseStreamEvent):
    """response.output_text.delta: a piece of the output text."""

    item_id: str = ""
    output_index: int = 0
    content_index: int = 0
    delta: str = ""


class ResponseTextDoneEvent(ResponseStreamEvent):
    """response.output_text.done: the whole output text."""

    item_id: str = ""
    output_index: int = 0
    content_index: int = 0
    text: str = ""


class ResponseErrorEvent(ResponseStreamEvent):
    """error: the stream failed."""

    code: str | None = None
    message: str = ""
    param: str | None = None


_LIFECYCLE = ("created", "in_progress", "completed", "incomplete", "failed")
EVENT_TYPES: dict[str, type[ResponseStreamEvent]] = {
    **{f"response.{k}": ResponseLifecycleEvent for k in _LIFECYCLE},
    "response.output_item.added": ResponseOutputItemEvent,
    "response.output_item.done": ResponseOutputItemEvent,
    "response.content_part.added": ResponseContentPartEvent,
    "response.content_part.done": ResponseContentPartEvent,
    "response.output_text.delta": ResponseTextDeltaEvent,
    "response.output_text.done": ResponseTextDoneEvent,
    "error": ResponseErrorEvent,
}
