"""Items: the messages a response takes in and gives out, as the Responses and Conversations APIs
show them ({"type": "message", "id", "status", "role", "content": [parts]}), function calls
and their outputs ({"type": "function_call", "call_id", "name", "arguments"} and
{"type": "function_call_output", "call_id", "output"}), compaction items ({"type":
"compaction", "id", "encrypted_content"}: a sealed summary of earlier turns, made by
/v1/responses/compact); what the model reads of them; and cursor pagination of item lists.

Text and function tools are served: another tool's call or output, an image, a file or audio
in an input is a 400 naming what was sent, never dropped in silence."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Literal

from zerolayer.errors import InvalidRequest
from zerolayer.toolcalls import call_text, result_text

__all__ = [
    "COMPACTION",
    "ItemError",
    "Page",
    "new_id",
    "input_items",
    "assistant_item",
    "call_item",
    "check_outputs",
    "compactions",
    "messages_of",
    "page",
    "item_text",
]

ROLES = ("user", "assistant", "system", "developer")
# content part types that carry text, per role (an assistant's earlier turns are output_text)
_TEXT_PARTS = {"input_text", "output_text", "text"}
_MEDIA = {"input_image", "input_file", "input_audio", "input_video"}
_TOOLISH = (
    "custom_tool_call",
    "custom_tool_call_output",
    "computer_call",
    "computer_call_output",
    "web_search_call",
    "file_search_call",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "reasoning",
)
COMPACTION = "compaction"
MAX_SEALED_CHARS = 65536  # a compaction item's encrypted_content (a summary is far shorter)
SUMMARY_HEAD = "Summary of the earlier conversation:\n"  # how the model reads a compaction


class ItemError(InvalidRequest):
    """An input item the platform cannot serve (tools, images, files) or a malformed one."""

    code = "unsupported_input"


def new_id(prefix: str) -> str:
    """An unguessable object id: the prefix, '_', and 48 hex digits (192 random bits)."""
    return f"{prefix}_{secrets.token_hex(24)}"


def _part(role: str, text: str) -> dict[str, Any]:
    if role == "assistant":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "input_text", "text": text}


def _message(role: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "message",
        "id": new_id("msg"),
        "status": status,
        "role": role,
        "content": [_part(role, text)],
    }


def _content_text(content: Any, where: str) -> str:
    """The text of a message's content: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}.content must be a string or a list of parts", param=where)
    texts = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _MEDIA:
            raise ItemError(
                f"{at} is an {kind} part: this model reads text only (send input_text)", param=at
            )
        if kind not in _TEXT_PARTS or not isinstance(part.get("text"), str):
            raise InvalidRequest(
                f"{at} must be a text part ({{'type': 'input_text', 'text': ...}})", param=at
            )
        texts.append(part["text"])
    return "".join(texts)


def input_items(value: Any, param: str = "input") -> list[dict[str, Any]]:
    """A request's input (a string, or a list of message items) as stored items, each with a
    new id; a 400 for anything that is not a text message."""
    if isinstance(value, str):
        return [_message("user", value)]
    if not isinstance(value, list):
        raise InvalidRequest(f"{param} must be a string or a list of items", param=param)
    out = []
    for i, item in enumerate(value):
        where = f"{param}[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"{where} must be an object", param=where)
        kind = item.get("type", "message")
        if kind in _TOOLISH:
            raise ItemError(
                f"{where} is a {kind} item: only function tools are served by zerolayer's tiers",
                param=where,
            )
        if kind in ("function_call", "function_call_output"):
            out.append(_function_item(kind, item, where))
            continue
        if kind == COMPACTION:
            sealed = _string(item, "encrypted_content", where, MAX_SEALED_CHARS)
            given = item.get("id")
            item_id = given if isinstance(given, str) and 0 < len(given) <= 128 else None
            out.append(
                {"type": COMPACTION, "id": item_id or new_id("cmp"), "encrypted_content": sealed}
            )
            continue
        if kind == "item_reference":
            raise ItemError(
                f"{where} is an item_reference: send the item itself, or continue by "
                "previous_response_id or conversation",
                param=where,
            )
        if kind != "message":
            raise InvalidRequest(f"{where} has an unknown type {kind!r}", param=where)
        role = item.get("role")
        if role not in ROLES:
            raise InvalidRequest(
                f"{where}.role must be one of {', '.join(ROLES)} (got {role!r})", param=where
            )
        out.append(_message(role, _content_text(item.get("content"), where)))
    return out


