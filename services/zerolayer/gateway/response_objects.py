"""The Responses API's objects: the response resource and its server-sent events, in the shapes
of the Open Responses specification (every field it requires, in its types)."""

from __future__ import annotations

import json
import time
from typing import Any

from zerolayer.conversations.items import assistant_item, call_item, new_id
from zerolayer.gateway.response_bodies import CreateResponseRequest
from zerolayer.gateway.sse import chat_logprobs
from zerolayer.protocol import TokenLogprob
from zerolayer.toolcalls import CallStream, ToolCall, split_calls

__all__ = ["ResponseShape", "response_usage", "outcome", "without_logprobs"]


def response_usage(input_tokens: int, output_tokens: int, cached: int = 0) -> dict[str, Any]:
    """Usage as the Responses API reports it (nothing is billed for writing the prefix cache:
    `cache_write_tokens` is 0)."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def without_logprobs(item: dict[str, Any]) -> dict[str, Any]:
    """An output message as a conversation keeps it: its text, not its log-probabilities."""
    parts = [{**p, "logprobs": []} if p.get("logprobs") else p for p in item.get("content", [])]
    return {**item, "content": parts}


def outcome(finish_reason: str) -> tuple[str, dict[str, str] | None]:
    """(status, incomplete_details) of a response the model finished for this reason."""
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


class ResponseShape:
    """One response's objects: the resource at each status, its output items, and its stream's
    events, numbered in order. With `tools` the answer is split into a message (its text, if
    any) and function_call items, whole or as it streams (a message item is then opened at
    its first text, not before)."""

    def __init__(
        self,
        rid: str,
        model: str,
        body: CreateResponseRequest,
        conversation: str | None,
        item_id: str,
        tools: bool = False,
    ):
        self.rid = rid
        self.model = model
        self.body = body
        self.conversation = conversation
        self.item_id = item_id  # the output message's id, known before its first token
        self.created = int(time.time())
        self.seq = 0
        form = body.format()
        self.format = form.shown() if form is not None else {"type": "text"}
        self.calls = CallStream() if tools else None
        self.items: list[dict[str, Any]] = []  # the output items closed so far, in order
        self._open: str | None = None  # the item being streamed: "message", "call" or none
        self._text: list[str] = []
        self._logprobs: list[TokenLogprob] = []
        self._call: ToolCall | None = None
        self._call_id = ""  # the function_call item's id

    def resource(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        error: dict[str, str] | None = None,
        incomplete: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """The response object."""
        b = self.body
        done = status in ("completed", "incomplete", "failed")
        return {
            "id": self.rid,
            "object": "response",
            "created_at": self.created,
            "completed_at": int(time.time()) if done else None,
            "status": status,
            "incomplete_details": incomplete,
            "model": self.model,
            "previous_response_id": b.previous_response_id,
            "instructions": b.instructions,
            "output": output,
            "error": error,
            "tools": [t.shown() for t in b.tools or []],
            "tool_choice": b.choice_shown(),
            "truncation": b.truncation,
            "parallel_tool_calls": b.parallel_tool_calls,
            "text": {"format": self.format},
            "top_p": b.top_p,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "top_logprobs": b.top_logprobs or 0,
            "temperature": b.temperature,
            "reasoning": None,
            "usage": usage,
            "max_output_tokens": b.max_output_tokens,
            "max_tool_calls": None,
            "store": b.store,
            "background": False,
            "service_tier": "default",
            "metadata": b.metadata or {},
            "safety_identifier": b.safety_identifier,
            "prompt_cache_key": b.prompt_cache_key,
            "user": b.user,
            "conversation": {"id": self.conversation} if self.conversation else None,
        }

    def output(
        self, text: str, status: str, logprobs: list[TokenLogprob] | None = None
    ) -> dict[str, Any]:
        """The output message item (with its tokens' log-probabilities when asked for)."""
        item = assistant_item(text, status, self.item_id)
        if logprobs:
            item["content"][0]["logprobs"] = chat_logprobs(logprobs)
        return item

    def outputs(
        self, text: str, status: str, logprobs: list[TokenLogprob] | None = None
    ) -> list[dict[str, Any]]:
        """The output items of a whole answer: its message, and with tools its calls."""
        if self.calls is None:
            return [self.output(text, status, logprobs)]
        content, calls = split_calls(text)
        items = [self.output(content, status, logprobs)] if content is not None else []
        return items + [call_item(c.name, c.arguments, c.id, status) for c in calls]

    def _part_at(self) -> dict[str, Any]:
        """Where an event of the output text points: the open message's one text part."""
        return {"item_id": self.item_id, "output_index": len(self.items), "content_index": 0}

    def _open_message(self) -> list[bytes]:
        if self.items:  # text after a call: a message of its own
            self.item_id = new_id("msg")
        self._open, self._text, self._logprobs = "message", [], []
        item = {**self.output("", "in_progress"), "content": []}
        return [
            self.event("response.output_item.added", output_index=len(self.items), item=item),
            self.event(
                "response.content_part.added",
                **self._part_at(),
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
            ),
        ]

    def _close(self, status: str) -> list[bytes]:
        """Close the item being streamed (its last events), adding it to the items."""
        frames: list[bytes] = []
        if self._open == "message":
            item = self.output("".join(self._text), status, self._logprobs)
            frames = self.closing(item)
            self.items.append(item)
        elif self._open == "call" and self._call is not None:
            call = self._call
            item = call_item(call.name, call.arguments, call.id, status, self._call_id)
            at = {"item_id": self._call_id, "output_index": len(self.items)}
            frames = [
                self.event(
                    "response.function_call_arguments.done",
                    **at,
                    name=call.name,
                    arguments=call.arguments,
                ),
                self.event("response.output_item.done", output_index=len(self.items), item=item),
            ]
            self.items.append(item)
        self._open = None
        return frames

    def _text_piece(self, text: str, logprobs: list[TokenLogprob] | None) -> list[bytes]:
        frames = [] if self._open == "message" else self._close("completed") + self._open_message()
        self._text.append(text)
        self._logprobs += logprobs or []
        return [*frames, self.delta(text, logprobs)]

    def _on(self, ev: tuple[Any, ...], logprobs: list[TokenLogprob] | None) -> list[bytes]:
        if ev[0] == "text":
            return self._text_piece(ev[1], logprobs)
        if ev[0] == "call":
            frames = self._close("completed")
            self._open, self._call, self._call_id = "call", ev[2], new_id("fc")
            item = call_item(ev[2].name, "", ev[2].id, "in_progress", self._call_id)
            added = self.event(
                "response.output_item.added", output_index=len(self.items), item=item
            )
            return [*frames, added]
        at = {"item_id": self._call_id, "output_index": len(self.items)}
        return [self.event("response.function_call_arguments.delta", **at, delta=ev[2])]

    def piece(self, text: str, logprobs: list[TokenLogprob] | None = None) -> list[bytes]:
        """The events of a piece of the streamed answer."""
        if self.calls is None:
            return self._text_piece(text, logprobs)
        frames: list[bytes] = []
        for ev in self.calls.feed(text):
            frames += self._on(ev, logprobs)
            logprobs = None
        if logprobs:  # held back (it may begin a call): kept with the message's
            self._logprobs += logprobs
        return frames

    def ending(self, status: str) -> list[bytes]:
        """The events that close the output once the answer ended (every item closed with
        `status`; an answer with no output at all still has its empty message)."""
        frames: list[bytes] = []
        if self.calls is not None:
            for ev in self.calls.feed("", final=True):
                frames += self._on(ev, None)
        frames += self._close(status)
        if not self.items:
            frames += self._open_message() + self._close(status)
        return frames

    def so_far(self, status: str) -> list[dict[str, Any]]:
        """The output items of an answer cut off now (the open one with `status`), with no
        events: its client is gone."""
        self.ending(status)
        return self.items

    def event(self, kind: str, **fields: Any) -> bytes:
        """One server-sent event: its type as the SSE event name and in the data."""
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        payload = json.dumps(data, separators=(",", ":"))
        return f"event: {kind}\ndata: {payload}\n\n".encode()

    def opening(self) -> list[bytes]:
        """The events before the first token: the response created and in progress, and
        (without tools) its output message and text part opened."""
        started = self.resource("in_progress", [])
        frames = [
            self.event("response.created", response=started),
            self.event("response.in_progress", response=started),
        ]
        return frames if self.calls is not None else frames + self._open_message()

    def delta(self, text: str, logprobs: list[TokenLogprob] | None = None) -> bytes:
        """A piece of the output text (and its tokens' log-probabilities when asked for)."""
        return self.event(
            "response.output_text.delta",
            **self._part_at(),
            delta=text,
            logprobs=chat_logprobs(logprobs or []),
        )

    def closing(self, item: dict[str, Any]) -> list[bytes]:
        """The events that close the output message (the text done, its part, the item)."""
        text = item["content"][0]["text"]
        return [
            self.event(
                "response.output_text.done",
                **self._part_at(),
                text=text,
                logprobs=item["content"][0].get("logprobs", []),
            ),
            self.event(
                "response.content_part.done",
                **self._part_at(),
                part=item["content"][0],
            ),
            self.event("response.output_item.done", output_index=len(self.items), item=item),
        ]

    def final(self, resource: dict[str, Any]) -> bytes:
        """The last event: completed, incomplete or failed, with the whole response."""
        kind = {"completed": "response.completed", "incomplete": "response.incomplete"}
        return self.event(kind.get(resource["status"], "response.failed"), response=resource)
