"""Chat text for the collapse compiler: disjoint prompts, the model's own replies in its chat
template (generated once, then cached), and mixtures sampled in their shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from zerolayer.collapse import chat
from zerolayer.collapse.chat import chat_corpus, chat_prompts, mixed_corpus
from zerolayer.collapse.corpus import Corpus, token_windows

pytestmark = pytest.mark.integration  # runs the collapse compiler


def test_calibration_and_evaluation_prompts_are_disjoint() -> None:
    calib, evaluation = chat_prompts("calibration"), chat_prompts("evaluation")
    assert len(calib) >= 60 and len(evaluation) >= 40
    assert not set(calib) & set(evaluation)
    assert len(set(calib)) == len(calib)


def test_chat_corpus_holds_the_models_replies_and_is_cached(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = chat_corpus("evaluation", model_dir, tmp_path, max_tokens=12, limit=3)
    assert len(corpus.documents) == 3
    first = corpus.documents["000"]
    assert chat_prompts("evaluation")[0] in first and "<|im_start|>assistant" in first
    assert "Paris" in first  # the dense model knows the capital of France
    assert len(list(tmp_path.glob("chat-evaluation-*.json"))) == 1

    def refuse(*_: Any) -> None:
        raise AssertionError("generated again instead of reading the cache")

    monkeypatch.setattr(chat, "_replies", refuse)
    again = chat_corpus("evaluation", model_dir, tmp_path, max_tokens=12, limit=3)
    assert again.documents == corpus.documents


class _Chars:
    """A tokenizer whose tokens are characters (enough for window arithmetic)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


def test_mixture_windows_come_in_shares_interleaved() -> None:
    a = Corpus("a", "s", "l", {"x": "a" * 4000})
    b = Corpus("b", "s", "l", {"x": "b" * 4000})
    mix = mixed_corpus([(a, 3.0), (b, 1.0)], "mix")
    wins = token_windows(_Chars(), mix, 8, 10)
    kinds = "".join(chr(w[0]) for w in wins)
    assert sorted(kinds) == sorted("aaaaaabb")
    assert "b" in kinds[:4]  # interleaved: the first half already holds a b window
    desc = mix.describe()
    assert [p["share"] for p in desc["parts"]] == [0.75, 0.25]
