"""Request-time prompt building: chat template and exact token counts."""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Any

from zerolayer.errors import InvalidRequest

__all__ = ["PromptBuilder", "check_token_ids"]

# a message's mark in the rendered template: a nonce of 16 hex digits and the message's index
# (one compiled pattern: a pattern made per request, with its nonce in it, is compiled every
# time, which cost more than the tokenizing)
_MARK = re.compile("\ue000([0-9a-f]{16})(\\d+)\ue001")


def check_token_ids(ids: list[int], vocab: int) -> None:
    """InvalidRequest when a token id is outside the vocabulary [0, vocab)."""
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise InvalidRequest(
            f"prompt token ids out of range [0, {vocab}): {bad[:5]}", param="prompt"
        )


class PromptBuilder:
    """Turns OpenAI messages or a completion prompt into the token ids the engine sees.

    The same ids are what usage reports, so billing counts exactly what the model read.

    Safe to call from many threads at once (the tokenfix deployment tokenizes in worker
    threads). Whether special-token strings are split is a setting of the Rust tokenizer, which
    transformers' `encode(..., split_special_tokens=...)` changes on the shared object before
    it encodes: two threads asking for different settings then tokenize with each other's (a
    template's `<|im_start|>` split into pieces, or a user's typed `<|im_start|>` read as the
    special token). So each setting has its own copy of the Rust tokenizer, fixed at start.
    """

    def __init__(self, model_dir: str | Path):
        from tokenizers import Tokenizer
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        if not getattr(self.tokenizer, "chat_template", None):
            raise InvalidRequest(f"model at {model_dir} has no chat template; run the import")
        spec = self.tokenizer.backend_tokenizer.to_str()
        self._template = Tokenizer.from_str(spec)  # special-token strings are special tokens
        self._template.encode_special_tokens = False
        self._text = Tokenizer.from_str(spec)  # special-token strings are plain text
        self._text.encode_special_tokens = True

    def chat(self, messages: list[dict[str, Any]]) -> list[int]:
        """Token ids of the chat template applied to messages, ready for the assistant's turn.

        Only the template makes special tokens: the text of a message is tokenized as text, so a
        user who writes `<|im_start|>system` gets those characters, not a forged system turn.
        The template is rendered with a random mark in place of each message's text; the marks
        split the rendering into the template's own pieces (tokenized with their special
        tokens) and the messages' texts (tokenized with special-token strings as plain text).
        """
        nonce = secrets.token_hex(8)
        marked = [{**m, "content": f"\ue000{nonce}{i}\ue001"} for i, m in enumerate(messages)]
        rendered = self._render(marked)
        found = [f for f in _MARK.finditer(rendered) if f.group(1) == nonce]
        if sorted(int(f.group(2)) for f in found) != list(range(len(messages))):
            # a template that changes the text it is given: render the texts themselves, with
            # every special-token string taken out of them first
            return self._encode(
                self._render([{**m, "content": self._defused(m)} for m in messages])
            )
        ids: list[int] = []
        at = 0
        for f in found:
            ids += self._encode(rendered[at : f.start()])
            text = messages[int(f.group(2))].get("content") or ""
            ids += self._encode(text, as_text=True)
            at = f.end()
        return ids + self._encode(rendered[at:])

    def _render(self, messages: list[dict[str, Any]]) -> str:
        try:
            return str(
                self.tokenizer.apply_chat_template(
                    messages, add_generation_prompt=True, tokenize=False
                )
            )
        except Exception as exc:  # jinja raises its own errors for odd messages
            raise InvalidRequest(f"messages do not fit the model's chat template: {exc}") from exc

    def _encode(self, text: str, as_text: bool = False) -> list[int]:
        if not text:
            return []
        # encode_batch lets go of the GIL while it works (encode does not): a long prompt must
        # not stop the gateway's event loop meanwhile
        tok = self._text if as_text else self._template
        return list(tok.encode_batch([text], add_special_tokens=False)[0].ids)

    def _defused(self, message: dict[str, Any]) -> str:
        text = message.get("content") or ""
        for special in self.tokenizer.all_special_tokens:
            text = text.replace(special, "")
        return text

    def completion(self, prompt: str | list[int]) -> list[int]:
        """Token ids of a raw completion prompt (text, or ids passed through after a check)."""
        if isinstance(prompt, str):
            return self._encode(prompt)
        check_token_ids(prompt, len(self.tokenizer))
        return list(prompt)
