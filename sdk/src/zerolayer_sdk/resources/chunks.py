"""client.chunks: token-exact chunks by the model's own tokenizer, of texts given at once (JSON)
or of a file or an iterator of text, streamed up as it is read and answered chunk by chunk."""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, cast

from .._base_client import Call, json_as
from .._kinds import ChunkKind
from .._models import body_of
from .._resource import AsyncAPIResource, SyncAPIResource
from .._streaming import AsyncStream, Stream
from ..types.chunks import Chunk, ChunkList, ChunksCreateParams

__all__ = ["ChunkStream", "AsyncChunkStream", "Chunks", "AsyncChunks"]

ChunkStream = Stream[Chunk, ChunkList]
AsyncChunkStream = AsyncStream[Chunk, ChunkList]
FileInput = str | os.PathLike[str] | IO[bytes] | IO[str]
PIECE = 64 * 1024


def _pieces(file: FileInput | None, text: Any) -> tuple[Callable[[], Iterator[bytes]], bool]:
    """The body's pieces, made anew for each attempt, and whether it can be sent again (a path
    or a seekable file can; an iterator cannot)."""
    if file is None:
        source = iter(text)

        def texts() -> Iterator[bytes]:
            for piece in source:
                yield piece.encode("utf-8")

        return texts, False
    if isinstance(file, (str, os.PathLike)):
        path = Path(file)

        def from_path() -> Iterator[bytes]:
            with path.open("rb") as f:
                while piece := f.read(PIECE):
                    yield piece

        return from_path, True
    handle = file
    start = handle.tell() if handle.seekable() else None

    def from_handle() -> Iterator[bytes]:
        if start is not None:
            handle.seek(start)
        while piece := handle.read(PIECE):
            yield piece.encode("utf-8") if isinstance(piece, str) else piece

    return from_handle, start is not None


def _apieces(make: Callable[[], Iterator[bytes]]) -> Callable[[], AsyncIterator[bytes]]:
    async def pieces() -> AsyncIterator[bytes]:
        for piece in make():
            yield piece

    return pieces


def _atexts(text: AsyncIterable[str]) -> Callable[[], AsyncIterator[bytes]]:
    async def pieces() -> AsyncIterator[bytes]:
        async for piece in text:
            yield piece.encode("utf-8")

    return pieces


def _json(
    model: str, input: str | list[str], chunk_tokens: int | None, overlap: int | None
) -> Call:
    body = body_of(
        ChunksCreateParams,
        model=model,
        input=input,
        chunk_tokens=chunk_tokens,
        overlap_tokens=overlap,
    )
    return Call("POST", "/chunks", parse=json_as(ChunkList), json=body)


def _streamed(
    model: str,
    content: Callable[[], Any],
    replayable: bool,
    chunk_tokens: int | None,
    overlap: int | None,
) -> Call:
    # no Idempotency-Key: the gateway would buffer the body to compare it, and answer only
    # once it all arrived (chunking is free: a repeat costs no money)
    return Call(
        "POST",
        "/chunks",
        stream=lambda: ChunkKind(model),
        params={"model": model, "chunk_tokens": chunk_tokens, "overlap_tokens": overlap},
        content=content,
        content_type="text/plain; charset=utf-8",
        accept="application/x-ndjson",
        replayable=replayable,
        idempotent_key=False,
    )


def _one_source(input: Any, file: Any, text: Any) -> None:
    if sum(x is not None for x in (input, file, text)) != 1:
        raise TypeError(
            "give exactly one of input (texts), file (a path or file) or text (an iterator)"
        )


class Chunks(SyncAPIResource):
    """POST /v1/chunks."""

    def create(
        self,
        *,
        model: str,
        input: str | list[str] | None = None,
        file: FileInput | None = None,
        text: Iterable[str] | None = None,
        chunk_tokens: int | None = None,
        overlap_tokens: int | None = None,
    ) -> ChunkList:
        """Every chunk of `input` (a text or a list of texts), of `file` (a path or an open
        file) or of `text` (an iterator of text pieces); the last two are streamed up."""
        _one_source(input, file, text)
        if input is not None:
            return cast("ChunkList", self._send(_json(model, input, chunk_tokens, overlap_tokens)))
        got = self.stream(
            model=model,
            file=file,
            text=text,
            chunk_tokens=chunk_tokens,
            overlap_tokens=overlap_tokens,
        )
        return got.get_final_response() if isinstance(got, Stream) else got

    def stream(
        self,
        *,
        model: str,
        file: FileInput | None = None,
        text: Iterable[str] | None = None,
        chunk_tokens: int | None = None,
        overlap_tokens: int | None = None,
    ) -> ChunkStream:
        """Chunks of a file or an iterator of text, each as soon as the platform has cut it.
        An iterator is read once, so such a call is not retried."""
        _one_source(None, file, text)
        pieces, replayable = _pieces(file, text)
        return cast(
            "ChunkStream",
            self._send(_streamed(model, pieces, replayable, chunk_tokens, overlap_tokens)),
        )


class AsyncChunks(AsyncAPIResource):
    """POST /v1/chunks (async)."""

    async def create(
        self,
        *,
        model: str,
        input: str | list[str] | None = None,
        file: FileInput | None = None,
        text: Iterable[str] | AsyncIterable[str] | None = None,
        chunk_tokens: int | None = None,
        overlap_tokens: int | None = None,
    ) -> ChunkList:
        """Every chunk (see Chunks.create)."""
        _one_source(input, file, text)
        if input is not None:
            return cast(
                "ChunkList", await self._send(_json(model, input, chunk_tokens, overlap_tokens))
            )
        got = await self.stream(
            model=model,
            file=file,
            text=text,
            chunk_tokens=chunk_tokens,
            overlap_tokens=overlap_tokens,
        )
        return await got.get_final_response() if isinstance(got, AsyncStream) else got

    async def stream(
        self,
        *,
        model: str,
        file: FileInput | None = None,
        text: Iterable[str] | AsyncIterable[str] | None = None,
        chunk_tokens: int | None = None,
        overlap_tokens: int | None = None,
    ) -> AsyncChunkStream:
        """Chunks as they are cut (see Chunks.stream)."""
        _one_source(None, file, text)
        if isinstance(text, AsyncIterable):
            content, replayable = _atexts(text), False
        else:
            pieces, replayable = _pieces(file, text)
            content = _apieces(pieces)
        call = _streamed(model, content, replayable, chunk_tokens, overlap_tokens)
        return cast("AsyncChunkStream", await self._send(call))
