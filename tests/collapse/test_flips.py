"""Changed answers (collapse.flips): the ROC statistic, held-out prompts, greedy answers and the
flips and KL of a cut against the dense model."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from zerolayer.collapse.build import eos_ids
from zerolayer.collapse.chat import FILLERS, chat_prompts
from zerolayer.collapse.corpus import Corpus
from zerolayer.collapse.flips import (
    PROMPT_TOKENS,
    QUESTIONS,
    FlipEvaluator,
    draw_roc,
    greedy,
    heldout_prompts,
    roc,
)
from zerolayer.collapse.model import decoder_layers


def test_roc_ranks_with_ties_and_draws_its_curve() -> None:
    auc, curve = roc([1, 1, 0, 0], [0.9, 0.8, 0.2, 0.1])
    assert auc == 1.0 and curve[0] == [0.0, 0.0] and curve[-1] == [1.0, 1.0]
    assert curve[2] == [0.0, 1.0]  # both positives caught before any negative
    assert roc([1, 1, 0, 0], [0.1, 0.2, 0.8, 0.9])[0] == 0.0
    assert roc([1, 0, 1, 0], [0.5, 0.5, 0.5, 0.5])[0] == 0.5  # all tied: chance
    # one positive above one of two negatives and tied with the other: (1 + 0.5) / 2
    assert roc([1, 0, 0], [0.5, 0.5, 0.1])[0] == 0.75
    assert roc([0, 0], [0.3, 0.4]) == (None, [])  # no changed answer: nothing to predict


def test_chat_questions_are_held_out_of_calibration() -> None:
    calibration = set(chat_prompts("calibration"))
    assert not calibration & set(QUESTIONS)
    assert not calibration & set(chat_prompts("evaluation"))
    fillers = [str(v) for vs in FILLERS["calibration"].values() for v in vs]
    assert not [q for q in QUESTIONS if any(f in q for f in fillers if len(f) > 4)]
    assert len(chat_prompts("evaluation")) + len(QUESTIONS) >= 50


def _corpus(domain: str, text: str) -> Corpus:
    return Corpus(domain, "written here", "none", {"a": text}, domain=domain)


pytestmark = pytest.mark.integration  # runs the real model through transformers


@pytest.fixture(scope="module")
def held(tokenizer: Any) -> dict[str, list[list[int]]]:
    text = " ".join(
        f"Line {i} of a plain document about rivers and their banks." for i in range(400)
    )
    out = heldout_prompts(tokenizer, _corpus("docs", text), 3, seed=0)
    chat = heldout_prompts(tokenizer, _corpus("chat", ""), 3, seed=0)
    return {**out, **chat}


def test_heldout_prompts_are_continuations_and_chat_questions(
    held: dict[str, list[list[int]]], tokenizer: Any
) -> None:
    assert len(held["docs"]) == 3 and all(len(p) == PROMPT_TOKENS for p in held["docs"])
    assert len(held["chat"]) == 3
    for p in held["chat"]:
        text = tokenizer.decode(p)
        assert "user" in text and text.rstrip().endswith("assistant")
        asked = [q for q in chat_prompts("evaluation") + list(QUESTIONS) if q in text]
        assert len(asked) == 1, text


def test_greedy_answers_in_a_batch_are_each_prompts_own(
    dense: Any, held: dict[str, list[list[int]]], tokenizer: Any
) -> None:
    eos = eos_ids(dense, tokenizer)
    prompts = held["docs"][:2] + held["chat"][:1]
    together = greedy(dense, prompts, 8, eos)
    for p, answer in zip(prompts, together, strict=True):
        alone = greedy(dense, [p], 8, eos)[0]
        assert answer == alone and 1 <= len(answer) <= 8


@contextmanager
def _silenced_mlp(model: Any, layers: range) -> Any:
    """A damaging cut: these layers' MLPs give nothing."""
    handles = [
        decoder_layers(model)[i].mlp.register_forward_hook(
            lambda _m, _a, out: torch.zeros_like(out)
        )
        for i in layers
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def test_the_dense_model_flips_nothing_and_a_damaging_cut_flips_answers(
    dense: Any, held: dict[str, list[list[int]]], tokenizer: Any, tmp_path: Path
) -> None:
    fe = FlipEvaluator(dense, held, eos_ids(dense, tokenizer), tokens=12)
    same = fe.evaluate()
    assert same["flips"] == 0.0 and same["overall"] == 0.0
    assert all(v["kl"] < 1e-4 for v in same["domains"].values())
    # every dense token is the dense model's own first choice
    assert same["agreement"] == 1.0 and all(v["agreement"] == 1.0 for v in same["domains"].values())
    assert same["confidence"]["auc"] is None  # nothing changed: nothing to predict
    layers = decoder_layers(dense)
    thresholds = [0.05] * len(layers)
    reference = {"thresholds": thresholds, "sparsity": [0.5] * len(layers)}
    hurt = fe.evaluate(_silenced_mlp(dense, range(2, 12)), reference=reference)
    assert hurt["domains"]["docs"]["prompts"] == 3 and hurt["domains"]["chat"]["prompts"] == 3
    assert hurt["flips"] > 0 and hurt["overall"] > 0
    worst = hurt["worst_domain"]
    assert hurt["flips"] == max(v["flips"] for v in hurt["domains"].values())
    assert hurt["kl"] == hurt["domains"][worst]["kl"] > 0.01
    # a changed answer disagrees somewhere: fewer tokens ranked first than the dense model's
    assert 0.0 < hurt["agreement"] < 1.0
    assert min(v["agreement"] for v in hurt["domains"].values()) <= hurt["agreement"]
    signals = hurt["confidence"]["signals"]
    assert set(signals) == {"entropy", "margin", "silence"}
    # the dense model is unchanged after the cut's body
    assert fe.evaluate()["overall"] == 0.0
    if hurt["overall"] < 1.0:  # both kinds of answer: every signal is rated, its curve drawn
        assert all(
            0.0 <= s["auc"] <= 1.0 and s["curve"][-1] == [1.0, 1.0] for s in signals.values()
        )
        png = draw_roc({"hurt": hurt}, tmp_path / "roc.png")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
