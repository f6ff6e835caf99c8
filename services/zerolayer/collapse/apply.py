"""Tier artifacts applied to a transformers model (the compiler's view of them: evaluation,
distillation, tests). Their formats are zerolayer.artifacts'; the engines apply them their own
way."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch

from zerolayer.artifacts import (
    Dynamic,
    layer_widths,
    read_config,
    read_dynamic,
    read_masks,
    read_sparse24,
)
from zerolayer.collapse.ablate import activation_threshold
from zerolayer.collapse.model import decoder_layers, load_model
from zerolayer.collapse.sparse24 import linear

__all__ = [
    "apply_masked",
    "load_masked",
    "load_pruned",
    "narrow_mlp",
    "dynamic_cut",
    "load_dynamic",
    "weights_in",
    "load_sparse24",
]


@torch.no_grad()
def apply_masked(model: Any, folder: Path) -> Any:
    """Apply a masked artifact to a loaded dense model in place (removed channels contribute 0)."""
    keep, down = read_masks(folder)
    layers = decoder_layers(model)
    for i, mask in keep.items():
        w = layers[i].mlp.down_proj.weight
        w.zero_()
        w[:, mask] = down[i].to(w.dtype)
    return model


def load_masked(dense_dir: Path, folder: Path) -> Any:
    """The dense checkpoint with a masked artifact applied."""
    return apply_masked(load_model(dense_dir), folder)


@contextmanager
def dynamic_cut(model: Any, art: Dynamic) -> Iterator[None]:
    """A dynamic artifact's thresholds applied to a transformers model while the body runs (its
    weights are not touched; nothing happens before the body starts)."""
    with ExitStack() as stack:
        for kind, th in art.inputs().items():
            stack.enter_context(activation_threshold(model, th, kind))
        if art.weight_dtype != "float32":  # after the thresholds: the engine rounds what passed
            stack.enter_context(weights_in(model, getattr(torch, art.weight_dtype)))
        yield


@contextmanager
def weights_in(model: Any, dtype: torch.dtype) -> Iterator[None]:
    """A float32 transformers model computing as the torch engine's batch steps do with weights
    in `dtype` (bfloat16) while the body runs: every decoder projection's and the output
    layer's weight rounded to it, and each product's input and output rounded to it too (the
    engine runs the product in that precision and widens its result). The weights come back
    when the body ends. A tied embedding (the output layer's own parameter) is rounded with it,
    as the engine reads both from one bfloat16 copy."""
    linears = [m for layer in decoder_layers(model) for m in layer.modules()]
    linears = [m for m in linears if isinstance(m, torch.nn.Linear)] + [model.lm_head]

    def narrow(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype).to(t.dtype)

    saved = [(m, m.weight.data) for m in linears]
    handles = []
    try:
        for m in linears:
            m.weight.data = narrow(m.weight.data)
            handles.append(m.register_forward_pre_hook(lambda _m, args: (narrow(args[0]),)))
            handles.append(m.register_forward_hook(lambda _m, _args, out: narrow(out)))
        yield
    finally:
        for h in handles:
            h.remove()
        for m, w in saved:
            m.weight.data = w


def load_dynamic(dense_dir: Path, folder: Path) -> tuple[Any, Dynamic]:
    """The dense checkpoint with a dynamic artifact's weights, and the artifact (apply its
    thresholds with `dynamic_cut`)."""
    model = load_model(dense_dir)
    art = read_dynamic(folder)
    layers = decoder_layers(model)
    with torch.no_grad():
        for i, w in art.down.items():
            layers[i].mlp.down_proj.weight.copy_(w)
        for (i, p), w in art.weights.items():
            linear(layers[i], p).weight.copy_(w)
    return model, art


@torch.no_grad()
def load_sparse24(model: Any, folder: Path) -> Any:
    """Apply a sparse24 artifact to a loaded dense model in place."""
    layers = decoder_layers(model)
    for (i, p), w in read_sparse24(folder).items():
        linear(layers[i], p).weight.copy_(w)
    return model


def narrow_mlp(mlp: Any, width: int) -> None:
    """Replace an MLP's projections with ones of the given intermediate width (weights unset)."""
    hidden = mlp.gate_proj.in_features
    mlp.gate_proj = torch.nn.Linear(hidden, width, bias=False)
    mlp.up_proj = torch.nn.Linear(hidden, width, bias=False)
    mlp.down_proj = torch.nn.Linear(width, hidden, bias=False)


@torch.no_grad()
def load_pruned(folder: Path) -> Any:
    """Load a pruned checkpoint: a Llama model whose layers have their own MLP widths."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = Path(folder)
    widths = layer_widths(read_config(folder)) or []
    config = AutoConfig.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    for layer, width in zip(decoder_layers(model), widths, strict=True):
        if width != layer.mlp.gate_proj.out_features:
            narrow_mlp(layer.mlp, width)
    state = load_file(str(folder / "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - allowed or unexpected:
        raise ValueError(f"pruned checkpoint mismatch: missing {missing}, unexpected {unexpected}")
    if config.tie_word_embeddings:
        model.tie_weights()
    model.eval()
    return model
