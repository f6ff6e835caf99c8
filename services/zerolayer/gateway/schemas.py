"""OpenAI request bodies the gateway accepts. Unknown fields are ignored, as OpenAI's API does
for fields it does not know of newer clients; wrong types and out-of-range values are 400s.
Numbers and booleans are strict: "2" or true is not a token count. Fields the tiers cannot honour
are refused, not silently dropped."""

from __future__ import annotations

from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "RequestBody",
    "StreamOptions",
    "ResponseFormat",
    "ChatMessage",
    "ChatCompletionRequest",
    "CompletionRequest",
    "ChunksRequest",
    "CreateKeyRequest",
    "ChangePlanRequest",
    "RenameKeyRequest",
]


# the longest end-user id, safety identifier or prompt cache key kept with a request (they are
# echoed back and stored with a response: unbounded, one field could hold a whole body)
MAX_ID_CHARS = 512


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


# OpenAI's request fields the tiers do not serve: the values that ask for nothing (accepted)
# and why any other is refused (a 400 naming the field)
NOT_SERVED: dict[str, tuple[tuple[Any, ...], str]] = {
    "audio": ((None,), "audio output is not served: the models write text"),
    "modalities": ((None, ["text"]), "only text output is served"),
    "frequency_penalty": ((None, 0), "frequency and presence penalties are not served"),
    "presence_penalty": ((None, 0), "frequency and presence penalties are not served"),
    "logit_bias": ((None, {}), "logit_bias is not served"),
    "function_call": ((None,), "the deprecated functions API is not served: use tools"),
    "functions": ((None,), "the deprecated functions API is not served: use tools"),
    "metadata": ((None, {}), "chat completions are not stored, so metadata has nowhere to go"),
    "store": ((None, False), "chat completions are not stored: use the Responses API"),
    "moderation": ((None,), "moderation is not served"),
    "prediction": ((None,), "predicted outputs are not served"),
    "prompt_cache_options": ((None,), "the prefix cache is the engine's own: no options"),
    "prompt_cache_retention": (
        (None, "in_memory", "in-memory"),
        "the prefix cache is the engine's own, in memory",
    ),
    "reasoning_effort": ((None,), "the models do not reason"),
    "service_tier": ((None, "auto", "default"), "one service tier is served"),
    "verbosity": ((None, "medium"), "verbosity settings are not served"),
    "web_search_options": ((None,), "web search is not served"),
    "best_of": ((None, 1), "best_of is not served: ask for n choices"),
    "echo": ((None, False), "echo is not served"),
    "suffix": ((None, ""), "suffix (insertion) is not served"),
    "context_management": ((None,), "context management is not served: use truncation"),
    "prompt": ((None,), "stored prompt templates are not served"),
    "max_tool_calls": ((None, 1), "only max_tool_calls 1 (one call) is served"),
    "stream_options": ((None, {}, {"include_obfuscation": False}), "obfuscation is not served"),
}


_MARK: dict[str, Any] = {"x-not-served": True}


def is_not_served(model: type[BaseModel], name: str) -> bool:
    """Whether a model's field is one of NOT_SERVED (declared with not_served)."""
    return model.model_fields[name].json_schema_extra == _MARK


def not_served(name: str) -> Any:
    """A field of OpenAI's that asks for nothing here unless refused (NOT_SERVED)."""
    allowed, why = NOT_SERVED[name]
    shown = ", ".join("null" if a is None else repr(a) for a in allowed)
    return Field(default=None, description=f"Only {shown}: {why}", json_schema_extra=_MARK)


def check_not_served(name: str, value: Any) -> Any:
    """The value, when it asks for nothing; ValueError (the field's 400) otherwise."""
    allowed, why = NOT_SERVED[name]
    if not any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in allowed):
        raise ValueError(why)
    return value


