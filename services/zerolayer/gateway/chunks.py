"""POST /v1/chunks: token-exact chunks for clients (RAG ingestion).

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
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request

from zerolayer.errors import APIError, InvalidRequest, PayloadTooLarge
from zerolayer.gateway.meter import status_of
from zerolayer.gateway.parts import GatewayParts, chunked
from zerolayer.gateway.schemas import ChunksRequest
from zerolayer.protocol import Chunk, ChunkOptions

__all__ = ["chunk_object", "once", "query_options", "request_id", "streamed"]

_FEED_CHARS = 4096  # ask the chunker again once this much new text is buffered


def chunk_object(index: int, input_index: int, base: int, c: Chunk) -> dict[str, Any]:
    return {
        "object": "chunk",
        "index": index,
        "input_index": input_index,
        "text": c.text,
        "tokens": c.tokens,
        "start_char": base + c.start,
        "end_char": base + c.end,
    }


def _cut(options: dict[str, int], final: bool = True) -> ChunkOptions:
    """The chunk options of the query string (sizes not given: the chunker's own)."""
    return ChunkOptions(options.get("chunk_tokens"), options.get("overlap_tokens"), final)


def query_options(request: Request, default_chunk: int) -> tuple[str, dict[str, int]]:
    """The model and chunk options of a text/plain body, from the query string; 400 before the
    response starts when they do not fit together."""
    q = request.query_params
    model = q.get("model")
    if not model:
        raise InvalidRequest("a text/plain body needs ?model=<model> in the URL", param="model")
    options: dict[str, int] = {}
    for name in ("chunk_tokens", "overlap_tokens"):
        if name in q:
            try:
                options[name] = int(q[name])
            except ValueError as exc:
                raise InvalidRequest(f"{name} must be an integer", param=name) from exc
    try:
        ChunksRequest(model=model, input="x", **options)  # same bounds as the JSON body
    except ValueError as exc:
        raise InvalidRequest(f"invalid chunk options: {exc}") from exc
    n, overlap = options.get("chunk_tokens", default_chunk), options.get("overlap_tokens", 0)
    if overlap >= n:
        raise InvalidRequest(
            f"overlap_tokens ({overlap}) must be below chunk_tokens ({n})", param="overlap_tokens"
        )
    return model, options


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
    parts: GatewayParts,
    request: Request,
    model: str,
    options: dict[str, int],
    settle: Callable[[int, str], None],
) -> AsyncIterator[bytes]:
    decoder = codecs.getincrementaldecoder("utf-8")()
    buffer, base, fed, index, total, received = "", 0, 0, 0, 0, 0
    status = "client_disconnect"  # unless it ends
    limit = parts.config.chunker.max_chunks
    max_bytes = parts.config.chunker.max_stream_bytes

    def lines(chunks: list[Chunk]) -> list[bytes]:
        nonlocal index, total
        out = []
        for c in chunks:
            out.append(json.dumps(chunk_object(index, 0, base, c)).encode() + b"\n")
            index += 1
            total += c.tokens
        if index > limit:
            raise PayloadTooLarge(f"the input makes more than {limit} chunks")
        return out

    try:
        async for piece in request.stream():
            received += len(piece)
            if received > max_bytes:
                raise PayloadTooLarge(f"the streamed text is larger than {max_bytes} bytes")
            buffer += decoder.decode(piece)
            if len(buffer) - fed < max(_FEED_CHARS, fed):
                continue  # the chunker is asked again once the new text is as long as the rest
            ev = await chunked(parts.backend, model, buffer, _cut(options, final=False))
            for line in lines(ev.chunks):
                yield line
            base += ev.rest
            buffer = buffer[ev.rest :]
            fed = len(buffer)
        buffer += decoder.decode(b"", final=True)
        ev = await chunked(parts.backend, model, buffer, _cut(options))
        for line in lines(ev.chunks):
            yield line
        done = {
            "object": "chunks.done",
            "chunks": index,
            "tokens": total,
            "chars": base + len(buffer),
        }
        status = "ok"
        yield json.dumps(done).encode() + b"\n"
    except UnicodeDecodeError as exc:
        status = "invalid"
        err = InvalidRequest(f"the request body is not valid UTF-8 ({exc.reason})")
        yield json.dumps(err.body()).encode() + b"\n"
    except APIError as exc:
        status = status_of(exc)
        yield json.dumps(exc.body()).encode() + b"\n"
    finally:
        settle(total, status)
