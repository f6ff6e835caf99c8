"""client.chat.completions: chat completions, whole or streamed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from .._base_client import Call
from .._kinds import ChatKind
from .._resource import AsyncAPIResource, SyncAPIResource, args
from .._streaming import AsyncStream, Stream
from ..types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionCreateParams,
    ChatCompletionMessageParam,
)
from .completions import completion_call

__all__ = [
    "ChatCompletionStream",
    "AsyncChatCompletionStream",
    "Chat",
    "AsyncChat",
    "Completions",
    "AsyncCompletions",
]

ChatCompletionStream = Stream[ChatCompletionChunk, ChatCompletion]
AsyncChatCompletionStream = AsyncStream[ChatCompletionChunk, ChatCompletion]
Messages = Sequence[Mapping[str, Any] | ChatCompletionMessageParam]


def _create(**kw: Any) -> Call:
    return completion_call(
        "/chat/completions", ChatCompletionCreateParams, ChatCompletion, ChatKind, kw
    )


class Completions(SyncAPIResource):
    """Chat completions."""

    def create(
        self,
        *,
        model: str,
        messages: Messages,
        max_tokens: int | None = None,
        max_completion_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: str | list[str] | None = None,
        stream: bool = False,
        stream_options: Mapping[str, Any] | None = None,
        user: str | None = None,
        long_prompt: Literal["error", "summarize"] | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> ChatCompletion | ChatCompletionStream:
        """Answer a conversation. `model` is `<model>` (the plan's default tier) or
        `<model>:<tier>`. With stream=True: a ChatCompletionStream of chunks (usage included
        unless stream_options says otherwise). long_prompt="summarize" has a prompt over the
        context summarised first instead of refused."""
        return cast("ChatCompletion | ChatCompletionStream", self._send(_create(**args(locals()))))


class AsyncCompletions(AsyncAPIResource):
    """Chat completions (async)."""

    async def create(
        self,
        *,
        model: str,
        messages: Messages,
        max_tokens: int | None = None,
        max_completion_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: str | list[str] | None = None,
        stream: bool = False,
        stream_options: Mapping[str, Any] | None = None,
        user: str | None = None,
        long_prompt: Literal["error", "summarize"] | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> ChatCompletion | AsyncChatCompletionStream:
        """Answer a conversation (see Completions.create)."""
        return cast(
            "ChatCompletion | AsyncChatCompletionStream",
            await self._send(_create(**args(locals()))),
        )


class Chat(SyncAPIResource):
    """client.chat"""

    def __init__(self, client: Any):
        super().__init__(client)
        self.completions = Completions(client)


class AsyncChat(AsyncAPIResource):
    """client.chat (async)"""

    def __init__(self, client: Any):
        super().__init__(client)
        self.completions = AsyncCompletions(client)
