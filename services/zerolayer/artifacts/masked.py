"""masked and pruned artifacts: a static cut of MLP channels.

masked: the dense checkpoint stays where it is; the artifact holds, per cut layer, the keep-mask
  of MLP channels and the repaired down_proj columns of the kept channels (masks.safetensors).
  Applied to the dense weights at load, so another level needs no new checkpoint.
pruned: the same cut applied physically: gate_proj/up_proj rows and down_proj columns of removed
  channels are gone, each layer has its own MLP width (config.json "zerolayer.intermediate_sizes").
Both compute the same function; the pruned one loads without the dense checkpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerolayer.artifacts.card import check_version
from zerolayer.artifacts.checkpoint import read_config, read_state
from zerolayer.artifacts.names import ARCHITECTURE, FORMAT_VERSION, TOKENIZER_FILES

if TYPE_CHECKING:
    import torch

__all__ = ["save_masked", "read_masks", "narrow_state", "save_pruned", "layer_widths"]

Masks = dict[int, "torch.Tensor"]


def save_masked(folder: Path, keep: Masks, down: Masks, meta: dict[str, Any]) -> Path:
    """Write masks.safetensors: per cut layer its keep-mask and repaired kept down_proj columns."""
    import torch
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for i, mask in keep.items():
        tensors[f"layers.{i}.keep"] = mask.to(torch.uint8).contiguous()
        tensors[f"layers.{i}.down_proj_kept"] = down[i][:, mask].contiguous()
    meta = {"format_version": FORMAT_VERSION, **meta}
    save_file(tensors, str(folder / "masks.safetensors"), metadata={"meta": json.dumps(meta)})
    return folder


def read_masks(folder: Path) -> tuple[Masks, Masks]:
    """(keep-masks, kept down_proj columns) per cut layer of a masked artifact."""
    from safetensors import safe_open

    keep, down = {}, {}
    path = Path(folder) / "masks.safetensors"
    with safe_open(str(path), framework="pt") as f:
        meta = json.loads((f.metadata() or {}).get("meta", "{}"))
        check_version(meta.get("format_version"), path)
        for name in f.keys():  # noqa: SIM118 (safe_open is not iterable)
            layer = int(name.split(".")[1])
            if name.endswith(".keep"):
                keep[layer] = f.get_tensor(name).bool()
            else:
                down[layer] = f.get_tensor(name)
    return keep, down


def narrow_state(
    state: dict[str, torch.Tensor], keep: Masks, down: Masks, width: int, layers: int
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


def layer_widths(config: dict[str, Any]) -> list[int] | None:
    """Per-layer MLP widths a pruned checkpoint's config.json declares (None: a dense one)."""
    return (config.get("zerolayer") or {}).get("intermediate_sizes")


def save_pruned(folder: Path, dense_dir: Path, masked_folder: Path) -> Path:
    """Write a float32 checkpoint with the masked artifact's channels physically removed."""
    from safetensors.torch import save_file

    folder, dense_dir = Path(folder), Path(dense_dir)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = read_config(dense_dir)
    state = {
        k: (v.float() if v.is_floating_point() else v) for k, v in read_state(dense_dir).items()
    }
    keep, down = read_masks(masked_folder)
    widths = narrow_state(
        state, keep, down, int(cfg["intermediate_size"]), int(cfg["num_hidden_layers"])
    )
    if cfg.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    state = {k: v.contiguous() for k, v in state.items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    cfg["zerolayer"] = {
        "tier": "pruned",
        "intermediate_sizes": widths,
        "format_version": FORMAT_VERSION,
    }
    cfg["architectures"] = [ARCHITECTURE]
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        if (dense_dir / name).exists():
            shutil.copy(dense_dir / name, folder / name)
    return folder
