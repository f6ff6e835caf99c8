"""OpenAI response objects (chat and text completions, JSON and server-sent events) built from
the replicas' events (zerolayer.protocol)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from zerolayer.errors import EngineError
from zerolayer.protocol import Delta, End, Failed, ReplicaEvent, Start

log = logging.getLogger(__name__)

__all__ = ["sse", "usage", "Shape", "sse_stream"]


def sse(data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class Shape:
    """How one endpoint's objects look (chat vs text completion)."""

    def __init__(self, chat: bool, rid: str, model: str):
        self.chat = chat
        self.rid = rid
        self.model = model
        self.created = int(time.time())

    def _frame(self, obj: str, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "id": self.rid,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }

    def final(self, text: str, finish: str, usage: dict[str, int]) -> dict[str, Any]:
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish,
            }
            return self._frame("chat.completion", [choice], usage=usage)
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return self._frame("text_completion", [choice], usage=usage)

    def chunk(self, text: str | None, finish: str | None, usage: bool) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {}
            if text is None and finish is None:
                delta = {"role": "assistant", "content": ""}
            elif text is not None:
                delta = {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        extra = {"usage": None} if usage else {}
        return self._frame(obj, [choice], **extra)

    def usage_chunk(self, usage: dict[str, int]) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return self._frame(obj, [], usage=usage)


async def sse_stream(
    shape: Shape,
    events: AsyncGenerator[ReplicaEvent, None],
    first: Start,
    include_usage: bool,
    on_token: Callable[[], None],
    on_end: Callable[..., None],
    report: Callable[[int, int], dict[str, int]] = usage,
) -> AsyncIterator[bytes]:
    """SSE frames of one request. on_token() is called at the first generated token;
    on_end(prompt, completion, end, failed) exactly once, with the tokens delivered (a delta
    counts once its frame was handed on), the replica's End (its queue wait and latencies; None
    if it did not end) and whether the tier failed, however the stream ends: finished, failed,
    or the client gone. A replica that breaks off (its process died) is reported in-band like a
    failure. report(prompt, completion) makes the usage chunk."""
    prompt_tokens = first.prompt_tokens
    completion = 0
    ended: End | None = None
    failed = started = False
    try:
        if shape.chat:
            yield sse(shape.chunk(None, None, include_usage))
        try:
            async for ev in events:
                if isinstance(ev, Delta):
                    if not started:
                        started = True
                        on_token()
                    if ev.text:  # an end-of-sequence token carries no text: nothing to send
                        yield sse(shape.chunk(ev.text, None, include_usage))
                    completion += ev.tokens
                elif isinstance(ev, End):
                    completion, ended = ev.completion_tokens, ev
                    finish = ev.finish_reason
                    yield sse(shape.chunk(None if shape.chat else "", finish, include_usage))
                    if include_usage:
                        yield sse(shape.usage_chunk(report(prompt_tokens, completion)))
                elif isinstance(ev, Failed):
                    # Status 200 is already sent: report in-band, then end the stream properly.
                    failed = True
                    yield sse(ev.error.body())
                    break
        except Exception as exc:  # the replica's process died or the handle broke off
            failed = True
            log.warning("stream %s broke off: %s", shape.rid, type(exc).__name__)
            err = EngineError(f"the tier's replica stopped while answering ({type(exc).__name__})")
            yield sse(err.body())
        yield sse("[DONE]")
    finally:
        on_end(prompt_tokens, completion, ended, failed)
        await events.aclose()
