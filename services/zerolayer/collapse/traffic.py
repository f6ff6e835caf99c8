"""The traffic domain: prompts kept from opted-in keys (store.traffic), answered by the dense
model and rendered with its chat template, split by a hash of their ids into calibration,
validation and evaluation parts. `zerolayer collapse build --from-traffic` adds it to the
standard domains; its evaluation part is the held-out traffic a candidate must pass on."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zerolayer.collapse.corpus import Corpus
from zerolayer.collapse.domains import _parts

__all__ = ["MIN_PROMPTS", "traffic_domain", "load_traffic", "live_corpus"]

MIN_PROMPTS = 12  # fewer cannot fill three parts that each say something
DOMAIN = "traffic"
LICENCE = "customers' prompts kept with their consent (opt-in); not redistributable"


def load_traffic(cfg: Any, model: str) -> list[Any]:
    """The kept prompts of a model, of every key, from the platform's Redis."""
    from zerolayer.store.embedded import platform_redis
    from zerolayer.store.traffic import TrafficStore

    with platform_redis(cfg) as client:
        return TrafficStore(client, cfg.traffic_sampling.retention_s).entries(model=model)


def traffic_domain(
    entries: Sequence[Any],
    model_dir: Path,
    cache_dir: Path | None,
    limit: int = 256,
    max_tokens: int = 160,
    seed: int = 0,
) -> dict[str, Corpus]:
    """The traffic domain's three parts from kept prompts (at most `limit`, a seeded sample),
    each prompt with the dense model's greedy reply (cached by the prompts' hash). Raises
    ValueError when there are too few prompts for three parts."""
    from zerolayer.collapse.chat import cached_replies
    from zerolayer.tokenfix.prompt import PromptBuilder

    chosen = list(entries)
    random.Random(seed).shuffle(chosen)
    chosen = sorted(chosen[:limit], key=lambda e: e.entry_id)
    if len(chosen) < MIN_PROMPTS:
        raise ValueError(
            f"the traffic sample holds {len(chosen)} prompts of this model; at least "
            f"{MIN_PROMPTS} are needed (opt keys in with `zerolayer keys sampling KEY on`)"
        )
    builder = PromptBuilder(Path(model_dir))
    room = 1024 - max_tokens - 1  # the answering engine's context
    prompts = [builder.chat(e.messages())[-room:] for e in chosen]
    digest = hashlib.sha256(json.dumps(prompts).encode()).hexdigest()[:16]
    cached = (
        Path(cache_dir) / f"traffic-{Path(model_dir).name}-{digest}.json" if cache_dir else None
    )
    replies = cached_replies(
        Path(model_dir),
        lambda: prompts,
        max_tokens,
        cached,
        f"traffic: the model answers {len(prompts)} kept prompts",
    )
    docs: dict[str, str] = {}
    for e, reply in zip(chosen, replies, strict=True):
        turns = [*e.messages(), {"role": "assistant", "content": reply}]
        docs[e.entry_id] = str(builder.tokenizer.apply_chat_template(turns, tokenize=False))
    split = _parts(DOMAIN, docs)
    for part in ("validation", "evaluation"):  # a small sample: keep every part non-empty
        if not split[part]:
            last = sorted(split["calibration"])[-1]
            split[part] = {last: split["calibration"].pop(last)}
    keys = sorted({e.key_id for e in chosen})
    source = (
        f"{len(chosen)} prompts kept from {len(keys)} opted-in API keys, answered by "
        f"{Path(model_dir).name} (greedy)"
    )
    return {
        part: Corpus(
            name=f"{DOMAIN}-{part}",
            source=source,
            licence=LICENCE,
            documents=d,
            domain=DOMAIN,
        )
        for part, d in split.items()
    }


def live_corpus(entries: Sequence[Any], tokenizer: Any) -> Corpus:
    """The kept prompts as the tiers saw them (chat template applied, ready for the answer):
    the live input that `collapse drift --live` measures against the stored silence map."""
    if not entries:
        raise ValueError(
            "no prompts are kept for this model (opt keys in with `zerolayer keys sampling KEY on`)"
        )
    docs = {
        e.entry_id: tokenizer.apply_chat_template(
            e.messages(), tokenize=False, add_generation_prompt=True
        )
        for e in entries
    }
    keys = sorted({e.key_id for e in entries})
    return Corpus(
        name="live-traffic",
        source=f"{len(docs)} prompts kept from {len(keys)} opted-in API keys",
        licence=LICENCE,
        documents=docs,
        domain=DOMAIN,
    )
