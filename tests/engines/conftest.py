"""Tier artifacts for engine tests: a static MLP cut whose widths differ per layer (masked and
pruned), and the greedy reference of transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from zerolayer.artifacts import save_masked, save_pruned
from zerolayer.collapse.model import decoder_layers, load_model

NEW_TOKENS = 24


@pytest.fixture(scope="session")
def pruned_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cut whose widths differ per layer (2% to 10%, the last two layers dense); its masked
    artifact lies beside it (pruned_dir.parent / "masked")."""
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


def greedy(model: Any, ids: list[int], n: int = NEW_TOKENS, stop_at_eos: bool = False) -> list[int]:
    """transformers' greedy continuation of n tokens (with stop_at_eos: up to and including the
    first end-of-sequence token, as a serving engine stops there)."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            max_new_tokens=n,
            do_sample=False,
            min_new_tokens=None if stop_at_eos else n,
        )
    tokens = out[0, len(ids) :].tolist()
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    if stop_at_eos:
        for j, t in enumerate(tokens):
            if t in eos:
                return tokens[: j + 1]
    return tokens
