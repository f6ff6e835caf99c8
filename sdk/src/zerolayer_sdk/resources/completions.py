"""client.completions: text completions, whole or streamed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from .._base_client import Call, json_as
from .._kinds import CompletionKind
from .._models import BaseModel, RequestModel, body_of
from .._resource import AsyncAPIResource, SyncAPIResource, args
from .._streaming import AsyncStream, Stream, StreamKind
from ..types.completion import Completion, CompletionCreateParams

__all__ = [
    "CompletionStream",
    "AsyncCompletionStream",
    "Completions",
    "AsyncCompletions",
    "completion_call",
]

CompletionStream = Stream[Completion, Completion]
AsyncCompletionStream = AsyncStream[Completion, Completion]


def completion_call(
    path: str,
    params: type[RequestModel],
    answer: type[BaseModel],
    kind: Callable[[], StreamKind[Any, Any]],
    kw: dict[str, Any],
) -> Call:
    """A chat or text completion: whole, or streamed with its usage chunk asked for (so that
    get_final_response() has the usage) unless the caller set stream_options."""
    stream = bool(kw.get("stream"))
    if stream and kw.get("stream_options") is None:
        kw["stream_options"] = {"include_usage": True}
    return Call(
        "POST",
        path,
        parse=json_as(answer),
        stream=kind if stream else None,
        json=body_of(params, **kw),
    )


def _create(**kw: Any) -> Call:
    return completion_call("/completions", CompletionCreateParams, Completion, CompletionKind, kw)


class Completions(SyncAPIResource):
    """Text completions."""

    def create(
        self,
        *,
        model: str,
        prompt: str | list[int],
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: str | list[str] | None = None,
        stream: bool = False,
        stream_options: Mapping[str, Any] | None = None,
        user: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> Completion | CompletionStream:
        """Continue a text (or a list of token ids); stream=True gives a CompletionStream."""
        return cast("Completion | CompletionStream", self._send(_create(**args(locals()))))


class AsyncCompletions(AsyncAPIResource):
    """Text completions (async)."""

    async def create(
        self,
        *,
        model: str,
        prompt: str | list[int],
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        stop: str | list[str] | None = None,
        stream: bool = False,
        stream_options: Mapping[str, Any] | None = None,
        user: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> Completion | AsyncCompletionStream:
        """Continue a text (see Completions.create)."""
        return cast(
            "Completion | AsyncCompletionStream", await self._send(_create(**args(locals())))
        )
