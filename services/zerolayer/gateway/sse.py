"""OpenAI response objects (chat and text completions, JSON and server-sent events) built from
the replicas' events (zerolayer.protocol)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from zerolayer.errors import EngineError
from zerolayer.protocol import Delta, End, Failed, ReplicaEvent, Start, TokenLogprob
from zerolayer.toolcalls import CallStream, split_calls

log = logging.getLogger(__name__)

__all__ = ["DONE", "sse", "usage", "Shape", "sse_stream"]


def sse(data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


DONE = sse("[DONE]")  # a stream's terminal frame


def usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    """OpenAI's usage object: `cached` of the prompt tokens came from the tier's prefix cache
    (billed at the plan's cached price)."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": min(cached, prompt)},
    }


def chat_logprobs(entries: list[TokenLogprob]) -> list[dict[str, Any]]:
    """OpenAI's per-token log-probability objects (chat and Responses)."""
    return [
        {
            "token": e.token,
            "logprob": e.logprob,
            "bytes": e.bytes,
            "top_logprobs": [
                {"token": t.token, "logprob": t.logprob, "bytes": t.bytes} for t in e.top
            ],
        }
        for e in entries
    ]


class Shape:
    """How one endpoint's objects look (chat vs text completion); `logprobs`: whether the
    request asked for them (None: no) and how many alternatives; `tools`: whether its answers
    may hold tool calls (zerolayer.gateway.tools); `n`: its choices."""

    def __init__(
        self,
        chat: bool,
        rid: str,
        model: str,
        logprobs: int | None = None,
        tools: bool = False,
        n: int = 1,
    ):
        self.chat = chat
        self.rid = rid
        self.model = model
        self.created = int(time.time())
        self.logprobs = logprobs
        self.tools = tools
        self.n = n
        # per choice: its calls as they stream, and the characters its legacy logprobs'
        # offsets have covered
        self.calls = [CallStream() for _ in range(n)] if tools else None
        self._offset = [0] * n

    def _logprobs(
        self, entries: list[TokenLogprob] | None, index: int = 0
    ) -> dict[str, Any] | None:
        """A choice's `logprobs`: None unless asked for; chat's content list, or the legacy
        completion's four parallel lists."""
        if self.logprobs is None:
            return None
        got = entries or []
        if self.chat:
            return {"content": chat_logprobs(got), "refusal": None}
        offsets = []
        for e in got:
            offsets.append(self._offset[index])
            self._offset[index] += len(e.token)
        return {
            "tokens": [e.token for e in got],
            "token_logprobs": [e.logprob for e in got],
            "top_logprobs": [{t.token: t.logprob for t in e.top} for e in got]
            if self.logprobs
            else None,
            "text_offset": offsets,
        }

    def _frame(self, obj: str, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "id": self.rid,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }

    def _choice(self, index: int, end: End) -> dict[str, Any]:
        """One choice of a whole answer."""
        lp, finish, text = self._logprobs(end.logprobs, index), end.finish_reason, end.text
        if not self.chat:
            return {"index": index, "text": text, "logprobs": lp, "finish_reason": finish}
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if self.tools:
            content, calls = split_calls(text)
            message["content"] = content
            if calls:
                message["tool_calls"] = [c.chat() for c in calls]
                finish = "tool_calls" if finish == "stop" else finish
        return {"index": index, "message": message, "logprobs": lp, "finish_reason": finish}

    def final(self, ends: list[End], usage: dict[str, Any]) -> dict[str, Any]:
        """The whole answer: one choice per End."""
        obj = "chat.completion" if self.chat else "text_completion"
        return self._frame(obj, [self._choice(i, e) for i, e in enumerate(ends)], usage=usage)

    def chunk(
        self,
        text: str | None,
        finish: str | None,
        usage: bool,
        logprobs: list[TokenLogprob] | None = None,
        index: int = 0,
    ) -> dict[str, Any]:
        lp = None if finish is not None or (text is None and self.chat) else logprobs
        shown = self._logprobs(lp, index) if lp is not None else None
        if self.chat:
            delta: dict[str, Any] = {}
            if text is None and finish is None:
                delta = {"role": "assistant", "content": ""}
            elif text is not None:
                delta = {"content": text}
            choice = {"index": index, "delta": delta, "logprobs": shown, "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": index, "text": text or "", "logprobs": shown}
            choice["finish_reason"] = finish
            obj = "text_completion"
        extra = {"usage": None} if usage else {}
        return self._frame(obj, [choice], **extra)

    def pieces(
        self,
        text: str,
        usage: bool,
        logprobs: list[TokenLogprob] | None,
        final: bool = False,
        index: int = 0,
    ) -> list[dict[str, Any]]:
        """The chunks of a piece of streamed text: as it is, or, with tools, its text and its
        tool calls' deltas as they become known (the logprobs ride on the first chunk, or on
        one of their own when the text is held back)."""
        if self.calls is None:
            if not text and not logprobs:
                return []
            return [self.chunk(text, None, usage, logprobs, index)]
        out = []
        for ev in self.calls[index].feed(text, final):
            if ev[0] == "text":
                out.append(self.chunk(ev[1], None, usage, logprobs, index))
            else:
                if ev[0] == "call":
                    call = ev[2]
                    entry = {**call.chat(ev[1]), "function": {"name": call.name, "arguments": ""}}
                else:
                    entry = {"index": ev[1], "function": {"arguments": ev[2]}}
                out.append(self._delta({"tool_calls": [entry]}, usage, logprobs, index))
            logprobs = None
        if logprobs:
            out.append(self._delta({}, usage, logprobs, index))
        return out

    def _delta(
        self,
        delta: dict[str, Any],
        usage: bool,
        logprobs: list[TokenLogprob] | None,
        index: int,
    ) -> dict[str, Any]:
        shown = self._logprobs(logprobs, index) if logprobs is not None else None
        choice = {"index": index, "delta": delta, "logprobs": shown, "finish_reason": None}
        return self._frame("chat.completion.chunk", [choice], **({"usage": None} if usage else {}))

    def finish(self, finish: str, index: int = 0) -> str:
        """The finish reason of a streamed answer (tool_calls when it made calls)."""
        if self.calls is not None and self.calls[index].calls and finish == "stop":
            return "tool_calls"
        return finish

    def usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return self._frame(obj, [], usage=usage)


