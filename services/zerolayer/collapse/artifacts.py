"""Tier artifacts: how each is written and how it loads.

masked: the dense checkpoint stays where it is; the artifact holds, per layer, the keep-mask of
  MLP channels and the repaired down_proj columns of the kept channels (masks.safetensors). Loading
  applies them to the dense weights, so another level needs no new checkpoint.
pruned: the same cut applied physically: gate_proj/up_proj rows and down_proj columns of removed
  channels are gone, each layer has its own MLP width (config.json "zerolayer.intermediate_sizes").
Both reproduce the same function; the pruned one loads without the dense checkpoint.
dynamic: per-token thresholds on the inputs of down_proj, o_proj, q/k/v and gate/up, with
  distilled down_proj weights (thresholds.json, down_proj.safetensors).
sparse24: 2:4 weights stored as their kept halves and positions (sparse24.safetensors).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from zerolayer.collapse.ablate import activation_threshold
from zerolayer.collapse.model import decoder_layers, load_model

__all__ = [
    "TOKENIZER_FILES",
    "save_masked",
    "apply_masked",
    "load_masked",
    "save_pruned",
    "load_pruned",
    "narrow_mlp",
    "narrow_state",
    "Dynamic",
    "save_dynamic",
    "read_dynamic",
    "load_dynamic",
    "save_sparse24",
    "read_sparse24",
    "load_sparse24",
]

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
)


def save_masked(
    folder: Path, keep: dict[int, torch.Tensor], down: dict[int, torch.Tensor], meta: dict[str, Any]
) -> Path:
    """Write masks.safetensors: per cut layer its keep-mask and repaired kept down_proj columns."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for i, mask in keep.items():
        tensors[f"layers.{i}.keep"] = mask.to(torch.uint8).contiguous()
        tensors[f"layers.{i}.down_proj_kept"] = down[i][:, mask].contiguous()
    save_file(tensors, str(folder / "masks.safetensors"), metadata={"meta": json.dumps(meta)})
    return folder


def read_masks(folder: Path) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
    from safetensors import safe_open

    keep, down = {}, {}
    with safe_open(str(Path(folder) / "masks.safetensors"), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open is not iterable)
            layer = int(name.split(".")[1])
            if name.endswith(".keep"):
                keep[layer] = f.get_tensor(name).bool()
            else:
                down[layer] = f.get_tensor(name)
    return keep, down


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


@dataclass
class Dynamic:
    """A dynamic (per-token threshold) artifact: per layer, the |a| threshold on the input of
    down_proj (`mlp`), o_proj (`attn`), q/k/v (`qkv`) and gate/up (`gate_up`), and the down_proj
    weights distilled with the MLP thresholds in place (`down`; none: the dense weights)."""

    mlp: dict[int, float]
    attn: dict[int, float] = field(default_factory=dict)
    down: dict[int, torch.Tensor] = field(default_factory=dict)
    qkv: dict[int, float] = field(default_factory=dict)
    gate_up: dict[int, float] = field(default_factory=dict)

    def inputs(self) -> dict[str, dict[int, float]]:
        """The thresholds per projection input (kind as collapse.model.projections names it)."""
        return {"mlp": self.mlp, "attn": self.attn, "qkv": self.qkv, "gate_up": self.gate_up}

    @contextmanager
    def cut(self, model: Any) -> Iterator[None]:
        """The thresholds applied to a transformers model while the body runs (its weights are
        not touched; nothing happens before the body starts)."""
        with ExitStack() as stack:
            for kind, th in self.inputs().items():
                stack.enter_context(activation_threshold(model, th, kind))
            yield


# thresholds.json keys of the inputs other than down_proj's ("thresholds", the first kind)
_DYNAMIC_KEYS = {
    "attn": "attn_thresholds",
    "qkv": "qkv_thresholds",
    "gate_up": "gate_up_thresholds",
}


def save_dynamic(folder: Path, art: Dynamic) -> Path:
    """Write a dynamic artifact: thresholds.json, and the distilled down_proj weights of the
    thresholded layers in down_proj.safetensors."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    inputs = art.inputs()
    body: dict[str, Any] = {"kind": "mlp", "thresholds": {str(i): t for i, t in art.mlp.items()}}
    for kind, key in _DYNAMIC_KEYS.items():
        body[key] = {str(i): t for i, t in inputs[kind].items()}
    (folder / "thresholds.json").write_text(json.dumps(body, indent=1) + "\n")
    tensors = {f"layers.{i}.down_proj": w.contiguous() for i, w in art.down.items()}
    save_file(tensors, str(folder / "down_proj.safetensors"))
    return folder


def read_dynamic(folder: Path) -> Dynamic:
    """A dynamic artifact as written by save_dynamic (keys absent in older ones: none)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    body = json.loads((folder / "thresholds.json").read_text())
    down = {
        int(k.split(".")[1]): w for k, w in load_file(str(folder / "down_proj.safetensors")).items()
    }

    def read(key: str) -> dict[int, float]:
        return {int(i): float(t) for i, t in body.get(key, {}).items()}

    return Dynamic(
        read("thresholds"),
        read("attn_thresholds"),
        down,
        read("qkv_thresholds"),
        read("gate_up_thresholds"),
    )


