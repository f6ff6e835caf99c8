"""OpenAI's completion routes: POST /v1/chat/completions and POST /v1/completions, both thin
adapters over the request path (zerolayer.gateway.flow)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from zerolayer.gateway.deps import CurrentKey, FlowDep, body_of
from zerolayer.gateway.openapi import body_schema
from zerolayer.gateway.schemas import ChatCompletionRequest, CompletionRequest

__all__ = ["router"]

router = APIRouter(prefix="/v1")


@router.post("/chat/completions", openapi_extra=body_schema(ChatCompletionRequest))
async def chat_completions(request: Request, record: CurrentKey, flow: FlowDep) -> Response:
    """Answer a conversation, whole or streamed."""
    return await flow(await body_of(request, ChatCompletionRequest), record)


@router.post("/completions", openapi_extra=body_schema(CompletionRequest))
async def completions(request: Request, record: CurrentKey, flow: FlowDep) -> Response:
    """Continue a text prompt, whole or streamed."""
    return await flow(await body_of(request, CompletionRequest), record)
