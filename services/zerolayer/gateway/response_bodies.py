"""Request bodies of the Responses and Conversations APIs. As for chat completions: unknown
fields are ignored, wrong types are 400s, and what the tiers cannot do (tools, images, structured
output, log probabilities, reasoning settings, background runs) is refused by name, never
dropped. Items are checked by zerolayer.conversations.items."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from zerolayer.gateway.schemas import MAX_ID_CHARS

__all__ = [
    "Metadata",
    "CreateResponseRequest",
    "CreateConversationRequest",
    "UpdateConversationRequest",
    "AddItemsRequest",
]

MAX_METADATA = 16  # the specification's limits: 16 pairs, keys of 64 and values of 512 chars
MAX_ITEMS = 20  # items per create or add call


def _metadata(v: dict[str, str] | None) -> dict[str, str] | None:
    if v is None:
        return None
    if len(v) > MAX_METADATA:
        raise ValueError(f"at most {MAX_METADATA} metadata pairs")
    for k, val in v.items():
        if len(k) > 64:
            raise ValueError(f"metadata key {k[:20]!r}... is longer than 64 characters")
        if len(val) > 512:
            raise ValueError(f"metadata value of {k!r} is longer than 512 characters")
    return v


Metadata = Annotated[
    dict[str, Annotated[str, Field(strict=True)]] | None, AfterValidator(_metadata)
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _ConversationRef(_Body):
    id: str = Field(min_length=1, description="The conversation's id")


class _TextFormat(_Body):
    type: Literal["text"] = Field(description="Only plain text output is served")


class _Text(_Body):
    format: _TextFormat | None = Field(default=None, description="The output format")
    verbosity: Any = Field(default=None, description="Accepted and ignored")


class CreateResponseRequest(_Body):
    """POST /v1/responses."""

    model: str = Field(min_length=1, description="'<model>' or '<model>:<tier>'")
    input: str | list[Any] | None = Field(
        default=None, description="A text, or a list of message items"
    )
    instructions: str | None = Field(
        default=None,
        description="A system message for this response only (not carried to follow-ups)",
    )
    previous_response_id: str | None = Field(
        default=None, description="Continue from this stored response"
    )
    conversation: str | _ConversationRef | None = Field(
        default=None,
        description="Continue this conversation: its items are read first, and this "
        "response's input and output are added to it",
    )
    store: bool = Field(default=True, strict=True, description="Keep the response (30 days)")
    truncation: Literal["auto", "disabled"] = Field(
        default="disabled",
        description="'disabled': a 400 when the history does not fit the context; 'auto': the "
        "oldest items are dropped (never the instructions)",
    )
    max_output_tokens: int | None = Field(
        default=None, ge=1, le=1_000_000, strict=True, description="Upper bound of new tokens"
    )
    temperature: float = Field(
        default=1.0, ge=0, le=2, strict=True, description="Sampling temperature"
    )
    top_p: float = Field(default=1.0, gt=0, le=1, strict=True, description="Nucleus sampling mass")
    metadata: Metadata = Field(default=None, description="Up to 16 string pairs, kept with it")
    stream: bool = Field(default=False, strict=True, description="Reply as server-sent events")
    tools: list[Any] | None = Field(default=None, description="Not served: only empty")
    tool_choice: Any = Field(default=None, description="Only 'none' or 'auto' (no tools)")
    text: _Text | None = Field(default=None, description="Only {'format': {'type': 'text'}}")
    include: list[str] | None = Field(default=None, description="Not served: only empty")
    top_logprobs: int | None = Field(default=None, description="Not served: only 0")
    reasoning: dict[str, Any] | None = Field(default=None, description="Not served: no settings")
    background: bool | None = Field(default=None, description="Not served: only false")
    user: str | None = Field(
        default=None, max_length=MAX_ID_CHARS, description="End-user id, for the customer's records"
    )
    safety_identifier: str | None = Field(
        default=None, max_length=MAX_ID_CHARS, description="Echoed back"
    )
    prompt_cache_key: str | None = Field(
        default=None, max_length=MAX_ID_CHARS, description="Echoed back"
    )

    @field_validator("tools")
    @classmethod
    def _no_tools(cls, v: list[Any] | None) -> list[Any] | None:
        if v:
            raise ValueError("tools are not served by zerolayer's tiers")
        return v

    @field_validator("tool_choice")
    @classmethod
    def _no_tool_choice(cls, v: Any) -> Any:
        if v not in (None, "none", "auto"):
            raise ValueError("tools are not served: tool_choice may only be 'none' or 'auto'")
        return v

    @field_validator("include")
    @classmethod
    def _no_include(cls, v: list[str] | None) -> list[str] | None:
        if v:
            raise ValueError(f"{v[0]!r} is not served by zerolayer's tiers (text only)")
        return v

    @field_validator("top_logprobs")
    @classmethod
    def _no_logprobs(cls, v: int | None) -> int | None:
        if v not in (None, 0):
            raise ValueError("log probabilities are not served by zerolayer's tiers")
        return v

    @field_validator("reasoning")
    @classmethod
    def _no_reasoning(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v and any(x is not None for x in v.values()):
            raise ValueError("reasoning settings are not served: the models do not reason")
        return v

    @field_validator("background")
    @classmethod
    def _no_background(cls, v: bool | None) -> bool | None:
        if v:
            raise ValueError("background responses are not served; stream instead")
        return v

    def conversation_id(self) -> str | None:
        """The conversation's id, given as a string or as {"id": ...}."""
        c = self.conversation
        return c if isinstance(c, str) or c is None else c.id


class CreateConversationRequest(_Body):
    """POST /v1/conversations."""

    items: list[Any] | None = Field(
        default=None, max_length=MAX_ITEMS, description="Up to 20 first items"
    )
    metadata: Metadata = Field(default=None, description="Up to 16 string pairs")


class UpdateConversationRequest(_Body):
    """POST /v1/conversations/{id}: new metadata (it replaces the old)."""

    metadata: Metadata = Field(description="Up to 16 string pairs")


class AddItemsRequest(_Body):
    """POST /v1/conversations/{id}/items."""

    items: list[Any] = Field(min_length=1, max_length=MAX_ITEMS, description="1 to 20 items")
