"""Chat text for calibration and evaluation: the dense model's own answers to prompts written
here, in its chat template.

Documentation text alone hides what a chat tier loses: a static cut distilled on pydoc text kept
pydoc perplexity within +3% and code answers intact, yet answered "The capital of France is
France." So the default corpora mix chat turns with the pydoc text. The prompts come from
templates and fillers; calibration and evaluation use disjoint fillers, so no evaluation question
is ever calibrated on. Replies are greedy, generated once by zerolayer's torch engine (batched),
and cached next to the pydoc corpora.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from zerolayer.collapse.corpus import Corpus, mixed_corpus
from zerolayer.collapse.progress import bar

__all__ = ["chat_prompts", "chat_corpus", "cached_replies", "mixed_corpus"]

TEMPLATES = (
    "What is the capital of {place}?",
    "Tell me three facts about {place}.",
    "Explain {topic} in simple terms.",
    "Write a short poem about {thing}.",
    "Give me three tips for {activity}.",
    "Write a Python function that {task}.",
    "What is {a} plus {b}? Answer with the number and one sentence.",
    "Who was {person}?",
    "Describe {thing} to a child.",
    "What are the pros and cons of {activity}?",
)
FILLERS: dict[str, dict[str, tuple[Any, ...]]] = {
    "calibration": {
        "place": ("Germany", "Japan", "Brazil", "Kenya", "Canada", "Italy", "India", "Norway"),
        "topic": (
            "photosynthesis",
            "gravity",
            "inflation",
            "vaccines",
            "the water cycle",
            "electric circuits",
            "plate tectonics",
            "supply and demand",
        ),
        "thing": ("the sea", "a city at night", "autumn", "a lighthouse", "the moon", "rain"),
        "activity": (
            "learning a language",
            "running",
            "saving money",
            "cooking rice",
            "working from home",
            "public speaking",
        ),
        "task": (
            "reverses a string",
            "checks whether a number is prime",
            "counts the words in a sentence",
            "returns the largest item of a list",
            "converts Celsius to Fahrenheit",
            "removes duplicates from a list",
        ),
        "ab": ((12, 7), (45, 38), (103, 99), (6, 250)),
        "person": (
            "Marie Curie",
            "Isaac Newton",
            "Ada Lovelace",
            "Nelson Mandela",
            "Leonardo da Vinci",
            "Albert Einstein",
        ),
    },
    "evaluation": {
        "place": ("France", "Spain", "Egypt", "Australia", "Mexico"),
        "topic": ("evolution", "the greenhouse effect", "compound interest", "magnetism"),
        "thing": ("a forest", "snow", "the stars", "a river"),
        "activity": ("gardening", "sleeping well", "studying for exams", "cycling to work"),
        "task": (
            "sorts a list of names",
            "computes a factorial",
            "checks whether a string is a palindrome",
            "sums the digits of a number",
        ),
        "ab": ((23, 19), (150, 75), (8, 9)),
        "person": ("Charles Darwin", "Frida Kahlo", "Alan Turing", "Cleopatra"),
    },
}


def chat_prompts(split: str) -> list[str]:
    """Every prompt of a split: each template with each of its fillers."""
    fill = FILLERS[split]
    out = []
    for t in TEMPLATES:
        if "{a}" in t:
            out += [t.format(a=a, b=b) for a, b in fill["ab"]]
            continue
        key = next(k for k in ("place", "topic", "thing", "activity", "task", "person") if k in t)
        out += [t.format(**{key: v}) for v in fill[key]]
    return out


async def _replies(model_dir: Path, prompts: list[list[int]], max_tokens: int) -> list[str]:
    from zerolayer.engines.base import SamplingSpec
    from zerolayer.engines.torch_engine import TorchEngine

    engine = TorchEngine(str(model_dir), max_model_len=1024, max_num_seqs=32)
    await engine.start()
    meter = bar(total=len(prompts), desc="chat corpus: the model answers", unit="prompt")
    try:

        async def one(i: int, ids: list[int]) -> str:
            spec = SamplingSpec(f"chat-{i}", ids, max_tokens, temperature=0.0)
            text = "".join([d.text async for d in engine.generate(spec)])
            meter.update(1)
            return text

        return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))))
    finally:
        meter.close()
        await engine.shutdown()


def cached_replies(
    model_dir: Path,
    prompt_ids: Any,
    max_tokens: int,
    cached: Path | None,
    say: str,
) -> list[str]:
    """The dense model's greedy replies to prompts (prompt_ids(): their token ids, made only
    when they are not cached), read from `cached` when it exists, else generated once (saying
    `say`) and written there."""
    if cached is not None and cached.exists():
        return list(json.loads(cached.read_text()))
    print(say, flush=True)
    replies = asyncio.run(_replies(Path(model_dir), prompt_ids(), max_tokens))
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(replies))
    return replies


def chat_corpus(
    split: str,
    model_dir: Path,
    cache_dir: Path | None = None,
    max_tokens: int = 160,
    limit: int | None = None,
) -> Corpus:
    """The split's prompts with the dense model's greedy replies, each rendered with the chat
    template as one document; generated once per model and cached in cache_dir."""
    from zerolayer.tokenfix.prompt import PromptBuilder

    model_dir = Path(model_dir)
    prompts = chat_prompts(split)[:limit]
    name = f"chat-{split}-{model_dir.name}-{max_tokens}-{len(prompts)}.json"
    cached = Path(cache_dir) / name if cache_dir else None
    builder = PromptBuilder(model_dir)
    replies = cached_replies(
        model_dir,
        lambda: [builder.chat([{"role": "user", "content": p}]) for p in prompts],
        max_tokens,
        cached,
        f"chat corpus: the model answers {len(prompts)} {split} prompts (once)",
    )
    docs: dict[str, str] = {}
    for i, (p, r) in enumerate(zip(prompts, replies, strict=True)):
        turns = [{"role": "user", "content": p}, {"role": "assistant", "content": r}]
        docs[f"{i:03d}"] = str(builder.tokenizer.apply_chat_template(turns, tokenize=False))
    return Corpus(
        name=f"chat-{split}",
        source=f"{len(prompts)} prompts written in zerolayer, answered by {model_dir.name} "
        "(greedy)",
        licence="generated by the model being compressed",
        documents=docs,
    )
