"""Streamed answers: server-sent events (chat and text completions, the Responses API) or JSON
lines (streamed chunking), as iterators of typed events.

A stream owns its HTTP response and closes it however iteration ends: read to the end, an
in-band error frame (raised as StreamError), the caller leaving a `for` loop or a `with` block,
or `close()`. What it delivered accumulates, so `get_final_response()` gives the whole object
(with its usage) and `text_stream` only the text."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

import httpx

from ._exceptions import StreamError

__all__ = ["ServerSentEvent", "SSEDecoder", "StreamKind", "Stream", "AsyncStream", "in_band_error"]

T = TypeVar("T")
F = TypeVar("F")
T_co = TypeVar("T_co", covariant=True)
F_co = TypeVar("F_co", covariant=True)


@dataclass
class ServerSentEvent:
    """One event of a text/event-stream."""

    event: str | None
    data: str
    id: str | None = None

    def json(self) -> Any:
        return json.loads(self.data)


class SSEDecoder:
    """Lines in, events out (the WHATWG event-stream rules: `field: value` lines, data lines
    joined by newlines, a blank line ends an event, `:` starts a comment)."""

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> ServerSentEvent | None:
        """The event a line completes, if it completes one."""
        if not line:
            if not self._data and self._event is None:
                return None
            ev = ServerSentEvent(self._event, "\n".join(self._data), self._id)
            self._event, self._data = None, []
            return ev
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def end(self) -> ServerSentEvent | None:
        """An event left without its blank line when the stream ended."""
        return self.feed("")


class StreamKind(Protocol[T_co, F_co]):
    """What one API's stream frames mean: each frame's typed event (None: nothing to hand
    on), the text an event carries, and the final object of what was delivered."""

    sse: bool  # server-sent events; else one JSON object per line

    def decode(self, frame: ServerSentEvent) -> T_co | None: ...

    def text(self, item: Any) -> str | None: ...

    def final(self) -> F_co: ...


def in_band_error(obj: Any) -> StreamError | None:
    """The StreamError of an error frame ({"error": {...}}), if the frame is one (the stream
    fills in its request and request id)."""
    if isinstance(obj, dict) and isinstance(obj.get("error"), dict) and len(obj) == 1:
        return StreamError(obj, None, None)
    return None


def _frames(lines: Iterable[str], sse: bool) -> Iterator[ServerSentEvent]:
    decoder = SSEDecoder()
    for line in lines:
        ev = decoder.feed(line) if sse else ServerSentEvent(None, line) if line.strip() else None
        if ev is not None:
            yield ev
    last = decoder.end() if sse else None
    if last is not None:
        yield last


async def _aframes(lines: AsyncIterator[str], sse: bool) -> AsyncIterator[ServerSentEvent]:
    decoder = SSEDecoder()
    async for line in lines:
        ev = decoder.feed(line) if sse else ServerSentEvent(None, line) if line.strip() else None
        if ev is not None:
            yield ev
    last = decoder.end() if sse else None
    if last is not None:
        yield last


class _Base(Generic[T, F]):
    def __init__(self, response: httpx.Response, kind: StreamKind[T, F]):
        self.response = response
        self._kind = kind
        self._done = False

    @property
    def request_id(self) -> str | None:
        """The platform's id of this answer (x-request-id)."""
        value: str | None = self.response.headers.get("x-request-id")
        return value

    def _item(self, frame: ServerSentEvent) -> T | None:
        if frame.data == "[DONE]":
            self._done = True
            return None
        try:
            return self._kind.decode(frame)
        except StreamError as exc:
            exc.request, exc.request_id = self.response.request, self.request_id
            raise

    def _final(self) -> F:
        return self._kind.final()


class Stream(_Base[T, F]):
    """A streamed answer, read as it arrives. Iterate it for typed events (each read once);
    leaving the loop early closes it. Use it in `with` to close it on every path."""

    def __init__(self, response: httpx.Response, kind: StreamKind[T, F]):
        super().__init__(response, kind)
        self._iterator = self._read()

    def _read(self) -> Iterator[T]:
        try:
            for frame in _frames(self.response.iter_lines(), self._kind.sse):
                item = self._item(frame)
                if self._done:
                    return
                if item is not None:
                    yield item
        finally:
            self.close()

    def __iter__(self) -> Iterator[T]:
        yield from self._iterator  # leaving the loop closes _read, which closes the response

    def __next__(self) -> T:
        return next(self._iterator)

    def __enter__(self) -> Stream[T, F]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP response (the platform sees the client leave and stops, billing
        what was delivered). Safe to call more than once."""
        self.response.close()

    @property
    def text_stream(self) -> Iterator[str]:
        """Only the text of the answer, piece by piece."""
        for item in self:
            text = self._kind.text(item)
            if text:
                yield text

    def get_final_response(self) -> F:
        """Read the rest of the stream; the whole answer as one object, with its usage."""
        for _ in self:
            pass
        return self._final()


class AsyncStream(_Base[T, F]):
    """The async twin of Stream: `async for`, `async with`, `await close()`."""

    def __init__(self, response: httpx.Response, kind: StreamKind[T, F]):
        super().__init__(response, kind)
        self._iterator = self._read()

    async def _read(self) -> AsyncIterator[T]:
        try:
            async for frame in _aframes(self.response.aiter_lines(), self._kind.sse):
                item = self._item(frame)
                if self._done:
                    return
                if item is not None:
                    yield item
        finally:
            await self.close()

    async def __aiter__(self) -> AsyncIterator[T]:
        try:
            async for item in self._iterator:
                yield item
        finally:
            await self.close()

    async def __anext__(self) -> T:
        return await self._iterator.__anext__()

    async def __aenter__(self) -> AsyncStream[T, F]:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP response. Safe to call more than once."""
        await self.response.aclose()

    @property
    async def text_stream(self) -> AsyncIterator[str]:
        """Only the text of the answer, piece by piece."""
        async for item in self:
            text = self._kind.text(item)
            if text:
                yield text

    async def get_final_response(self) -> F:
        """Read the rest of the stream; the whole answer as one object, with its usage."""
        async for _ in self:
            pass
        return self._final()
