"""Access to a Llama-style decoder (SmolLM2 and kin) in transformers: load it, and find the
projections whose inputs the compiler measures and cuts."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from zerolayer.artifacts import MLP_PROJ

__all__ = [
    "load_model",
    "decoder_layers",
    "projection",
    "projections",
    "input_modules",
    "linear",
    "PROJECTIONS_OF",
    "HEAD",
    "removing",
]

# the projections of a decoder layer that read each input kind, by name (the output layer, which
# reads the "head" input, is the model's own)
PROJECTIONS_OF = {
    "mlp": ("down_proj",),
    "attn": ("o_proj",),
    "qkv": ("q_proj", "k_proj", "v_proj"),
    "gate_up": ("gate_proj", "up_proj"),
}
HEAD = "head"


def load_model(model_dir: str | Path) -> Any:
    """The dense model in float32, eval mode, on the CPU."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    return model


def decoder_layers(model: Any) -> list[Any]:
    """The decoder layers in order."""
    return list(model.model.layers)


def projection(layer: Any, kind: str) -> torch.nn.Linear:
    """down_proj for 'mlp' (its input is the MLP intermediate), o_proj for 'attn'."""
    return layer.mlp.down_proj if kind == "mlp" else layer.self_attn.o_proj


def projections(layer: Any, kind: str) -> list[torch.nn.Linear]:
    """The projections that read one input: 'mlp' (down_proj), 'attn' (o_proj), 'qkv' (q/k/v
    read the normalised residual stream) and 'gate_up' (gate/up read it after attention)."""
    if kind not in PROJECTIONS_OF:
        raise ValueError(f"unknown projection input {kind!r}")
    return [linear(layer, name) for name in PROJECTIONS_OF[kind]]


def input_modules(model: Any, kinds: Iterable[str]) -> list[tuple[int, str, list[torch.nn.Linear]]]:
    """(layer, kind, the modules reading that input) for each of these input kinds, every
    decoder layer for the projections' kinds, and layer 0 for "head" (the output layer reads
    the final normalised hidden state)."""
    out: list[tuple[int, str, list[torch.nn.Linear]]] = []
    for kind in kinds:
        if kind == HEAD:
            out.append((0, kind, [model.lm_head]))
        else:
            layers = enumerate(decoder_layers(model))
            out += [(i, kind, projections(layer, kind)) for i, layer in layers]
    return out


def linear(layer: Any, name: str) -> torch.nn.Linear:
    """A decoder layer's projection by name (gate_proj ... o_proj)."""
    return getattr(layer.mlp if name in MLP_PROJ else layer.self_attn, name)


@contextmanager
def removing(handles: list[Any]) -> Iterator[None]:
    """Run the body with the given hooks installed; remove them on exit, whatever happens."""
    try:
        yield
    finally:
        for h in handles:
            h.remove()
