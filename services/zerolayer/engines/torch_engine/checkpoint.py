"""What the torch engine reads from disk: a Llama checkpoint's shape (config.json) and its
tensors, with a tier's artifact applied to them (masked: the kept MLP channels only; dynamic:
the distilled down_proj weights and the input thresholds; sparse24: the 2:4 weights; pruned: the
pruned checkpoint itself)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from zerolayer.artifacts import (
    ARTIFACTS,
    MLP_PROJ,
    layer_widths,
    narrow_state,
    read_config,
    read_dynamic,
    read_masks,
    read_sparse24,
    read_state,
)

__all__ = ["Shape", "TierWeights", "read_tier"]


@dataclass(frozen=True)
class Shape:
    """The dimensions a Llama checkpoint's config.json declares."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    vocab: int
    eps: float
    rope_theta: float
    tied: bool
    widths: tuple[int, ...]

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Shape:
        """The shape of a config.json; ValueError for models this engine does not serve."""
        if cfg.get("model_type") not in ("llama", None):
            raise ValueError(f"the torch engine serves Llama models, not {cfg.get('model_type')}")
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
            raise ValueError(f"unsupported rope type {rope.get('rope_type')}")
        heads = int(cfg["num_attention_heads"])
        layers = int(cfg["num_hidden_layers"])
        widths = layer_widths(cfg) or [int(cfg["intermediate_size"])] * layers
        return cls(
            hidden=int(cfg["hidden_size"]),
            heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
            layers=layers,
            vocab=int(cfg["vocab_size"]),
            eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
            tied=bool(cfg.get("tie_word_embeddings", False)),
            widths=tuple(int(w) for w in widths),
        )


@dataclass
class TierWeights:
    """A tier's weights as the engine builds its model from them."""

    shape: Shape
    state: dict[str, torch.Tensor]
    # latency mode's |x| threshold per (layer, input kind: mlp, attn, qkv, gate_up)
    thresholds: dict[tuple[int, str], float] = field(default_factory=dict)
    # (layer, projection) pairs whose weights are 2:4
    sparse_units: set[tuple[int, str]] = field(default_factory=set)
    # the precision the projection and output-layer weights are served in (None: the engine's)
    weight_dtype: torch.dtype | None = None


def _weight_key(layer: int, proj: str) -> str:
    """The checkpoint key of a decoder layer's projection weight."""
    return f"model.layers.{layer}.{'mlp' if proj in MLP_PROJ else 'self_attn'}.{proj}.weight"


def read_tier(
    model_dir: str | Path, artifact: str = "dense", artifact_dir: str | Path | None = None
) -> TierWeights:
    """The dense checkpoint in model_dir with the tier's artifact (from artifact_dir) applied."""
    if artifact not in ARTIFACTS:
        raise ValueError(f"unknown artifact {artifact!r}; known: {', '.join(ARTIFACTS)}")
    if artifact != "dense" and artifact_dir is None:
        raise ValueError(f"artifact {artifact!r} needs its folder")
    folder = Path(artifact_dir or "")
    source = folder if artifact == "pruned" else Path(model_dir)
    cfg = read_config(source)
    state = read_state(source)
    thresholds: dict[tuple[int, str], float] = {}
    units: set[tuple[int, str]] = set()
    weight_dtype = None
    if artifact == "masked":
        keep, down = read_masks(folder)
        widths = narrow_state(
            state, keep, down, int(cfg["intermediate_size"]), int(cfg["num_hidden_layers"])
        )
        cfg["zerolayer"] = {"intermediate_sizes": widths}
    elif artifact == "dynamic":
        art = read_dynamic(folder)
        for i, w in art.down.items():
            state[_weight_key(i, "down_proj")] = w
        for (i, p), w in art.weights.items():
            state[_weight_key(i, p)] = w
        thresholds = {(i, kind): t for kind, th in art.inputs().items() for i, t in th.items()}
        if art.weight_dtype != "float32":
            weight_dtype = getattr(torch, art.weight_dtype)
    elif artifact == "sparse24":
        for (i, p), w in read_sparse24(folder).items():
            state[_weight_key(i, p)] = w
            units.add((i, p))
    return TierWeights(Shape.from_config(cfg), state, thresholds, units, weight_dtype)
