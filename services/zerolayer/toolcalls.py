"""zerolayer's default tool-call format, as the model writes a call and reads a result:

    <tool_call>
    {"name": "<function>", "arguments": {...}}
    </tool_call>

(calls in parallel one after another, a line break between them), and a result as
`<tool_response name="<function>">...</tool_response>`. `split_calls` and `CallStream` take
an answer apart into text and calls, whole or as it streams."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "OPEN",
    "HEAD",
    "ARGS",
    "END",
    "SEPARATOR",
    "ToolCall",
    "new_call_id",
    "call_text",
    "result_text",
    "split_calls",
    "CallStream",
]

OPEN = "<tool_call>\n"
HEAD = '{"name": '
ARGS = ', "arguments": '
END = "}\n</tool_call>"
SEPARATOR = "\n"


@dataclass
class ToolCall:
    """A call the model made: its id, function name and arguments (JSON text)."""

    id: str
    name: str
    arguments: str

    def chat(self, index: int | None = None) -> dict[str, Any]:
        """OpenAI's chat tool_calls entry."""
        out: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        return out if index is None else {"index": index, **out}


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def call_text(name: str, arguments: str) -> str:
    """A call as the model writes it (an earlier turn's, written back)."""
    try:
        args = json.dumps(json.loads(arguments), separators=(",", ":")) if arguments else "{}"
    except ValueError:
        args = arguments  # what the client sent back, as it is
    return OPEN + HEAD + json.dumps(name) + ARGS + args + END


def result_text(name: str | None, content: str) -> str:
    """A tool's result as the model reads it."""
    head = f' name="{name}"' if name else ""
    return f"<tool_response{head}>\n{content}\n</tool_response>"


def _parse_one(text: str, at: int) -> tuple[ToolCall, int] | None:
    """The call that begins at text[at] (OPEN), and where it ends; None if it is not whole."""
    start = at + len(OPEN)
    try:
        obj, stop = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    if (
        not isinstance(obj, dict)
        or not isinstance(obj.get("name"), str)
        or not text.startswith(END[1:], stop)
    ):
        return None
    args = obj.get("arguments", {})
    return ToolCall(new_call_id(), obj["name"], json.dumps(args)), stop + len(END) - 1


def split_calls(text: str) -> tuple[str | None, list[ToolCall]]:
    """The answer's text (None when only calls) and the calls in it, in order. A call that is
    not whole (cut by max_tokens) stays in the text."""
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = 0
    while True:
        at = text.find(OPEN, pos)
        if at < 0:
            kept.append(text[pos:])
            break
        got = _parse_one(text, at)
        if got is None:
            kept.append(text[pos:])
            break
        kept.append(text[pos:at])
        calls.append(got[0])
        pos = got[1]
    rest = "".join(kept).strip() if calls else "".join(kept)
    return (rest or None) if calls else rest, calls


@dataclass
class CallStream:
    """Splits a streamed answer into text and calls as it comes: feed() each piece of text;
    it returns the events to send: ("text", str), ("call", index, ToolCall) when a call's
    function is known, ("arguments", index, str) for each piece of its arguments. Text that
    may begin a call is held until it is known."""

    buffer: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    _in_call: bool = False
    _args_at: int = -1  # where the arguments begin in buffer, once the name is known
    _sent: int = 0  # characters of the arguments sent
    _text_seen: bool = False

    def feed(self, piece: str, final: bool = False) -> list[tuple[Any, ...]]:
        self.buffer += piece
        out: list[tuple[Any, ...]] = []
        while True:
            if not self._in_call:
                at = self.buffer.find(OPEN)
                if at < 0:
                    keep = 0 if final else _held(self.buffer, OPEN)
                    text, self.buffer = (
                        self.buffer[: len(self.buffer) - keep],
                        self.buffer[len(self.buffer) - keep :],
                    )
                    self._text(text, out)
                    return out
                self._text(self.buffer[:at], out)
                self.buffer = self.buffer[at:]
                self._in_call, self._args_at, self._sent = True, -1, 0
            if self._args_at < 0:
                head = self.buffer.find(ARGS)
                if head < 0:
                    return self._flush(out) if final else out
                try:
                    name = json.loads(self.buffer[len(OPEN) + len(HEAD) : head])
                except ValueError:
                    return self._flush(out) if final else out
                self.calls.append(ToolCall(new_call_id(), str(name), ""))
                self._args_at = head + len(ARGS)
                out.append(("call", len(self.calls) - 1, self.calls[-1]))
            end = self.buffer.find(END, self._args_at)
            args = self.buffer[self._args_at : end if end >= 0 else len(self.buffer)]
            ready = len(args) if end >= 0 or final else max(0, len(args) - len(END))
            if ready > self._sent:
                piece = args[self._sent : ready]
                self._sent = ready
                self.calls[-1].arguments += piece
                out.append(("arguments", len(self.calls) - 1, piece))
            if end < 0:
                return out
            self.buffer = self.buffer[end + len(END) :]
            if self.buffer.startswith(SEPARATOR):
                self.buffer = self.buffer[len(SEPARATOR) :]
            self._in_call = False

    def _text(self, text: str, out: list[tuple[Any, ...]]) -> None:
        if self.calls and not text.strip():
            return  # the line breaks between calls are not text
        if text:
            out.append(("text", text))

    def _flush(self, out: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """At the end, a call that never got its name is text after all."""
        self._text(self.buffer, out)
        self.buffer = ""
        return out


def _held(text: str, marker: str) -> int:
    """How many characters at the end of text could begin `marker`."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0
