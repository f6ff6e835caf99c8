"""Request-time prompt building: chat template and exact token counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zerolayer.errors import InvalidRequest

__all__ = ["PromptBuilder", "check_token_ids"]


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
    """

    def __init__(self, model_dir: str | Path):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        if not getattr(self.tokenizer, "chat_template", None):
            raise InvalidRequest(f"model at {model_dir} has no chat template; run the import")

    def chat(self, messages: list[dict[str, Any]]) -> list[int]:
        """Token ids of the chat template applied to messages, ready for the assistant's turn."""
        try:
            ids = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True
            )
        except Exception as exc:  # jinja raises its own errors for odd messages
            raise InvalidRequest(f"messages do not fit the model's chat template: {exc}") from exc
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return list(ids)

    def completion(self, prompt: str | list[int]) -> list[int]:
        """Token ids of a raw completion prompt (text, or ids passed through after a check)."""
        if isinstance(prompt, str):
            return list(self.tokenizer.encode(prompt, add_special_tokens=False))
        check_token_ids(prompt, len(self.tokenizer))
        return list(prompt)