def load_dynamic(dense_dir: Path, folder: Path) -> tuple[Any, Dynamic]:
    """The dense checkpoint with a dynamic artifact's weights, and the artifact (apply its
    thresholds with `Dynamic.cut`, or an engine's own kernel)."""
    model = load_model(dense_dir)
    art = read_dynamic(folder)
    layers = decoder_layers(model)
    for i, w in art.down.items():
        layers[i].mlp.down_proj.weight.copy_(w)
    return model, art


def save_sparse24(folder: Path, weights: dict[tuple[int, str], torch.Tensor]) -> None:
    """Compressed 2:4 storage of already 2:4-pruned weights: per (layer, projection) the 2 kept
    values of every group of 4 inputs and their positions (sparse24.safetensors)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for (i, p), w in weights.items():
        groups = w.reshape(w.shape[0], -1, 4)
        # the two largest |w| of each group: the kept ones (ties with zeros pick any zero)
        idx = groups.abs().topk(2, dim=-1).indices.sort(-1).values
        vals = groups.gather(-1, idx)
        tensors[f"layers.{i}.{p}.values"] = vals.reshape(w.shape[0], -1).contiguous()
        tensors[f"layers.{i}.{p}.indices"] = (
            idx.to(torch.uint8).reshape(w.shape[0], -1).contiguous()
        )
    save_file(tensors, str(folder / "sparse24.safetensors"))


def read_sparse24(folder: Path) -> dict[tuple[int, str], torch.Tensor]:
    """The dense 2:4 weights of a sparse24 artifact, by (layer, projection)."""
    from safetensors import safe_open

    out = {}
    with safe_open(str(Path(folder) / "sparse24.safetensors"), framework="pt") as f:
        names = sorted({k.rsplit(".", 1)[0] for k in f.keys()})  # noqa: SIM118
        for name in names:
            _, i, p = name.split(".")
            vals = f.get_tensor(f"{name}.values")
            rows = vals.shape[0]
            vals = vals.view(rows, -1, 2)
            idx = f.get_tensor(f"{name}.indices").view(rows, -1, 2).long()
            w = torch.zeros(rows, vals.shape[1], 4, dtype=vals.dtype)
            out[(int(i), p)] = w.scatter_(-1, idx, vals).view(rows, -1)
    return out


@torch.no_grad()
def load_sparse24(model: Any, folder: Path) -> Any:
    """Apply a sparse24 artifact to a loaded dense model in place."""
    from zerolayer.collapse.sparse24 import linear

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


def narrow_state(
    state: dict[str, torch.Tensor],
    keep: dict[int, torch.Tensor],
    down: dict[int, torch.Tensor],
    width: int,
    layers: int,
) -> list[int]:
    """Apply a masked artifact's cut physically to a Llama state dict, in place: the removed
    channels' gate_proj/up_proj rows go, each cut layer's down_proj becomes its kept (repaired)
    columns. Returns every layer's MLP width (`width` where a layer is not cut)."""
    widths = [width] * layers
    for i, mask in keep.items():
        q = f"model.layers.{i}.mlp."
        state[q + "gate_proj.weight"] = state[q + "gate_proj.weight"][mask]
        state[q + "up_proj.weight"] = state[q + "up_proj.weight"][mask]
        state[q + "down_proj.weight"] = down[i]
        widths[i] = int(mask.sum())
    return widths


@torch.no_grad()
def save_pruned(folder: Path, dense_dir: Path, masked_folder: Path) -> Path:
    """Write a checkpoint with the masked artifact's channels physically removed."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = load_model(dense_dir)
    keep, down = read_masks(masked_folder)
    state = dict(model.state_dict())
    widths = narrow_state(
        state, keep, down, model.config.intermediate_size, len(decoder_layers(model))
    )
    state = {k: v.contiguous() for k, v in state.items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((Path(dense_dir) / "config.json").read_text())
    cfg["zerolayer"] = {"tier": "pruned", "intermediate_sizes": widths}
    # vLLM builds the per-layer widths through zerolayer's plugin (engines/vllm_plugin.py)
    cfg["architectures"] = ["ZerolayerLlamaForCausalLM"]
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        if (Path(dense_dir) / name).exists():
            shutil.copy(Path(dense_dir) / name, folder / name)
    return folder


@torch.no_grad()
def load_pruned(folder: Path) -> Any:
    """Load a pruned checkpoint: a Llama model whose layers have their own MLP widths."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = Path(folder)
    widths = json.loads((folder / "config.json").read_text())["zerolayer"]["intermediate_sizes"]
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
