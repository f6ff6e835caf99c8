"""Non-uniform allocation of a static MLP cut across layers, within a perplexity budget.

1. Sensitivity: cut one layer at a time (OBS ranking + least-squares repair) at a few levels and
   measure the perplexity change on validation windows (calibration-side text, never the
   evaluation corpus).
2. Greedy allocation: grow the cut in steps, each time in the layer whose predicted cost per
   removed channel is lowest (piecewise-linear in the measured levels).
3. Validation: layers do not add up exactly, so the total predicted cost allowed is searched until
   the real measured change on the validation windows fits the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from zerolayer.collapse.ablate import Evaluator
from zerolayer.collapse.model import decoder_layers, projection
from zerolayer.collapse.reconstruct import obs_keep, repaired

__all__ = [
    "Sensitivity",
    "layer_sensitivity",
    "greedy_shares",
    "Choice",
    "choose",
    "static_cut",
]


@dataclass
class Sensitivity:
    """Measured perplexity change per layer at each level (share of that layer's channels)."""

    levels: list[float]
    delta: dict[int, list[float]]

    def predict(self, layer: int, share: float) -> float:
        """Piecewise-linear interpolation through (0, 0) and the measured levels."""
        xs = [0.0, *self.levels]
        ys = [0.0, *(max(0.0, d) for d in self.delta[layer])]
        if share >= xs[-1]:
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            return ys[-1] + slope * (share - xs[-1]) * 2  # beyond the measured range: be wary
        for j in range(1, len(xs)):
            if share <= xs[j]:
                t = (share - xs[j - 1]) / (xs[j] - xs[j - 1])
                return ys[j - 1] + t * (ys[j] - ys[j - 1])
        return ys[-1]


def _keeps(
    model: Any, grams: list[torch.Tensor], shares: dict[int, float], protect: torch.Tensor
) -> dict[int, torch.Tensor]:
    layers = decoder_layers(model)
    return {
        i: obs_keep(projection(layers[i], "mlp").weight.detach(), grams[i], s, protect[i])
        for i, s in shares.items()
        if s > 0
    }


def layer_sensitivity(
    evaluator: Evaluator,
    cut_one: Callable[[int, float], AbstractContextManager[None]],
    layers: Sequence[int],
    levels: Sequence[float] = (0.25, 0.5),
) -> Sensitivity:
    """Apply cut_one(layer, level) to each layer alone at each level; measure the change."""
    delta: dict[int, list[float]] = {}
    for i in tqdm(layers, desc="layer sensitivity", unit="layer"):
        delta[i] = [evaluator.evaluate(cut_one(i, level)).ppl_delta for level in levels]
    return Sensitivity(list(levels), delta)


def greedy_shares(
    sens: Sensitivity, cost_budget: float, step: float = 1 / 32, max_share: float = 0.75
) -> dict[int, float]:
    """Per-layer cut shares that remove the most channels for a predicted total cost."""
    shares = {i: 0.0 for i in sens.delta}
    total = 0.0
    while True:
        best, best_cost = None, float("inf")
        for i, s in shares.items():
            if s + step > max_share + 1e-9:
                continue
            cost = sens.predict(i, s + step) - sens.predict(i, s)
            if cost < best_cost:
                best, best_cost = i, cost
        if best is None or total + best_cost > cost_budget:
            return shares
        shares[best] += step
        total += best_cost


@dataclass
class Choice:
    """An allocation that was measured on the validation windows."""

    shares: dict[int, float]
    val_delta: float
    removed: float


def choose(
    sens: Sensitivity,
    validator: Evaluator,
    budget: float,
    make_cut: Callable[[dict[int, float]], AbstractContextManager[None]],
    removed: Callable[[dict[int, float]], float],
    tries: int = 6,
) -> Choice:
    """Search the predicted-cost allowance so that the measured validation change of the greedy
    allocation fits the budget; the allocation that removes most and fits wins."""
    lo, hi = 0.0, budget * 4
    best = Choice({i: 0.0 for i in sens.delta}, 0.0, 0.0)
    for _ in tqdm(range(tries), desc="allocation search", unit="try"):
        mid = (lo + hi) / 2
        shares = greedy_shares(sens, mid)
        delta = validator.evaluate(make_cut(shares)).ppl_delta
        if delta <= budget:
            lo = mid
            if removed(shares) > best.removed:
                best = Choice(shares, delta, removed(shares))
        else:
            hi = mid
    return best


def static_cut(
    model: Any, grams: list[torch.Tensor], protect: torch.Tensor
) -> Callable[[dict[int, float]], AbstractContextManager[None]]:
    """make_cut for static MLP channel cuts (OBS ranking + least-squares repair)."""
    return lambda shares: repaired(model, _keeps(model, grams, shares, protect), grams)
