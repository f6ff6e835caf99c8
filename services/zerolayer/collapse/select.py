"""Choosing what to cut from a silence map: activation-aware channel scores, outlier protection,
and keep-masks per layer."""

from __future__ import annotations

from typing import Any

import torch

from zerolayer.collapse.model import decoder_layers, projection
from zerolayer.collapse.silence_map import SilenceMap

__all__ = ["channel_scores", "protected", "keep_masks", "dynamic_thresholds"]


def channel_scores(smap: SilenceMap, model: Any, kind: str = "mlp") -> torch.Tensor:
    """[L, C]: expected size of each channel's contribution to the projection's output,
    sqrt(E[a^2]) * ||W[:, c]||. Weight norm alone ignores how the channel is driven and wrecks the
    model; activation alone ignores how much the channel is amplified."""
    st = smap.stats[kind]
    norms = torch.stack(
        [
            projection(layer, kind).weight.detach().float().norm(dim=0)
            for layer in decoder_layers(model)
        ]
    )
    return st.rms * norms


def protected(
    smap: SilenceMap, kind: str = "mlp", top_share: float = 0.005, factor: float = 20.0
) -> torch.Tensor:
    """[L, C] bool: channels never cut, those with outlier max |a| ("super weights"): the top
    top_share of each layer by max |a|, and any whose max |a| is over factor x the layer median."""
    mx = smap.stats[kind].max_abs
    k = max(1, int(round(mx.shape[1] * top_share)))
    out = torch.zeros_like(mx, dtype=torch.bool)
    out.scatter_(1, mx.topk(k, dim=1).indices, True)
    return out | (mx > factor * mx.median(dim=1, keepdim=True).values)


def keep_masks(
    scores: torch.Tensor,
    cut_share: dict[int, float],
    protect: torch.Tensor | None = None,
) -> dict[int, torch.Tensor]:
    """Per layer, a bool keep-mask that drops the lowest-scoring cut_share[layer] of channels,
    never a protected one."""
    masks = {}
    for layer, share in cut_share.items():
        s = scores[layer].clone()
        if protect is not None:
            s[protect[layer]] = float("inf")
        n_cut = int(round(share * s.numel()))
        keep = torch.ones_like(s, dtype=torch.bool)
        if n_cut:
            keep[torch.argsort(s)[:n_cut]] = False
        if protect is not None:
            keep |= protect[layer]
        masks[layer] = keep
    return masks


def dynamic_thresholds(
    smap: SilenceMap, sparsity: dict[int, float], kind: str = "mlp"
) -> dict[int, float]:
    """Per layer, the |a| threshold under which that share of the layer's activations falls."""
    st = smap.stats[kind]
    return {layer: float(st.thresholds(q)[layer]) for layer, q in sparsity.items()}
