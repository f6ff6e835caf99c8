"""What a sampled forward pass of the torch engine saw, for the production signals of a
collapsed tier: per decoder layer, how many of the MLP's intermediate activations (down_proj's
inputs) were at or under a reference |a| threshold (the silence map's, so every tier is measured
against the same line), and, where the tier thresholds projection inputs (the dynamic tier), how
many inputs its thresholds skipped.

Only the channels a tier serves are counted (a pruned tier's removed channels are not there), so
a tier's live figure compares with its calibrated one, measured by this same probe on the
calibration side (zerolayer.collapse.reference). Per channel it also counts the tokens at or
under the threshold, which `zerolayer collapse drift --live` compares with the stored silence
map channel by channel."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["Probe", "add_counts"]


def add_counts(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    """Two per-channel counts added (None: nothing counted)."""
    if a is None or b is None:
        return b if a is None else a
    return a + b


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
        # per layer: tokens counted, and per channel how many of them were at or under
        self.rows = [0] * self.layers
        self.channels: list[torch.Tensor | None] = [None] * self.layers
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
        under = (a.abs() <= self.thresholds[layer]).reshape(-1, a.shape[-1])
        per_channel = under.sum(0, dtype=torch.int64)
        self.under[layer] += int(per_channel.sum())
        self.total[layer] += under.numel()
        self.rows[layer] += under.shape[0]
        seen = self.channels[layer]
        self.channels[layer] = per_channel if seen is None else seen + per_channel

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
            "rows": list(self.rows),
            "channels": list(self.channels),
        }
        self._reset()
        return out

    @staticmethod
    def merge(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
        """Two drained counts added together (a may be None)."""
        if a is None:
            return b
        out = {k: a[k] + b[k] for k in ("tokens", "passes", "skipped", "seen")}
        for k in ("under", "total", "rows"):
            out[k] = [x + y for x, y in zip(a[k], b[k], strict=True)]
        out["channels"] = [
            add_counts(x, y) for x, y in zip(a["channels"], b["channels"], strict=True)
        ]
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
