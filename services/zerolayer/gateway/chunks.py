"""Token-exact chunks for clients (RAG ingestion), the work behind POST /v1/chunks (its route,
zerolayer.gateway.routes.chunks, turns these values into JSON or JSON lines; the pipeline,
zerolayer.gateway.pipeline, meters them).

A JSON body ({"model", "input", "chunk_tokens", "overlap_tokens"}) gets all chunks at once. A
plain-text body (Content-Type text/plain, options in the query string) may be streamed: the
gateway buffers it, has the chunker cut every chunk that is complete, and answers with one JSON
line per chunk as soon as it is (application/x-ndjson), then a last line
{"object": "chunks.done", ...}. Errors after the first line arrive in-band as {"error": {...}}.

Chunking is free, but not unlimited: a request counts as one request of the key's minute and
holds a concurrency slot, and the tokens it cuts count against the key's tokens per minute (a
JSON body reserves its UTF-8 size, an upper bound of its tokens, and settles to the tokens cut).
All inputs of a JSON body go to the chunker in one call. A streamed body is capped at
`chunker.max_stream_bytes`, and the chunker is asked again only once the new text is at least as
long as what it was last handed back, so no text is sent to it more than about twice.
"""

from __future__ import annotations

import codecs
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass

from zerolayer.config import ChunkerConfig
from zerolayer.errors import APIError, InvalidRequest, PayloadTooLarge
from zerolayer.gateway.meter import status_of
from zerolayer.gateway.parts import Backend, chunked
from zerolayer.protocol import Chunk, ChunkOptions

__all__ = ["Cut", "CutDone", "cut_options", "once", "request_id", "streamed"]

_FEED_CHARS = 4096  # ask the chunker again once this much new text is buffered


@dataclass(frozen=True)
class Cut:
    """One chunk of a streamed text: its index, and where the text it was cut from starts."""

    index: int
    base: int
    chunk: Chunk


@dataclass(frozen=True)
class CutDone:
    """The end of a streamed text: how many chunks, tokens and characters it made."""

    chunks: int
    tokens: int
    chars: int


def cut_options(options: dict[str, int], final: bool = True) -> ChunkOptions:
    """The chunk options of a streamed text (sizes not given: the chunker's own)."""
    return ChunkOptions(options.get("chunk_tokens"), options.get("overlap_tokens"), final)


def once(step: Callable[[int, str], None]) -> Callable[[int, str], None]:
    """step, run on the first call only."""
    done = False

    def run(tokens: int, status: str) -> None:
        nonlocal done
        if not done:
            done = True
            step(tokens, status)

    return run


def request_id() -> str:
    """A fresh id for a chunking request (its concurrency lease)."""
    return "chunks-" + uuid.uuid4().hex


async def streamed(
    backend: Backend,
    config: ChunkerConfig,
    model: str,
    pieces: AsyncIterator[bytes],
    options: dict[str, int],
    settle: Callable[[int, str], None],
) -> AsyncGenerator[Cut | CutDone, None]:
    """The chunks of a text that arrives in pieces, each as soon as it is complete, then
    CutDone; settle(tokens, status) once however it ends (an APIError is raised after the
    chunks sent so far)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    buffer, base, fed, index, total, received = "", 0, 0, 0, 0, 0
    status = "client_disconnect"  # unless it ends

    def cuts(chunks: list[Chunk]) -> list[Cut]:
        nonlocal index, total
        out = []
        for c in chunks:
            out.append(Cut(index, base, c))
            index += 1
            total += c.tokens
        if index > config.max_chunks:
            raise PayloadTooLarge(f"the input makes more than {config.max_chunks} chunks")
        return out

    try:
        try:
            async for piece in pieces:
                received += len(piece)
                if received > config.max_stream_bytes:
                    raise PayloadTooLarge(
                        f"the streamed text is larger than {config.max_stream_bytes} bytes"
                    )
                buffer += decoder.decode(piece)
                if len(buffer) - fed < max(_FEED_CHARS, fed):
                    continue  # the chunker is asked again once the new text is as long as the rest
                ev = await chunked(backend, model, buffer, cut_options(options, final=False))
                for cut in cuts(ev.chunks):
                    yield cut
                base += ev.rest
                buffer = buffer[ev.rest :]
                fed = len(buffer)
            buffer += decoder.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise InvalidRequest(f"the request body is not valid UTF-8 ({exc.reason})") from exc
        ev = await chunked(backend, model, buffer, cut_options(options))
        for cut in cuts(ev.chunks):
            yield cut
        status = "ok"
        yield CutDone(index, total, base + len(buffer))
    except APIError as exc:
        status = status_of(exc)
        raise
    finally:
        settle(total, status)
