"""vLLM serves a pruned tier checkpoint (per-layer MLP widths, registered through zerolayer's
vllm.general_plugins entry point in vLLM's spawned engine core) and gives exactly the tokens of
the masked model in transformers at temperature 0."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from zerolayer.collapse.apply import load_masked, load_pruned
from zerolayer.engines.base import SamplingSpec
from zerolayer.engines.vllm_engine import VLLMEngine

from tests.engines.conftest import NEW_TOKENS, greedy

pytestmark = pytest.mark.integration  # runs vLLM


async def _vllm_tokens(model_dir: Path, prompts: list[list[int]]) -> list[list[int]]:
    engine = VLLMEngine(str(model_dir), max_model_len=512, kv_cache_gib=1, max_num_seqs=4)
    await engine.start()
    try:
        results = []
        for n, ids in enumerate(prompts):
            spec = SamplingSpec(f"r{n}", ids, NEW_TOKENS, temperature=0.0)
            tokens: list[int] = []
            async for delta in engine.generate(spec):
                tokens.extend(delta.token_ids)
            results.append(tokens)
        return results
    finally:
        await engine.shutdown()


def test_pruned_checkpoint_names_the_plugin_architecture(pruned_dir: Path) -> None:
    cfg = json.loads((pruned_dir / "config.json").read_text())
    assert cfg["architectures"] == ["ZerolayerLlamaForCausalLM"]
    widths = cfg["zerolayer"]["intermediate_sizes"]
    assert len(set(widths)) > 3 and max(widths) == 1536


def test_vllm_pruned_tokens_equal_masked_transformers_tokens(
    pruned_dir: Path, model_dir: Path, prompts: Any
) -> None:
    chats = [
        prompts.chat([{"role": "user", "content": "What is the capital of France?"}]),
        prompts.completion("def fibonacci(n):"),
    ]
    masked = load_masked(model_dir, pruned_dir.parent / "masked")
    expected = [greedy(masked, ids) for ids in chats]
    pruned = load_pruned(pruned_dir)
    assert [greedy(pruned, ids) for ids in chats] == expected
    got = asyncio.run(_vllm_tokens(pruned_dir, chats))
    assert got == expected
