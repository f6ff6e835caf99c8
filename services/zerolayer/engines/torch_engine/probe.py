"""What a sampled forward pass of the torch engine saw, for the production signals of a
collapsed tier: per decoder layer, how many of the MLP's intermediate activations (down_proj's
inputs) were at or under a reference |a| threshold (the silence map's, so every tier is measured
against the same line), and, where the tier thresholds projection inputs (the dynamic tier), how
many inputs its thresholds skipped.

Only the channels a tier serves are counted (a pruned tier's removed channels are not there), so
a tier's live figure compares with its calibrated one, measured by this same probe on the
calibration side (zerolayer.collapse.reference)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["Probe"]


class Probe:
    """Counts, kept until drained. `thresholds`: per layer reference |a| on down_proj's inputs
    (None: the activations are not counted, only the skips)."""

    def __init__(self, thresholds: list[float] | None, layers: int):
        self.thresholds = thresholds if thresholds and len(thresholds) == layers else None
        self.layers = layers
        self._reset()

    def _reset(self) -> None:
        self.under = [0] * self.layers
        self.total = [0] * self.layers
        self.skipped = 0
        self.seen = 0
        self.tokens = 0
        self.passes = 0

    def step(self, tokens: int) -> None:
        """A sampled forward over `tokens` tokens begins."""
        self.tokens += tokens
        self.passes += 1

    def mlp(self, layer: int, a: torch.Tensor) -> None:
        """down_proj's input a [tokens, width] of one layer."""
        if self.thresholds is None:
            return
        self.under[layer] += int((a.abs() <= self.thresholds[layer]).sum())
        self.total[layer] += a.numel()

    def inputs(self, threshold: float | None, x: torch.Tensor) -> None:
        """A projection input x and the tier's threshold on it (None: not thresholded)."""
        if threshold is None:
            return
        self.skipped += int((x.abs() <= threshold).sum())
        self.seen += x.numel()

    def drain(self) -> dict[str, Any]:
        """The counts since the last drain, and zero them."""
        out = {
            "tokens": self.tokens,
            "passes": self.passes,
            "under": list(self.under),
            "total": list(self.total),
            "skipped": self.skipped,
            "seen": self.seen,
        }
        self._reset()
        return out

    @staticmethod
    def merge(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
        """Two drained counts added together (a may be None)."""
        if a is None:
            return b
        out = {k: a[k] + b[k] for k in ("tokens", "passes", "skipped", "seen")}
        for k in ("under", "total"):
            out[k] = [x + y for x, y in zip(a[k], b[k], strict=True)]
        return out

    @staticmethod
    def rates(counts: dict[str, Any]) -> dict[str, Any]:
        """Shares from drained counts: per layer sparsity (None where nothing was counted) and
        the skip rate (None for a tier without thresholds)."""
        return {
            "sparsity": [
                u / t if t else None for u, t in zip(counts["under"], counts["total"], strict=True)
            ],
            "skip_rate": counts["skipped"] / counts["seen"] if counts["seen"] else None,
            "tokens": counts["tokens"],
        }
