"""POST /v1/chunks: token-exact chunks of a JSON body at once, or of a streamed text/plain body
line by line (application/x-ndjson, errors after the first line in-band). An adapter over the
pipeline's chunk() and chunk_stream() (zerolayer.gateway.pipeline; the cutting and its limits:
zerolayer.gateway.chunks)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from zerolayer.errors import APIError, InvalidRequest
from zerolayer.gateway.bodies import BodyRoute, is_text_stream
from zerolayer.gateway.chunks import Cut, CutDone
from zerolayer.gateway.deps import ModelKey, PipelineDep, body_of
from zerolayer.gateway.http import ClosingStream
from zerolayer.gateway.replies import ChunkList, streamed_reply
from zerolayer.gateway.schemas import ChunksRequest
from zerolayer.protocol import Chunk, ChunkOptions

__all__ = ["router"]

router = APIRouter(route_class=BodyRoute)

# read by hand (a text/plain body is a stream), so the route declares what it takes itself
_TAKES = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": ChunksRequest.model_json_schema()},
            "text/plain": {"schema": {"type": "string"}},
        },
    }
}


def chunk_object(index: int, input_index: int, base: int, c: Chunk) -> dict[str, Any]:
    """A chunk as the API answers it (character offsets into its input)."""
    return {
        "object": "chunk",
        "index": index,
        "input_index": input_index,
        "text": c.text,
        "tokens": c.tokens,
        "start_char": base + c.start,
        "end_char": base + c.end,
    }


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


async def _lines(cuts: AsyncGenerator[Cut | CutDone, None]) -> AsyncIterator[bytes]:
    """One JSON line per chunk, then the done line; an error in-band as the last line."""
    try:
        async for cut in cuts:
            if isinstance(cut, Cut):
                obj = chunk_object(cut.index, 0, cut.base, cut.chunk)
            else:
                obj = {
                    "object": "chunks.done",
                    "chunks": cut.chunks,
                    "tokens": cut.tokens,
                    "chars": cut.chars,
                }
            yield json.dumps(obj).encode() + b"\n"
    except APIError as exc:
        yield json.dumps(exc.body()).encode() + b"\n"
    finally:
        await cuts.aclose()


@router.post(
    "/v1/chunks",
    openapi_extra=_TAKES,
    responses=streamed_reply(
        ChunkList, "one chunk object per line, then chunks.done", "application/x-ndjson"
    ),
)
async def chunks(request: Request, record: ModelKey, pipeline: PipelineDep) -> Response:
    """Chunks of a text for the key's model (the key first, then the body)."""
    if is_text_stream(request.headers.get("content-type")):
        model_id, options = query_options(request, pipeline.config.chunker.chunk_tokens)
        cutting = await pipeline.chunk_stream(record, model_id, request.stream(), options)
        return ClosingStream(
            _lines(cutting.cuts),
            on_close=cutting.on_close,
            duplex=True,
            media_type="application/x-ndjson",
        )
    body = await body_of(request, ChunksRequest)
    cut = ChunkOptions(body.chunk_tokens, body.overlap_tokens)
    call, got = await pipeline.chunk(record, body.model, body.texts(), cut)
    data: list[dict[str, Any]] = []
    for j, ev in enumerate(got):
        for c in ev.chunks:
            data.append(chunk_object(len(data), j, 0, c))
    total = sum(c["tokens"] for c in data)
    return JSONResponse(
        {
            "object": "list",
            "model": call.target.model,
            "data": data,
            "usage": {"prompt_tokens": total, "total_tokens": total},
        },
        headers=pipeline.meter.headers(call),
    )
