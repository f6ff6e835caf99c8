"""The Responses API's objects: the response resource and its server-sent events, in the shapes
of the Open Responses specification (every field it requires, in its types)."""

from __future__ import annotations

import json
import time
from typing import Any

from zerolayer.conversations.items import assistant_item
from zerolayer.gateway.response_bodies import CreateResponseRequest

__all__ = ["ResponseShape", "response_usage", "outcome"]


def response_usage(input_tokens: int, output_tokens: int, cached: int = 0) -> dict[str, Any]:
    """Usage as the Responses API reports it."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def outcome(finish_reason: str) -> tuple[str, dict[str, str] | None]:
    """(status, incomplete_details) of a response the model finished for this reason."""
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


class ResponseShape:
    """One response's objects: the resource at each status and its stream's events, numbered
    in order."""

    def __init__(
        self,
        rid: str,
        model: str,
        body: CreateResponseRequest,
        conversation: str | None,
        item_id: str,
    ):
        self.rid = rid
        self.model = model
        self.body = body
        self.conversation = conversation
        self.item_id = item_id  # the output message's id, known before its first token
        self.created = int(time.time())
        self.seq = 0

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
            "tools": [],
            "tool_choice": b.tool_choice or "auto",
            "truncation": b.truncation,
            "parallel_tool_calls": True,
            "text": {"format": {"type": "text"}},
            "top_p": b.top_p,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "top_logprobs": 0,
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

    def output(self, text: str, status: str) -> dict[str, Any]:
        """The output message item."""
        return assistant_item(text, status, self.item_id)

    def _part_at(self) -> dict[str, Any]:
        """Where an event of the output text points: the one message's one text part."""
        return {"item_id": self.item_id, "output_index": 0, "content_index": 0}

    def event(self, kind: str, **fields: Any) -> bytes:
        """One server-sent event: its type as the SSE event name and in the data."""
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        payload = json.dumps(data, separators=(",", ":"))
        return f"event: {kind}\ndata: {payload}\n\n".encode()

    def opening(self) -> list[bytes]:
        """The events before the first token: the response created and in progress, its
        output message and text part opened."""
        started = self.resource("in_progress", [])
        item = {**self.output("", "in_progress"), "content": []}
        return [
            self.event("response.created", response=started),
            self.event("response.in_progress", response=started),
            self.event("response.output_item.added", output_index=0, item=item),
            self.event(
                "response.content_part.added",
                **self._part_at(),
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
            ),
        ]

    def delta(self, text: str) -> bytes:
        """A piece of the output text."""
        return self.event(
            "response.output_text.delta",
            **self._part_at(),
            delta=text,
            logprobs=[],
        )

    def closing(self, item: dict[str, Any]) -> list[bytes]:
        """The events that close the output message (the text done, its part, the item)."""
        text = item["content"][0]["text"]
        return [
            self.event(
                "response.output_text.done",
                **self._part_at(),
                text=text,
                logprobs=[],
            ),
            self.event(
                "response.content_part.done",
                **self._part_at(),
                part=item["content"][0],
            ),
            self.event("response.output_item.done", output_index=0, item=item),
        ]

    def final(self, resource: dict[str, Any]) -> bytes:
        """The last event: completed, incomplete or failed, with the whole response."""
        kind = {"completed": "response.completed", "incomplete": "response.incomplete"}
        return self.event(kind.get(resource["status"], "response.failed"), response=resource)