class RequestBody(_Body):
    """A top-level request body: a field OpenAI's API does not define is a 400, as OpenAI
    answers; OpenAI's fields the tiers cannot honour are accepted only with the values that
    ask for nothing (NOT_SERVED)."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*")
    @classmethod
    def _served(cls, v: Any, info: Any) -> Any:
        if is_not_served(cls, info.field_name):
            return check_not_served(info.field_name, v)
        return v


class StreamOptions(_Body):
    """Options of a streamed response."""

    include_usage: bool = Field(
        default=False, strict=True, description="Send a last chunk with usage"
    )


class _TextPart(_Body):
    type: Literal["text"] = Field(description="Only text parts are served")
    text: str = Field(description="The text")


FunctionName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


class _CalledFunction(_Body):
    name: FunctionName = Field(description="The function called")
    arguments: str = Field(description="Its arguments, JSON text")


class ChatToolCall(_Body):
    """A call an assistant turn made."""

    id: str = Field(min_length=1, max_length=128, description="The call's id")
    type: Literal["function"] = Field(description="Only function calls")
    function: _CalledFunction = Field(description="The function and its arguments")


class FunctionDefinition(_Body):
    """A function the model may call."""

    name: FunctionName = Field(description="Letters, digits, _ and -, at most 64")
    description: str | None = Field(default=None, description="What it does, for the model")
    parameters: dict[str, Any] | None = Field(
        default=None, description="A JSON schema of its arguments (default: no arguments)"
    )
    strict: bool | None = Field(
        default=None, strict=True, description="Always enforced: calls follow the schema"
    )


class ChatTool(_Body):
    """One tool of a chat request."""

    type: Literal["function"] = Field(description="Only function tools are served")
    function: FunctionDefinition = Field(description="The function")


class _NamedFunction(_Body):
    name: FunctionName = Field(description="The function to call")


class NamedToolChoice(_Body):
    """Call this function."""

    type: Literal["function"] = Field(description="A function")
    function: _NamedFunction = Field(description="Which one")


class ChatMessage(_Body):
    """One chat turn."""

    role: Literal["system", "developer", "user", "assistant", "tool"] = Field(
        description="Who spoke"
    )
    content: str | list[_TextPart] | None = Field(
        default=None, description="Text, or a list of text parts"
    )
    name: str | None = Field(default=None, description="Optional speaker name")
    tool_calls: list[ChatToolCall] | None = Field(
        default=None, description="The calls an assistant turn made"
    )
    tool_call_id: str | None = Field(default=None, description="The call a tool turn answers")

    @model_validator(mode="after")
    def _content_given(self) -> ChatMessage:
        # only an assistant's turn that made tool calls may leave its content out (as OpenAI)
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content")
        return self

    def text(self) -> str:
        """The content as one string."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


MaxTokens = Annotated[int, Field(ge=1, le=1_000_000, strict=True)]
TopLogprobs = Annotated[int, Field(ge=0, le=20, strict=True)]


class JSONSchemaFormat(_Body):
    """The schema a structured answer follows."""

    name: str = Field(
        min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$", description="The schema's name"
    )
    description: str | None = Field(default=None, description="What the answer is for")
    schema_: dict[str, Any] | None = Field(
        default=None, alias="schema", description="A JSON schema (default: any object)"
    )
    strict: bool | None = Field(
        default=None,
        strict=True,
        description="Always enforced: answers are decoded under the schema's grammar",
    )


class ResponseFormat(_Body):
    """The form of the answer: free text, any JSON object, or JSON following a schema."""

    type: Literal["text", "json_object", "json_schema"] = Field(description="The answer's form")
    json_schema: JSONSchemaFormat | None = Field(
        default=None, description="The schema (with type json_schema)"
    )

    @field_validator("json_schema")
    @classmethod
    def _schema_given(cls, v: JSONSchemaFormat | None, info: Any) -> JSONSchemaFormat | None:
        if v is not None and info.data.get("type") != "json_schema":
            raise ValueError("json_schema is only read with type 'json_schema'")
        return v

    @model_validator(mode="after")
    def _schema_needed(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type 'json_schema' needs a json_schema")
        return self


class _Sampling(RequestBody):
    model: str = Field(min_length=1, description="'<model>' or '<model>:<tier>'")
    max_tokens: MaxTokens | None = Field(default=None, description="Upper bound of new tokens")
    temperature: float = Field(
        default=1.0, ge=0, le=2, strict=True, description="Sampling temperature"
    )
    top_p: float = Field(default=1.0, gt=0, le=1, strict=True, description="Nucleus sampling mass")
    n: int = Field(
        default=1,
        ge=1,
        le=8,
        strict=True,
        description="Choices (1-8): one answer each, the prompt billed once",
    )
    seed: int | None = Field(
        default=None,
        ge=-(2**63),
        le=2**63 - 1,
        strict=True,
        description="Sampling seed (a signed 64-bit integer)",
    )
    stop: str | list[str] | None = Field(default=None, description="Up to 4 stop strings")
    stream: bool = Field(default=False, strict=True, description="Reply as server-sent events")
    stream_options: StreamOptions | None = Field(default=None, description="Streaming options")
    user: str | None = Field(
        default=None, max_length=MAX_ID_CHARS, description="End-user id, for the customer's records"
    )
    frequency_penalty: Any = not_served("frequency_penalty")
    presence_penalty: Any = not_served("presence_penalty")
    logit_bias: Any = not_served("logit_bias")

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None) -> list[str] | None:
        if v is None:
            return None
        stops = [v] if isinstance(v, str) else v
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences")
        if any(not s for s in stops):
            raise ValueError("stop sequences must not be empty")
        return stops

    def sampling(self) -> dict[str, Any]:
        """The engine-neutral part of the request."""
        return {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "stop": self.stop,
        }

    def include_usage(self) -> bool:
        """Whether a streamed reply ends with a usage chunk."""
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1, description="The conversation so far")
    max_completion_tokens: MaxTokens | None = Field(
        default=None, description="Newer name of max_tokens"
    )
    long_prompt: Literal["error", "summarize"] = Field(
        default="error",
        description="A prompt over the tier's context: 'error' (400 stating both numbers) or "
        "'summarize' (the longest message is summarised chunk by chunk, then as a whole)",
    )
    logprobs: bool | None = Field(
        default=None, strict=True, description="Return each output token's log-probability"
    )
    top_logprobs: TopLogprobs | None = Field(
        default=None, description="With logprobs: the most likely tokens at each position (0-20)"
    )
    response_format: ResponseFormat | None = Field(
        default=None, description="Free text, any JSON object, or JSON following a schema"
    )
    tools: list[ChatTool] | None = Field(
        default=None, max_length=128, description="Functions the model may call"
    )
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        default=None,
        description="none, auto (default with tools), required, or a named function",
    )
    parallel_tool_calls: bool = Field(
        default=True, strict=True, description="Whether the model may make several calls at once"
    )
    safety_identifier: str | None = Field(
        default=None, max_length=MAX_ID_CHARS, description="End-user id, for the customer's records"
    )
    prompt_cache_key: str | None = Field(
        default=None,
        max_length=MAX_ID_CHARS,
        description="Accepted: the tiers' prefix caches need no key",
    )
    audio: Any = not_served("audio")
    modalities: Any = not_served("modalities")
    function_call: Any = not_served("function_call")
    functions: Any = not_served("functions")
    metadata: Any = not_served("metadata")
    store: Any = not_served("store")
    moderation: Any = not_served("moderation")
    prediction: Any = not_served("prediction")
    prompt_cache_options: Any = not_served("prompt_cache_options")
    prompt_cache_retention: Any = not_served("prompt_cache_retention")
    reasoning_effort: Any = not_served("reasoning_effort")
    service_tier: Any = not_served("service_tier")
    verbosity: Any = not_served("verbosity")
    web_search_options: Any = not_served("web_search_options")

    @field_validator("top_logprobs")
    @classmethod
    def _top_needs_logprobs(cls, v: int | None, info: Any) -> int | None:
        if v is not None and not info.data.get("logprobs"):
            raise ValueError("top_logprobs needs logprobs set to true")
        return v

    def logprobs_k(self) -> int | None:
        """None: no logprobs; k: each token's and its k most likely alternatives'."""
        return (self.top_logprobs or 0) if self.logprobs else None

    def sampling(self) -> dict[str, Any]:
        out = super().sampling()
        if out["max_tokens"] is None:
            out["max_tokens"] = self.max_completion_tokens
        return out


