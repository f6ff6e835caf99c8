"""Least-squares repair of a channel cut. With G = A^T A, the Gram matrix of a projection's input
over calibration tokens, removing input channels R and keeping K is best compensated (in the
squared error of the projection's output on those tokens) by W'_K = W_K + W_R G_RK G_KK^-1.
The same Gram matrix ranks channels by the error their removal leaves (optimal brain surgeon):
||W[:, c]||^2 / [G^-1]_cc.

Measured on SmolLM2-135M (docs/collapse.md): a uniform 10% MLP cut costs +9.4% perplexity with
plain masking and +3.6% with this ranking and repair.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch

from zerolayer.collapse.calibrate import capture_inputs
from zerolayer.collapse.model import PROJECTIONS_OF, decoder_layers, linear, projection
from zerolayer.collapse.progress import bar

__all__ = [
    "gram_matrices",
    "obs_keep",
    "repaired_weight",
    "repaired",
    "swapped",
    "swapped_named",
]


@torch.no_grad()
def gram_matrices(
    model: Any, windows: list[list[int]], kind: str = "mlp", progress: bool = True
) -> list[torch.Tensor]:
    """Per layer, A^T A of the projection's input over all window tokens (float64)."""
    layers = decoder_layers(model)
    grams = [
        torch.zeros(
            projection(layer, kind).in_features,
            projection(layer, kind).in_features,
            dtype=torch.float64,
        )
        for layer in layers
    ]

    def add(i: int, k: str, x: torch.Tensor) -> None:
        if k == kind:
            a = x.reshape(-1, x.shape[-1]).double()
            grams[i] += a.T @ a

    with capture_inputs(model, add):
        for ids in bar(windows, desc="gram matrices", unit="sample", disable=not progress):
            model(torch.tensor([ids]), use_cache=False)
    return grams


def _damped(gram: torch.Tensor, damp: float) -> torch.Tensor:
    return gram + damp * gram.diagonal().mean() * torch.eye(gram.shape[0], dtype=gram.dtype)


def obs_keep(
    weight: torch.Tensor,
    gram: torch.Tensor,
    share: float,
    protect: torch.Tensor | None = None,
    rounds: int = 4,
    damp: float = 1e-3,
) -> torch.Tensor:
    """Bool keep-mask that removes `share` of the input channels, in `rounds` steps, each time
    the ones whose removal leaves the least output error given the channels still kept."""
    w = weight.double()
    g = _damped(gram, damp)
    n = w.shape[1]
    keep = torch.ones(n, dtype=torch.bool)
    n_cut = int(round(share * n))
    for r in range(rounds):
        kept = keep.nonzero().squeeze(1)
        inv_diag = torch.linalg.inv(g[kept][:, kept]).diagonal()
        saliency = (w[:, kept] ** 2).sum(0) / inv_diag
        if protect is not None:
            saliency[protect[kept]] = float("inf")
        step = int(round(n_cut * (r + 1) / rounds)) - int((~keep).sum())
        if step > 0:
            keep[kept[torch.argsort(saliency)[:step]]] = False
    return keep


def repaired_weight(
    weight: torch.Tensor, gram: torch.Tensor, keep: torch.Tensor, damp: float = 1e-3
) -> torch.Tensor:
    """The projection weight with removed input columns zero and kept ones corrected."""
    w = weight.double()
    g = _damped(gram, damp)
    kept, removed = keep.nonzero().squeeze(1), (~keep).nonzero().squeeze(1)
    out = torch.zeros_like(w)
    if removed.numel():
        corr = torch.linalg.solve(g[kept][:, kept], g[kept][:, removed] @ w[:, removed].T).T
        out[:, kept] = w[:, kept] + corr
    else:
        out[:, kept] = w[:, kept]
    return out.to(weight.dtype)


def swapped(
    model: Any, weights: dict[int, torch.Tensor], kind: str = "mlp"
) -> AbstractContextManager[None]:
    """Run the body with these projection weights (down_proj for 'mlp', o_proj for 'attn') in
    place of the model's (restored on exit)."""
    name = PROJECTIONS_OF[kind][0]
    return swapped_named(model, {(i, name): w for i, w in weights.items()})


@contextmanager
def swapped_named(model: Any, weights: dict[tuple[int, str], torch.Tensor]) -> Iterator[None]:
    """Run the body with these weights, keyed by (layer, projection name), in place of the
    model's (restored on exit)."""
    layers = decoder_layers(model)
    saved = {}
    try:
        for (i, p), w in weights.items():
            proj = linear(layers[i], p)
            saved[(i, p)] = proj.weight.data.clone()
            proj.weight.data.copy_(w)
        yield
    finally:
        for (i, p), w in saved.items():
            linear(layers[i], p).weight.data.copy_(w)


def repaired(
    model: Any, keep: dict[int, torch.Tensor], grams: list[torch.Tensor], kind: str = "mlp"
) -> AbstractContextManager[None]:
    """Apply cuts with least-squares repair (swapped projection weights, restored on exit)."""
    layers = decoder_layers(model)
    weights = {
        i: repaired_weight(projection(layers[i], kind).weight.data, grams[i], mask)
        for i, mask in keep.items()
    }
    return swapped(model, weights, kind)
