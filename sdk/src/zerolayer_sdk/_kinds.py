"""What each API's stream frames mean (the StreamKind of chat and text completions, the
Responses API and streamed chunking): the typed event of each frame, the text it carries, and
the whole answer they add up to."""

from __future__ import annotations

import json
from typing import Any

from ._exceptions import APIError, StreamError
from ._streaming import ServerSentEvent, in_band_error
from .types.chat import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessage,
    CompletionUsage,
)
from .types.chunks import Chunk, ChunkList, ChunksDone, ChunkUsage
from .types.completion import Completion, CompletionChoice
from .types.responses import (
    EVENT_TYPES,
    Response,
    ResponseErrorEvent,
    ResponseLifecycleEvent,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
)

__all__ = ["ChatKind", "CompletionKind", "ResponseKind", "ChunkKind"]


def _object(frame: ServerSentEvent) -> Any:
    try:
        return json.loads(frame.data)
    except json.JSONDecodeError as exc:
        raise APIError(f"a stream frame is not JSON: {frame.data[:80]!r}", None) from exc


class _Completions:
    """Chat and text completion chunks: text pieces, the finish reason, and the usage chunk."""

    sse = True

    def __init__(self) -> None:
        self.first: dict[str, Any] = {}
        self.parts: list[str] = []
        self.finish: str | None = None
        self.usage: CompletionUsage | None = None

    def _chunk(self, obj: Any) -> Any:
        raise NotImplementedError

    def decode(self, frame: ServerSentEvent) -> Any:
        obj = _object(frame)
        err = in_band_error(obj)
        if err is not None:
            err.partial = self.final()
            raise err
        chunk = self._chunk(obj)
        if not self.first:
            self.first = {"id": chunk.id, "created": chunk.created, "model": chunk.model}
        piece = self.text(chunk)
        if piece:
            self.parts.append(piece)
        for choice in chunk.choices:
            self.finish = choice.finish_reason or self.finish
        self.usage = chunk.usage or self.usage
        return chunk

    def text(self, item: Any) -> str | None:
        raise NotImplementedError

    def final(self) -> Any:
        """The whole answer the frames so far add up to (each kind's own type)."""
        raise NotImplementedError


class ChatKind(_Completions):
    """A streamed chat completion: ChatCompletionChunk events, a ChatCompletion in the end."""

    def _chunk(self, obj: Any) -> ChatCompletionChunk:
        return ChatCompletionChunk.model_validate(obj)

    def text(self, item: Any) -> str | None:
        return "".join(c.delta.content or "" for c in item.choices) or None

    def final(self) -> ChatCompletion:
        message = ChatCompletionMessage(role="assistant", content="".join(self.parts))
        choice = ChatChoice(index=0, message=message, finish_reason=self.finish)
        return ChatCompletion(
            id=self.first.get("id", ""),
            created=self.first.get("created", 0),
            model=self.first.get("model", ""),
            choices=[choice],
            usage=self.usage,
        )


class CompletionKind(_Completions):
    """A streamed text completion: Completion chunks, one Completion in the end."""

    def _chunk(self, obj: Any) -> Completion:
        return Completion.model_validate(obj)

    def text(self, item: Any) -> str | None:
        return "".join(c.text for c in item.choices) or None

    def final(self) -> Completion:
        choice = CompletionChoice(index=0, text="".join(self.parts), finish_reason=self.finish)
        return Completion(
            id=self.first.get("id", ""),
            created=self.first.get("created", 0),
            model=self.first.get("model", ""),
            choices=[choice],
            usage=self.usage,
        )


class ResponseKind:
    """A streamed response: typed events (response.created ... response.completed); the last
    one's Response in the end. response.failed and error events raise StreamError."""

    sse = True

    def __init__(self) -> None:
        self.response: Response | None = None

    def decode(self, frame: ServerSentEvent) -> ResponseStreamEvent:
        obj = _object(frame)
        err = in_band_error(obj)
        if err is not None:
            err.partial = self.response
            raise err
        kind = obj.get("type") if isinstance(obj, dict) else None
        event = EVENT_TYPES.get(str(kind), ResponseStreamEvent).model_validate(obj)
        if isinstance(event, ResponseLifecycleEvent):
            self.response = event.response
        if event.type == "response.failed" and self.response is not None:
            error = self.response.error
            body = {"error": error.to_dict() if error else {"message": "the response failed"}}
            failed = StreamError(body, None, None)
            failed.partial = self.response
            raise failed
        if isinstance(event, ResponseErrorEvent):
            raise StreamError({"error": event.to_dict()}, None, None)
        return event

    def text(self, item: Any) -> str | None:
        return item.delta if isinstance(item, ResponseTextDeltaEvent) else None

    def final(self) -> Response:
        r = self.response
        if r is None or r.status not in ("completed", "incomplete", "failed"):
            raise APIError("the response stream ended before its final event", None)
        return r


class ChunkKind:
    """Streamed chunking: a Chunk per JSON line as soon as it is cut; a ChunkList in the end
    (its last line, chunks.done, says how many)."""

    sse = False

    def __init__(self, model: str) -> None:
        self.model = model
        self.chunks: list[Chunk] = []
        self.done: ChunksDone | None = None

    def decode(self, frame: ServerSentEvent) -> Chunk | None:
        obj = _object(frame)
        err = in_band_error(obj)
        if err is not None:
            err.partial = ChunkList(model=self.model, data=list(self.chunks))
            raise err
        if isinstance(obj, dict) and obj.get("object") == "chunks.done":
            self.done = ChunksDone.model_validate(obj)
            return None
        chunk = Chunk.model_validate(obj)
        self.chunks.append(chunk)
        return chunk

    def text(self, item: Any) -> str | None:
        return item.text if isinstance(item, Chunk) else None

    def final(self) -> ChunkList:
        if self.done is None:
            raise APIError("the chunk stream ended before its last line", None)
        usage = ChunkUsage(prompt_tokens=self.done.tokens, total_tokens=self.done.tokens)
        return ChunkList(model=self.model, data=list(self.chunks), usage=usage)
