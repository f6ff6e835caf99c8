"""tokenfix at request time: cleaning, the chat template, exact counts."""

from __future__ import annotations

import asyncio

import pytest
from zerolayer.errors import InvalidRequest
from zerolayer.protocol import Failed, PromptInput
from zerolayer.tokenfix.prompt import PromptBuilder
from zerolayer.tokenfix.service import Tokenfix, clean_text


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("cafe\u0301", "caf\u00e9"),  # NFC: e + combining acute -> é
        ("a\x00b\x07c\x1bd\x7fe\x85f", "abcdef"),  # C0, DEL, C1 controls removed
        ("tab\tnew\nline\r", "tab\tnew\nline\r"),  # the whitespace controls stay
        ("lone \ud800 surrogate \udfff", "lone  surrogate "),
        ("non\ufffechar\uffff", "nonchar"),
        ("emoji 😀 and 人工智能", "emoji 😀 and 人工智能"),
    ],
)
def test_clean_text(raw: str, clean: str) -> None:
    assert clean_text(raw) == clean


def test_cleaned_prompt_has_the_tokens_of_the_clean_text(
    tokenfix: Tokenfix, prompts: PromptBuilder
) -> None:
    dirty = [{"role": "user", "content": "Cafe\u0301\x00 in Pa\x1bris?"}]
    clean = [{"role": "user", "content": "Café in Paris?"}]
    assert tokenfix.token_ids("smollm2-135m", PromptInput(messages=dirty)) == prompts.chat(clean)
    ids = tokenfix.token_ids("smollm2-135m", PromptInput(prompt="x\u0301y\x00"))
    assert ids == prompts.completion(clean_text("x\u0301y"))


def test_errors_are_values(tokenfix: Tokenfix) -> None:
    ev = asyncio.run(tokenfix.prepare("smollm2-135m", PromptInput(prompt="\x00\x01")))
    assert isinstance(ev, Failed) and ev.error.status == 400
    assert "empty" in ev.error.message
    ev = asyncio.run(tokenfix.prepare("smollm2-135m", PromptInput(prompt=[10**9])))
    assert isinstance(ev, Failed) and "out of range" in ev.error.message
    with pytest.raises(InvalidRequest):
        tokenfix.token_ids("smollm2-135m", PromptInput(prompt=""))
