"""sparse24 artifacts: 2:4 weights (2 of every 4 consecutive inputs of a row are zero), stored
as their kept halves and positions (sparse24.safetensors), by (layer, projection)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from zerolayer.artifacts.card import check_version
from zerolayer.artifacts.names import FORMAT_VERSION

if TYPE_CHECKING:
    import torch

__all__ = ["save_sparse24", "read_sparse24"]

Weights24 = dict[tuple[int, str], "torch.Tensor"]


def save_sparse24(folder: Path, weights: Weights24) -> None:
    """Compressed 2:4 storage of already 2:4-pruned weights: per (layer, projection) the 2 kept
    values of every group of 4 inputs and their positions."""
    import torch
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
    meta = {"format_version": str(FORMAT_VERSION)}
    save_file(tensors, str(folder / "sparse24.safetensors"), metadata=meta)


def read_sparse24(folder: Path) -> Weights24:
    """The dense 2:4 weights of a sparse24 artifact, by (layer, projection)."""
    import torch
    from safetensors import safe_open

    out = {}
    path = Path(folder) / "sparse24.safetensors"
    with safe_open(str(path), framework="pt") as f:
        check_version((f.metadata() or {}).get("format_version"), path)
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