async def sse_stream(
    shape: Shape,
    events: AsyncGenerator[ReplicaEvent, None],
    first: Start,
    include_usage: bool,
    on_token: Callable[[], None],
    on_end: Callable[..., None],
    report: Callable[[int, int, int], dict[str, Any]] = usage,
) -> AsyncIterator[bytes]:
    """SSE frames of one request. on_token() is called at the first generated token;
    on_end(prompt, completion, end, failed) exactly once, with the tokens delivered (a delta
    counts once its frame was handed on), the replica's End (its queue wait and latencies; None
    if it did not end) and whether the tier failed, however the stream ends: finished, failed,
    or the client gone. A replica that breaks off (its process died) is reported in-band like a
    failure. report(prompt, completion, cached) makes the usage chunk."""
    prompt_tokens = first.prompt_tokens
    completion = 0
    done: dict[int, End] = {}  # the choices that ended
    ended: End | None = None
    failed = started = False
    try:
        if shape.chat:
            for i in range(shape.n):
                yield sse(shape.chunk(None, None, include_usage, index=i))
        try:
            async for ev in events:
                if isinstance(ev, Delta):
                    if not started:
                        started = True
                        on_token()
                    for frame in shape.pieces(ev.text, include_usage, ev.logprobs, index=ev.index):
                        yield sse(frame)
                    completion += ev.tokens
                elif isinstance(ev, End):
                    done[ev.index] = ev
                    for frame in shape.pieces("", include_usage, None, True, ev.index):
                        yield sse(frame)
                    finish = shape.finish(ev.finish_reason, ev.index)
                    text = None if shape.chat else ""
                    yield sse(shape.chunk(text, finish, include_usage, index=ev.index))
                    if len(done) < shape.n:
                        continue
                    completion = sum(e.completion_tokens for e in done.values())
                    ended = dataclasses.replace(ev, completion_tokens=completion)
                    if include_usage:
                        cached = ev.cached_tokens
                        yield sse(shape.usage_chunk(report(prompt_tokens, completion, cached)))
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
        yield DONE
    finally:
        on_end(prompt_tokens, completion, ended, failed)
        await events.aclose()