class CompletionRequest(_Sampling):
    """POST /v1/completions."""

    prompt: str | list[int] | list[str] = Field(
        description="Text, token ids, or one text in a list"
    )
    logprobs: TopLogprobs | None = Field(
        default=None,
        description="Each output token's log-probability and this many most likely (0-20)",
    )
    best_of: Any = not_served("best_of")
    echo: Any = not_served("echo")
    suffix: Any = not_served("suffix")

    def logprobs_k(self) -> int | None:
        """None: no logprobs; k: each token's and its k most likely alternatives'."""
        return self.logprobs

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: str | list[int] | list[str]) -> str | list[int]:
        if isinstance(v, list) and v and isinstance(v[0], str):
            if len(v) != 1:
                raise ValueError("only one prompt per request is served")
            v = v[0]
        if isinstance(v, list) and not v:
            raise ValueError("prompt must not be empty")
        return cast("str | list[int]", v)  # a list of texts became its one text above

    def one_prompt(self) -> str | list[int]:
        """The prompt as validated: one text, or token ids."""
        return cast("str | list[int]", self.prompt)


class ChunksRequest(_Body):
    """POST /v1/chunks (JSON): token-exact chunks of one or more texts."""

    model: str = Field(min_length=1, description="Whose tokenizer counts: '<model>[:<tier>]'")
    input: str | list[str] = Field(description="A text, or a list of texts")
    chunk_tokens: int | None = Field(
        default=None,
        ge=8,
        le=32768,
        strict=True,
        description="Tokens per chunk (default: the platform's)",
    )
    overlap_tokens: int | None = Field(
        default=None,
        ge=0,
        le=32767,
        strict=True,
        description="Tokens repeated at the start of the next chunk",
    )

    @field_validator("input")
    @classmethod
    def _some_input(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list) and not v:
            raise ValueError("input must not be an empty list")
        return v

    def texts(self) -> list[str]:
        """The inputs as a list."""
        return [self.input] if isinstance(self.input, str) else list(self.input)


class CreateKeyRequest(_Body):
    """POST /admin/keys."""

    plan: str = Field(min_length=1, description="Plan of the new key")
    name: str = Field(default="", max_length=200, description="A label for the key")
    tenant: str | None = Field(
        default=None,
        min_length=1,
        description="An existing tenant the key belongs to (it sees the tenant's stored "
        "responses and conversations); default: a new tenant",
    )


class ChangePlanRequest(_Body):
    """PATCH /admin/keys/{key_id}: a new plan, label, traffic sampling, or any of them."""

    plan: str | None = Field(default=None, min_length=1, description="The key's new plan")
    name: str | None = Field(default=None, max_length=200, description="A new label")
    sample_traffic: bool | None = Field(
        default=None,
        description="true: keep a sample of this key's prompts for recalibration; false: keep "
        "none and delete what was kept; null: follow the plan (what it kept stays)",
    )


class RenameKeyRequest(BaseModel):
    """PATCH /v1/keys/{key_id}: a new label (plans change through the operator)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=200, description="The key's new label")
