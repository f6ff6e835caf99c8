"""2:4 semi-structured sparsity: in every group of 4 consecutive input weights of a row, the 2
with the smallest |W| x ||a|| (weight magnitude times the calibration norm of that input, as Wanda
scores them) are set to zero. Applied only to the layers and projections whose ablation keeps the
tier within its budget: one-shot 2:4 everywhere roughly doubles perplexity."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from zerolayer.artifacts import ATTN_PROJ, MLP_PROJ
from zerolayer.collapse.model import decoder_layers, linear, removing
from zerolayer.collapse.progress import bar

__all__ = ["MLP_PROJ", "ATTN_PROJ", "linear", "input_norms", "mask_24", "is_24", "sparsified"]


@torch.no_grad()
def input_norms(
    model: Any, windows: list[list[int]], progress: bool = True
) -> dict[tuple[int, str], torch.Tensor]:
    """||a_j|| over calibration tokens for the input of every projection of every layer."""
    sums: dict[tuple[int, str], torch.Tensor] = {}
    handles = []
    for i, layer in enumerate(decoder_layers(model)):
        for name in MLP_PROJ + ATTN_PROJ:

            def hook(
                _m: Any, args: tuple[torch.Tensor, ...], key: tuple[int, str] = (i, name)
            ) -> None:
                a = args[0].reshape(-1, args[0].shape[-1]).double()
                sums[key] = sums.get(key, 0) + (a * a).sum(0)

            handles.append(linear(layer, name).register_forward_pre_hook(hook))
    with removing(handles):
        for ids in bar(windows, desc="input norms", unit="sample", disable=not progress):
            model(torch.tensor([ids]), use_cache=False)
    return {k: v.sqrt().float() for k, v in sums.items()}


def mask_24(weight: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """Bool mask of the weights kept: 2 of every 4 consecutive inputs per row."""
    out_f, in_f = weight.shape
    if in_f % 4:
        raise ValueError(f"2:4 needs input features divisible by 4, got {in_f}")
    score = (weight.abs() * norms.view(1, -1)).view(out_f, in_f // 4, 4)
    top = score.topk(2, dim=-1).indices
    keep = torch.zeros_like(score, dtype=torch.bool).scatter_(-1, top, True)
    return keep.view(out_f, in_f)


def is_24(weight: torch.Tensor) -> bool:
    """True when every group of 4 consecutive inputs of every row has at least 2 zeros."""
    groups = weight.reshape(weight.shape[0], -1, 4)
    return bool(((groups == 0).sum(-1) >= 2).all())


@contextmanager
def sparsified(
    model: Any, units: Sequence[tuple[int, str]], norms: dict[tuple[int, str], torch.Tensor]
) -> Iterator[None]:
    """Zero the 2:4-pruned weights of the given (layer, projection) units; restore on exit."""
    layers = decoder_layers(model)
    saved = {}
    try:
        with torch.no_grad():
            for i, name in units:
                lin = linear(layers[i], name)
                saved[(i, name)] = lin.weight.data.clone()
                lin.weight.data.mul_(mask_24(lin.weight.data, norms[(i, name)]))
        yield
    finally:
        for (i, name), w in saved.items():
            linear(layers[i], name).weight.data.copy_(w)
