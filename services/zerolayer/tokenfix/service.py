"""The tokenfix step of the request path: clean the text, apply the chat template, and count the
prompt's tokens exactly (the count that limits and billing use and the engine then reads).

Cleaning: Unicode NFC, and removal of characters no tokenizer should see: C0 and C1 control
characters except tab, line feed and carriage return, DEL, lone surrogates (JSON can carry them
as \\ud800 escapes) and the noncharacters U+FFFE/U+FFFF.

Errors are values here, as on every hop (zerolayer.protocol): `Failed`.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from pathlib import Path

from zerolayer.errors import APIError, InvalidRequest
from zerolayer.protocol import Failed, Prompt, PromptInput
from zerolayer.tokenfix.prompt import PromptBuilder

__all__ = ["clean_text", "Tokenfix"]

_DROP = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def clean_text(text: str) -> str:
    """NFC-normalised text without invalid control characters or lone surrogates."""
    return unicodedata.normalize("NFC", _DROP.sub("", text))


INLINE_CHARS = 1024  # prompts up to this many characters are tokenized on the event loop


def _size(req: PromptInput) -> int:
    """The characters of a prompt's text (a prompt of token ids: its length)."""
    if req.messages is not None:
        return sum(len(m.get("content") or "") for m in req.messages)
    return len(req.prompt) if req.prompt is not None else 0


class Tokenfix:
    """Prompt token ids of a request, for every served model (one tokenizer each)."""

    def __init__(self, model_dirs: dict[str, str | Path]):
        self.builders = {m: PromptBuilder(d) for m, d in model_dirs.items()}

    def token_ids(self, model: str, req: PromptInput) -> list[int]:
        """Cleaned, templated and tokenized prompt; raises InvalidRequest."""
        builder = self.builders[model]
        if req.messages is not None:
            messages = [{**m, "content": clean_text(m.get("content") or "")} for m in req.messages]
            ids = builder.chat(messages)
        else:
            prompt = req.prompt if req.prompt is not None else ""
            ids = builder.completion(clean_text(prompt) if isinstance(prompt, str) else prompt)
        if not ids:
            raise InvalidRequest("the prompt is empty after cleaning", param="prompt")
        return ids

    async def prepare(self, model: str, req: PromptInput) -> Prompt | Failed:
        """The prompt's token ids, or the error as a value (this is a deployment method). A
        long prompt is tokenized in a worker thread: the caller's event loop (a gateway's, when
        tokenfix runs inside it) keeps answering other requests meanwhile. A short one is
        tokenized at once: it takes about a tenth of a millisecond, less than the hand-off to
        a thread costs."""
        try:
            if _size(req) <= INLINE_CHARS:
                return Prompt(self.token_ids(model, req))
            return Prompt(await asyncio.to_thread(self.token_ids, model, req))
        except APIError as exc:
            return Failed.of(exc)
