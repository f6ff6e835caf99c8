"""vLLM serves a pruned tier checkpoint (per-layer MLP widths, registered through zerolayer's
vllm.general_plugins entry point in vLLM's spawned engine core) and gives exactly the tokens of
the masked model in transformers at temperature 0."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from zerolayer.collapse.artifacts import load_masked, load_pruned, save_masked, save_pruned
from zerolayer.collapse.model import decoder_layers, load_model
from zerolayer.engines.base import SamplingSpec
from zerolayer.engines.vllm_engine import VLLMEngine

NEW_TOKENS = 24


@pytest.fixture(scope="module")
def pruned_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cut whose widths differ per layer (2% to 10%, the last two layers dense)."""
    dense = load_model(model_dir)
    layers = decoder_layers(dense)
    gen = torch.Generator().manual_seed(0)
    keep, down = {}, {}
    for i in range(len(layers) - 2):
        w = layers[i].mlp.down_proj.weight.detach()
        n = w.shape[1]
        cut = torch.randperm(n, generator=gen)[: int(n * (0.02 + 0.02 * (i % 5)))]
        keep[i] = torch.ones(n, dtype=torch.bool)
        keep[i][cut] = False
        down[i] = w * keep[i]
    out = tmp_path_factory.mktemp("tier")
    save_masked(out / "masked", keep, down, {"model": "smollm2-135m"})
    return save_pruned(out / "pruned", model_dir, out / "masked")


def _greedy(model: Any, ids: list[int]) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            min_new_tokens=NEW_TOKENS,
        )
    return out[0, len(ids) :].tolist()


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
    expected = [_greedy(masked, ids) for ids in chats]
    pruned = load_pruned(pruned_dir)
    assert [_greedy(pruned, ids) for ids in chats] == expected
    got = asyncio.run(_vllm_tokens(pruned_dir, chats))
    assert got == expected
