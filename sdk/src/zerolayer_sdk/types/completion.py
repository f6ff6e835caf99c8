"""Text completions (POST /v1/completions)."""

from __future__ import annotations

from typing import Any

from .._models import BaseModel, RequestModel
from .chat import CompletionUsage, StreamOptions

__all__ = ["CompletionCreateParams", "CompletionChoice", "Completion"]


class CompletionCreateParams(RequestModel):
    """The body of a text completion."""

    model: str
    prompt: str | list[int] | list[str]
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None


class CompletionChoice(BaseModel):
    """The one choice of a completion (or of a stream chunk)."""

    index: int = 0
    text: str = ""
    finish_reason: str | None = None
    logprobs: Any = None


class Completion(BaseModel):
    """A text completion, whole or one chunk of a stream."""

    id: str
    object: str = "text_completion"
    created: int = 0
    model: str
    choices: list[CompletionChoice] = []
    usage: CompletionUsage | None = None

    @property
    def text(self) -> str:
        """The first choice's text."""
        return self.choices[0].text if self.choices else ""
