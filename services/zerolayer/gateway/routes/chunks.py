"""POST /v1/chunks: token-exact chunks of a JSON body at once, or of a streamed text/plain body
line by line (the cutting and its limits: zerolayer.gateway.chunks)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from zerolayer.gateway.chunks import chunk_object, once, query_options, request_id, streamed
from zerolayer.gateway.deps import CatalogDep, CurrentKey, MeterDep, Parts, body_of
from zerolayer.gateway.http import ClosingStream
from zerolayer.gateway.meter import status_of
from zerolayer.gateway.openapi import body_schema
from zerolayer.gateway.schemas import ChunksRequest
from zerolayer.protocol import ChunkOptions, Failed

__all__ = ["router"]

router = APIRouter()


@router.post("/v1/chunks", openapi_extra=body_schema(ChunksRequest, text_plain=True))
async def chunks(
    request: Request, record: CurrentKey, parts: Parts, catalog: CatalogDep, meter: MeterDep
) -> Response:
    """Chunks of a text for the key's model (the key first, then the body)."""
    if request.headers.get("content-type", "").startswith("text/plain"):
        model_id, options = query_options(request, parts.config.chunker.chunk_tokens)
        model = catalog.resolve(model_id, record.plan).model
        call = await meter.free(record, request_id(), model, 0)
        settle = once(lambda tokens, status: meter.finish(call, tokens, 0, status))
        return ClosingStream(
            streamed(parts, request, model, options, settle),
            # gone before the body started: nothing was cut
            on_close=lambda: settle(0, "client_disconnect"),
            duplex=True,
            media_type="application/x-ndjson",
        )
    body = await body_of(request, ChunksRequest)
    model = catalog.resolve(body.model, record.plan).model
    texts = body.texts()
    most = sum(len(t.encode("utf-8")) for t in texts)  # a token is at least one byte
    call = await meter.free(record, request_id(), model, most)
    total, status = 0, "client_disconnect"
    try:
        cut = ChunkOptions(body.chunk_tokens, body.overlap_tokens)
        got = await parts.backend.chunk_all(model, texts, cut)
        if isinstance(got, Failed):
            got.raise_()
        data: list[dict[str, Any]] = []
        for j, ev in enumerate(got):
            for c in ev.chunks:
                data.append(chunk_object(len(data), j, 0, c))
        total = sum(c["tokens"] for c in data)
        status = "ok"
    except BaseException as exc:
        status = status_of(exc)
        raise
    finally:
        meter.finish(call, total, 0, status)
    return JSONResponse(
        {
            "object": "list",
            "model": model,
            "data": data,
            "usage": {"prompt_tokens": total, "total_tokens": total},
        },
        headers=meter.headers(call),
    )