def _string(item: dict[str, Any], key: str, where: str, most: int = 128) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value or len(value) > most:
        raise InvalidRequest(
            f"{where}.{key} must be a non-empty string of at most {most} characters",
            param=f"{where}.{key}",
        )
    return value


def _function_item(kind: str, item: dict[str, Any], where: str) -> dict[str, Any]:
    """A function call (an earlier answer's, sent back) or a function's output, as stored."""
    call_id = _string(item, "call_id", where)
    if kind == "function_call":
        arguments = item.get("arguments", "")
        if not isinstance(arguments, str):
            raise InvalidRequest(f"{where}.arguments must be JSON text", param=f"{where}.arguments")
        return call_item(_string(item, "name", where, 64), arguments, call_id)
    output = item.get("output")
    if isinstance(output, list):
        output = _content_text(output, where)
    if not isinstance(output, str):
        raise InvalidRequest(
            f"{where}.output must be a string or a list of text parts", param=f"{where}.output"
        )
    return {
        "type": "function_call_output",
        "id": new_id("fco"),
        "call_id": call_id,
        "output": output,
        "status": "completed",
    }


def call_item(
    name: str, arguments: str, call_id: str, status: str = "completed", item_id: str | None = None
) -> dict[str, Any]:
    """A function call item (the model's, or one sent back)."""
    return {
        "type": "function_call",
        "id": item_id or new_id("fc"),
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def check_outputs(history: list[dict[str, Any]], new: list[dict[str, Any]], param: str) -> None:
    """Every function output in `new` answers a call made before it (in the history or in
    `new`): a 400 naming the output's call_id otherwise."""
    made = {it["call_id"] for it in history if it.get("type") == "function_call"}
    for i, it in enumerate(new):
        if it.get("type") == "function_call":
            made.add(it["call_id"])
        elif it.get("type") == "function_call_output" and it["call_id"] not in made:
            raise InvalidRequest(
                f"no function call with call_id {it['call_id']!r} comes before this output",
                param=f"{param}[{i}].call_id",
            )


def assistant_item(text: str, status: str = "completed", item_id: str | None = None) -> dict:
    """The model's output message."""
    item = _message("assistant", text, status)
    if item_id is not None:
        item["id"] = item_id
    return item


def item_text(item: dict[str, Any]) -> str:
    """The text of a stored message item."""
    return "".join(p.get("text", "") for p in item.get("content", []))


def compactions(items: list[dict[str, Any]]) -> list[int]:
    """The places of the compaction items among `items`."""
    return [i for i, it in enumerate(items) if it.get("type") == COMPACTION]


def messages_of(
    items: list[dict[str, Any]], summaries: dict[str, str] | None = None
) -> list[dict[str, str]]:
    """What the model reads of stored items, one chat message each: a developer's message is
    a system message; a function call is the assistant's, written as the model writes calls;
    its output is the user's, a tool response naming the function (zerolayer.toolcalls); a
    compaction is a system message with its summary (`summaries`: item id -> the opened text)."""
    names = {it["call_id"]: it["name"] for it in items if it.get("type") == "function_call"}
    out = []
    for it in items:
        kind = it.get("type", "message")
        if kind == COMPACTION:
            out.append({"role": "system", "content": SUMMARY_HEAD + (summaries or {})[it["id"]]})
        elif kind == "function_call":
            out.append({"role": "assistant", "content": call_text(it["name"], it["arguments"])})
        elif kind == "function_call_output":
            told = result_text(names.get(it["call_id"]), it["output"])
            out.append({"role": "user", "content": told})
        else:
            role = "system" if it["role"] == "developer" else it["role"]
            out.append({"role": role, "content": item_text(it)})
    return out


@dataclass
class Page:
    """One page of a list: OpenAI's list object with its cursors."""

    data: list[dict[str, Any]]
    has_more: bool

    def body(self) -> dict[str, Any]:
        """The list object as the API returns it."""
        return {
            "object": "list",
            "data": self.data,
            "first_id": self.data[0]["id"] if self.data else None,
            "last_id": self.data[-1]["id"] if self.data else None,
            "has_more": self.has_more,
        }


def page(
    items: list[dict[str, Any]],
    limit: int,
    order: Literal["asc", "desc"],
    after: str | None,
) -> Page:
    """A page of items (given oldest first): `limit` of them in `order`, starting after the
    item with id `after` (a 400 if there is none)."""
    seq = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        ids = [it["id"] for it in seq]
        if after not in ids:
            raise InvalidRequest(f"no item {after!r} in this list", param="after")
        start = ids.index(after) + 1
    chunk = seq[start : start + limit]
    return Page(chunk, start + limit < len(seq))
