"""OpenAI's completion routes: POST /v1/chat/completions and POST /v1/completions. Each is an
adapter over the request path (zerolayer.gateway.flow): the pipeline answers with protocol
values (a whole End, or a stream opened on a replica), which become OpenAI's JSON or its
server-sent events here."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from zerolayer.gateway.deps import CurrentKey, FlowDep, body_of
from zerolayer.gateway.flow import Answered, Opened
from zerolayer.gateway.http import ClosingStream
from zerolayer.gateway.openapi import body_schema
from zerolayer.gateway.schemas import ChatCompletionRequest, CompletionRequest
from zerolayer.gateway.sse import Shape, sse_stream

__all__ = ["router", "http_answer"]

router = APIRouter(prefix="/v1")


def http_answer(
    answer: Answered | Opened, chat: bool, headers: dict[str, str], include_usage: bool
) -> Response:
    """OpenAI's answer of a completion: the JSON object of a whole one, or the event stream of
    an opened one, named after the tier that answered."""
    call = answer.call
    shape = Shape(chat, call.reservation.request_id, str(call.target))
    if isinstance(answer, Answered):
        end = answer.end
        reply = shape.final(
            end.text, end.finish_reason, call.usage(end.prompt_tokens, end.completion_tokens)
        )
        if call.job is not None:
            reply["zerolayer_summary"] = call.job.usage()
        return JSONResponse(reply, headers=headers)
    o = answer
    return ClosingStream(
        sse_stream(shape, o.events, o.first, include_usage, o.on_token, o.on_end, call.usage),
        on_close=o.on_close,
        media_type="text/event-stream",
        headers={**headers, "cache-control": "no-cache"},
    )


async def _complete(
    request: Request,
    record: CurrentKey,
    flow: FlowDep,
    model: type[ChatCompletionRequest] | type[CompletionRequest],
) -> Response:
    body = await body_of(request, model)
    answer = await flow(body, record)
    headers = flow.meter.headers(answer.call)
    return http_answer(answer, model is ChatCompletionRequest, headers, body.include_usage())


@router.post("/chat/completions", openapi_extra=body_schema(ChatCompletionRequest))
async def chat_completions(request: Request, record: CurrentKey, flow: FlowDep) -> Response:
    """Answer a conversation, whole or streamed."""
    return await _complete(request, record, flow, ChatCompletionRequest)


@router.post("/completions", openapi_extra=body_schema(CompletionRequest))
async def completions(request: Request, record: CurrentKey, flow: FlowDep) -> Response:
    """Continue a text prompt, whole or streamed."""
    return await _complete(request, record, flow, CompletionRequest)
