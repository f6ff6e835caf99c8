"""Chat completions (POST /v1/chat/completions): the request, the answer and its stream chunks."""

from __future__ import annotations

from typing import Any, Literal

from .._models import BaseModel, RequestModel

__all__ = [
    "ChatCompletionMessageParam",
    "StreamOptions",
    "ChatCompletionCreateParams",
    "CompletionUsage",
    "ChatCompletionMessage",
    "ChatChoice",
    "ChatCompletion",
    "ChoiceDelta",
    "ChunkChoice",
    "ChatCompletionChunk",
]


class ChatCompletionMessageParam(RequestModel):
    """One turn of the conversation sent."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None
    name: str | None = None


class StreamOptions(RequestModel):
    """Options of a streamed answer."""

    include_usage: bool | None = None


class ChatCompletionCreateParams(RequestModel):
    """The body of a chat completion."""

    model: str
    messages: list[ChatCompletionMessageParam]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None
    long_prompt: Literal["error", "summarize"] | None = None


class CompletionUsage(BaseModel):
    """Tokens billed for one answer (map-reduce calls of a summarised prompt included)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatCompletionMessage(BaseModel):
    """The model's message."""

    role: str = "assistant"
    content: str | None = None


class ChatChoice(BaseModel):
    """The one choice of an answer."""

    index: int = 0
    message: ChatCompletionMessage
    finish_reason: str | None = None
    logprobs: Any = None


class ChatCompletion(BaseModel):
    """A whole chat answer. `model` names the tier that answered."""

    id: str
    object: str = "chat.completion"
    created: int = 0
    model: str
    choices: list[ChatChoice]
    usage: CompletionUsage | None = None

    @property
    def text(self) -> str:
        """The first choice's text."""
        return (self.choices[0].message.content or "") if self.choices else ""


class ChoiceDelta(BaseModel):
    """What a stream chunk adds to the message."""

    role: str | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    """The choice of a stream chunk."""

    index: int = 0
    delta: ChoiceDelta
    finish_reason: str | None = None
    logprobs: Any = None


class ChatCompletionChunk(BaseModel):
    """One event of a streamed chat answer (the last carries usage when asked for)."""

    id: str
    object: str = "chat.completion.chunk"
    created: int = 0
    model: str
    choices: list[ChunkChoice] = []
    usage: CompletionUsage | None = None
