"""OpenAI's completion routes: POST /v1/chat/completions and POST /v1/completions. Each is an
adapter over the request path (zerolayer.gateway.pipeline): the body becomes an Ask (a long
chat prompt refused or, opted in, summarised), and the pipeline answers with protocol values (a
whole End, or a stream opened on a replica), which become OpenAI's JSON or its server-sent
events here."""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from zerolayer.errors import InvalidRequest
from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.deps import ModelKey, PipelineDep
from zerolayer.gateway.fit import Fit, Refuse, Summarize
from zerolayer.gateway.http import ClosingStream
from zerolayer.gateway.pipeline import Answered, Ask, Opened
from zerolayer.gateway.replies import ChatCompletion, TextCompletion, streamed_reply
from zerolayer.gateway.schemas import ChatCompletionRequest, CompletionRequest
from zerolayer.gateway.sse import Shape, sse_stream
from zerolayer.gateway.tools import chat_turns
from zerolayer.protocol import PromptInput

__all__ = ["router", "ask_of", "http_answer"]

router = APIRouter(prefix="/v1", route_class=BodyRoute)


def http_answer(
    answer: Answered | Opened,
    chat: bool,
    headers: dict[str, str],
    include_usage: bool,
    logprobs: int | None = None,
    tools: bool = False,
) -> Response:
    """OpenAI's answer of a completion: the JSON object of a whole one, or the event stream of
    an opened one, named after the tier that answered (with `tools`, its calls split out)."""
    call = answer.call
    n = max(1, len(answer.choices)) if isinstance(answer, Answered) else answer.n
    shape = Shape(chat, call.reservation.request_id, str(call.target), logprobs, tools, n)
    if isinstance(answer, Answered):
        end = answer.end
        reply = shape.final(
            answer.choices or [end],
            call.usage(end.prompt_tokens, end.completion_tokens, end.cached_tokens),
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


def ask_of(body: ChatCompletionRequest | CompletionRequest) -> Ask:
    """What a completion request asks of its tier."""
    s = body.sampling()
    constraint = None
    if isinstance(body, ChatCompletionRequest):
        rid, endpoint = "chatcmpl-" + uuid.uuid4().hex, "chat.completions"
        messages, constraint = chat_turns(body)
        text = PromptInput(messages=messages)
        fit: Fit = Summarize() if body.long_prompt == "summarize" else Refuse()
        if body.long_prompt == "summarize" and body.n > 1:
            raise InvalidRequest("long_prompt 'summarize' is served with n 1 only", param="n")
    else:
        rid, endpoint = "cmpl-" + uuid.uuid4().hex, "completions"
        text, fit = PromptInput(prompt=body.one_prompt()), Refuse()
    return Ask(
        body.model,
        rid,
        endpoint,
        text,
        max_tokens=s["max_tokens"],
        temperature=s["temperature"],
        top_p=s["top_p"],
        seed=s["seed"],
        stop=tuple(s["stop"] or ()),
        stream=bool(body.stream),
        fit=fit,
        constraint=constraint,
        logprobs=body.logprobs_k(),
        n=body.n,
        affinity=_cache_key(body),
    )


def _cache_key(body: ChatCompletionRequest | CompletionRequest) -> str:
    key = getattr(body, "prompt_cache_key", None)
    return "key:" + key if key else ""


async def _complete(
    body: ChatCompletionRequest | CompletionRequest, record: ModelKey, pipeline: PipelineDep
) -> Response:
    ask = ask_of(body)
    answer = await pipeline(ask, record)
    headers = pipeline.meter.headers(answer.call)
    chat = isinstance(body, ChatCompletionRequest)
    tools = chat and ask.constraint is not None and ask.constraint.kind == "structural_tag"
    return http_answer(answer, chat, headers, body.include_usage(), ask.logprobs, tools)


@router.post(
    "/chat/completions",
    responses=streamed_reply(ChatCompletion, "data: {chat.completion.chunk} ... data: [DONE]"),
)
async def chat_completions(
    body: ChatCompletionRequest, record: ModelKey, pipeline: PipelineDep
) -> Response:
    """Answer a conversation, whole or streamed."""
    return await _complete(body, record, pipeline)


@router.post(
    "/completions",
    responses=streamed_reply(TextCompletion, "data: {text_completion} ... data: [DONE]"),
)
async def completions(body: CompletionRequest, record: ModelKey, pipeline: PipelineDep) -> Response:
    """Continue a text prompt, whole or streamed."""
    return await _complete(body, record, pipeline)
