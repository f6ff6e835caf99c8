"""Request bodies of the Responses and Conversations APIs. As for chat completions: unknown
fields are ignored, wrong types are 400s, and what the tiers cannot do (tools, images, reasoning
settings, background runs) is refused by name, never dropped. Items are checked by
zerolayer.conversations.items."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from zerolayer.gateway.schemas import (
    MAX_ID_CHARS,
    NOT_SERVED,
    FunctionDefinition,
    FunctionName,
    JSONSchemaFormat,
    RequestBody,
    ResponseFormat,
    TopLogprobs,
    check_not_served,
    not_served,
)

__all__ = [
    "Metadata",
    "CreateResponseRequest",
    "CompactRequest",
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


LOGPROBS_INCLUDE = "message.output_text.logprobs"


class _TextFormat(JSONSchemaFormat):
    """text.format: as chat's response_format, with the schema's fields beside the type."""

    type: Literal["text", "json_object", "json_schema"] = Field(description="The output's form")
    # optional here (the JSON schema format's is required): a text format has no name, and
    # response_format() refuses a json_schema without one
    name: str | None = Field(  # type: ignore[assignment]
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="The schema's name (with type json_schema)",
    )

    def response_format(self) -> ResponseFormat:
        """The same format in chat's shape."""
        if self.type != "json_schema":
            return ResponseFormat(type=self.type)
        if self.name is None:
            raise ValueError("text.format of type 'json_schema' needs a name")
        spec = JSONSchemaFormat.model_validate(
            {"name": self.name, "schema": self.schema_, "strict": self.strict}
        )
        return ResponseFormat(type="json_schema", json_schema=spec)

    def shown(self) -> dict[str, Any]:
        """The format as the response object repeats it."""
        if self.type != "json_schema":
            return {"type": self.type}
        return {
            "type": "json_schema",
            "name": self.name,
            "description": self.description,
            "schema": self.schema_,
            "strict": self.strict,
        }


class _FunctionType(_Body):
    type: Literal["function"] = Field(description="Only function tools are served")


class ResponseTool(FunctionDefinition, _FunctionType):
    """A function the model may call (the Responses API's flat shape: the function's fields
    beside its type, which is read first)."""

    def shown(self) -> dict[str, Any]:
        """The tool as the response object repeats it."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "strict": self.strict,
        }


class NamedFunction(_Body):
    """tool_choice: call this function."""

    type: Literal["function"] = Field(description="A function")
    name: FunctionName = Field(description="Which one")


class _Text(_Body):
    format: _TextFormat | None = Field(default=None, description="The output format")
    verbosity: Any = Field(default=None, description="Accepted and ignored")

    @field_validator("format")
    @classmethod
    def _whole(cls, v: _TextFormat | None) -> _TextFormat | None:
        if v is not None:
            v.response_format()  # a json_schema without its name is refused here
        return v


class CreateResponseRequest(_Body):
    """POST /v1/responses. A field the Open Responses specification does not define is a 400;
    its fields the tiers cannot honour are accepted only with the values that ask for
    nothing."""

    model_config = ConfigDict(extra="forbid")

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
    tools: list[ResponseTool] | None = Field(
        default=None, max_length=128, description="Functions the model may call"
    )
    tool_choice: Literal["none", "auto", "required"] | NamedFunction | None = Field(
        default=None,
        description="none, auto (default with tools), required, or a named function",
    )
    parallel_tool_calls: bool = Field(
        default=True, strict=True, description="Whether the model may make several calls at once"
    )
    text: _Text | None = Field(
        default=None, description="The output's format: text, any JSON object, or a JSON schema"
    )
    include: list[str] | None = Field(
        default=None, description=f"Only {LOGPROBS_INCLUDE!r}: the output's log-probabilities"
    )
    top_logprobs: TopLogprobs | None = Field(
        default=None, description="The most likely tokens at each output position (0-20)"
    )
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
    context_management: Any = not_served("context_management")
    max_tool_calls: Any = not_served("max_tool_calls")
    moderation: Any = not_served("moderation")
    prompt: Any = not_served("prompt")
    prompt_cache_options: Any = not_served("prompt_cache_options")
    prompt_cache_retention: Any = not_served("prompt_cache_retention")
    service_tier: Any = not_served("service_tier")
    stream_options: Any = not_served("stream_options")

    @field_validator(
        "context_management",
        "max_tool_calls",
        "moderation",
        "prompt",
        "prompt_cache_options",
        "prompt_cache_retention",
        "service_tier",
        "stream_options",
    )
    @classmethod
    def _served(cls, v: Any, info: Any) -> Any:
        assert info.field_name in NOT_SERVED
        return check_not_served(info.field_name, v)

    @field_validator("include")
    @classmethod
    def _only_logprobs(cls, v: list[str] | None) -> list[str] | None:
        for what in v or []:
            if what != LOGPROBS_INCLUDE:
                raise ValueError(f"{what!r} is not served by zerolayer's tiers (text only)")
        return v

    def logprobs_k(self) -> int | None:
        """None: no logprobs; k: each output token's and its k most likely alternatives'
        (asked for by include or by top_logprobs above 0)."""
        if LOGPROBS_INCLUDE in (self.include or []) or self.top_logprobs:
            return self.top_logprobs or 0
        return None

    def choice_shown(self) -> Any:
        """tool_choice as the response object repeats it."""
        c = self.tool_choice
        if c is None:
            return "auto"
        return c if isinstance(c, str) else {"type": "function", "name": c.name}

    def format(self) -> _TextFormat | None:
        """The output's format, when one is given."""
        return self.text.format if self.text is not None else None

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


class CompactRequest(RequestBody):
    """POST /v1/responses/compact: the items to compact (an input, the history of a stored
    response, or both). A field the specification does not define is a 400."""

    model: str = Field(min_length=1, description="'<model>' or '<model>:<tier>' that summarises")
    input: str | list[Any] | None = Field(
        default=None, description="A text, or a list of items (after the previous response's)"
    )
    instructions: str | None = Field(
        default=None, description="A system message the summary is written under"
    )
    previous_response_id: str | None = Field(
        default=None, description="Compact this stored response's history too"
    )
    prompt_cache_key: str | None = Field(
        default=None, max_length=MAX_ID_CHARS, description="Accepted (the cache is automatic)"
    )
    prompt_cache_options: Any = not_served("prompt_cache_options")
    prompt_cache_retention: Any = not_served("prompt_cache_retention")
    service_tier: Any = not_served("service_tier")
    store: ClassVar[bool] = False  # a compaction stores nothing (not a field of the body)

    def conversation_id(self) -> None:
        """A compaction is on no conversation (its items are given, or a response's)."""
        return None


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
