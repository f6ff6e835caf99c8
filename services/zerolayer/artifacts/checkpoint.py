"""Reading and writing the tensors of a Hugging Face checkpoint folder (safetensors)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


__all__ = ["read_state", "read_config"]


def read_config(folder: Path) -> dict[str, Any]:
    """config.json of a checkpoint folder."""
    config: dict[str, Any] = json.loads((Path(folder) / "config.json").read_text())
    return config


def read_state(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors checkpoint (one file or an index of shards)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(str(folder / name)))
    return state
