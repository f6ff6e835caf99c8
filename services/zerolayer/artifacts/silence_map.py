"""The silence map: per layer and channel activation statistics of a model on a corpus.

Kinds: "mlp" (the input of down_proj, i.e. act(gate) * up) and "attn" (the input of o_proj).
Thresholds are relative to each layer's own scale: the q-quantile of |a| over all of that layer's
channels and tokens. A log-spaced histogram of |a| per channel is kept, so any quantile's threshold
and every channel's share of tokens under it are read off without calibrating again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = ["KINDS", "BIN_EDGES", "KindStats", "SilenceMap"]

KINDS = ("mlp", "attn")
# 12 bins per decade from 1e-6 to 1e2; bin 0 also takes everything below, the last everything above.
BIN_EDGES = torch.logspace(-6, 2, 97, dtype=torch.float64)
_TENSORS = ("mean_abs", "mean", "rms", "max_abs", "hist", "sample_mean_abs")


@dataclass
class KindStats:
    """Statistics of one kind of activation, each tensor [layers, channels, ...]."""

    mean_abs: torch.Tensor
    mean: torch.Tensor
    rms: torch.Tensor
    max_abs: torch.Tensor
    hist: torch.Tensor  # [L, C, bins] token counts
    sample_mean_abs: torch.Tensor  # [L, samples, C] mean |a| per calibration sample

    @property
    def std(self) -> torch.Tensor:
        """Standard deviation of a per channel."""
        return (self.rms**2 - self.mean**2).clamp_min(0).sqrt()

    def threshold_bins(self, quantile: float) -> torch.Tensor:
        """Per layer, the index of the last bin under that layer's quantile threshold."""
        layer = self.hist.sum(1).double()  # [L, bins]
        cdf = layer.cumsum(1) / layer.sum(1, keepdim=True)
        return (cdf < quantile).sum(1).clamp(max=self.hist.shape[-1] - 1)

    def thresholds(self, quantile: float) -> torch.Tensor:
        """Per layer threshold on |a| (the upper edge of the quantile's bin)."""
        return BIN_EDGES[1:][self.threshold_bins(quantile)].float()

    def silent_fraction(self, quantile: float) -> torch.Tensor:
        """[L, C]: share of each channel's tokens whose |a| is under its layer's threshold."""
        return self.silent_fraction_under(self.threshold_bins(quantile))

    def silent_fraction_under(self, idx: torch.Tensor) -> torch.Tensor:
        """[L, C]: share of each channel's tokens in bins 0..idx[layer] (another map's thresholds
        applied to this map, as drift does)."""
        cum = self.hist.double().cumsum(-1)  # [L, C, bins]
        under = cum.gather(-1, idx.view(-1, 1, 1).expand(-1, cum.shape[1], 1)).squeeze(-1)
        return (under / self.hist.sum(-1).double()).float()


@dataclass
class SilenceMap:
    """Statistics for every kind, plus what produced them."""

    stats: dict[str, KindStats]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def layers(self) -> int:
        return self.stats["mlp"].mean_abs.shape[0]

    def summary(
        self, quantile: float | None = None, silent_share: float = 0.9, top: int = 20
    ) -> dict[str, Any]:
        """Per-layer silence ratio (share of channels silent on at least silent_share of tokens)
        and the top silent channels, for each kind."""
        q = self.meta.get("quantile", 0.1) if quantile is None else quantile
        out: dict[str, Any] = {"quantile": q, "silent_share": silent_share, "meta": self.meta}
        for kind, st in self.stats.items():
            frac = st.silent_fraction(q)
            ratio = (frac >= silent_share).float().mean(1)
            flat = frac.flatten()
            order = torch.argsort(flat, descending=True)[:top]
            channels = frac.shape[1]
            out[kind] = {
                "thresholds": [round(float(t), 8) for t in st.thresholds(q)],
                "silence_ratio": [round(float(r), 5) for r in ratio],
                "top_silent": [
                    {
                        "layer": int(i // channels),
                        "channel": int(i % channels),
                        "silent_fraction": round(float(flat[i]), 5),
                    }
                    for i in order
                ],
            }
        return out

    def save(self, folder: Path) -> Path:
        """Write silence_map.safetensors and silence_map.json into folder."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {
            f"{kind}.{name}": getattr(st, name).contiguous()
            for kind, st in self.stats.items()
            for name in _TENSORS
        }
        save_file(
            tensors,
            str(folder / "silence_map.safetensors"),
            metadata={"meta": json.dumps(self.meta)},
        )
        (folder / "silence_map.json").write_text(json.dumps(self.summary(), indent=1) + "\n")
        return folder

    @classmethod
    def load(cls, folder: Path) -> SilenceMap:
        """Read a map written by save()."""
        from safetensors import safe_open

        path = Path(folder) / "silence_map.safetensors"
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {}).get("meta", "{}"))
            raw = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no iter)
        stats = {
            kind: KindStats(**{n: raw[f"{kind}.{n}"] for n in _TENSORS})
            for kind in KINDS
            if f"{kind}.mean_abs" in raw
        }
        return cls(stats, meta)
