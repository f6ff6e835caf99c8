"""dynamic artifacts: per-token thresholds on projection inputs.

thresholds.json holds, per layer, the |x| threshold on the input of down_proj ("thresholds"),
o_proj ("attn_thresholds"), q/k/v ("qkv_thresholds") and gate/up ("gate_up_thresholds"), and
since format 3 the one on the output layer's input ("head_thresholds", keyed "0"); entries with
|x| <= threshold count as zero. down_proj.safetensors holds the down_proj weights distilled
with the thresholds in place (none: the dense weights). Since format 2, inputs.safetensors holds
the q/k/v and gate/up weights distilled with their inputs' thresholds in place
("layers.<i>.<projection>"; absent, as in format 1 artifacts: the dense weights).
"weight_dtype" (absent: float32) is the precision the engine keeps the projection and output
layer weights in: "bfloat16" halves the bytes a decode step reads; the files stay float32.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zerolayer.artifacts.card import check_version
from zerolayer.artifacts.names import FORMAT_VERSION

if TYPE_CHECKING:
    import torch

__all__ = ["Dynamic", "save_dynamic", "read_dynamic"]


@dataclass
class Dynamic:
    """A dynamic (per-token threshold) artifact: per layer, the |a| threshold on the input of
    down_proj (`mlp`), o_proj (`attn`), q/k/v (`qkv`) and gate/up (`gate_up`), the one on the
    output layer's input (`head`, keyed by 0; none: the dense output layer), the down_proj
    weights distilled with the MLP thresholds in place (`down`; none: the dense weights), and
    other projections' weights distilled with their inputs' thresholds in place (`weights`,
    keyed by (layer, projection name); none: the dense weights), and the precision its
    projection and output-layer weights are served in (`weight_dtype`)."""

    mlp: dict[int, float]
    attn: dict[int, float] = field(default_factory=dict)
    down: dict[int, torch.Tensor] = field(default_factory=dict)
    qkv: dict[int, float] = field(default_factory=dict)
    gate_up: dict[int, float] = field(default_factory=dict)
    weights: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)
    head: dict[int, float] = field(default_factory=dict)
    weight_dtype: str = "float32"

    def inputs(self) -> dict[str, dict[int, float]]:
        """The thresholds per projection input kind (names.INPUT_KINDS)."""
        return {
            "mlp": self.mlp,
            "attn": self.attn,
            "qkv": self.qkv,
            "gate_up": self.gate_up,
            "head": self.head,
        }


# thresholds.json keys of the inputs other than down_proj's ("thresholds", the first kind)
_KEYS = {
    "attn": "attn_thresholds",
    "qkv": "qkv_thresholds",
    "gate_up": "gate_up_thresholds",
    "head": "head_thresholds",
}
# the distilled q/k/v and gate/up weights (format 2 on)
_INPUT_WEIGHTS = "inputs.safetensors"


def save_dynamic(folder: Path, art: Dynamic) -> Path:
    """Write a dynamic artifact: thresholds.json, the distilled down_proj weights of the
    thresholded layers in down_proj.safetensors, and the other distilled weights (if any) in
    inputs.safetensors."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    inputs = art.inputs()
    body: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "kind": "mlp",
        "thresholds": {str(i): t for i, t in art.mlp.items()},
        "weight_dtype": art.weight_dtype,
    }
    for kind, key in _KEYS.items():
        body[key] = {str(i): t for i, t in inputs[kind].items()}
    (folder / "thresholds.json").write_text(json.dumps(body, indent=1) + "\n")
    tensors = {f"layers.{i}.down_proj": w.contiguous() for i, w in art.down.items()}
    save_file(tensors, str(folder / "down_proj.safetensors"))
    tensors = {f"layers.{i}.{p}": w.contiguous() for (i, p), w in art.weights.items()}
    if tensors:
        save_file(tensors, str(folder / _INPUT_WEIGHTS))
    else:
        (folder / _INPUT_WEIGHTS).unlink(missing_ok=True)
    return folder


def read_dynamic(folder: Path) -> Dynamic:
    """A dynamic artifact as written by save_dynamic (keys and files absent in older ones:
    none)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    path = folder / "thresholds.json"
    body = json.loads(path.read_text())
    check_version(body.get("format_version"), path)
    down = {
        int(k.split(".")[1]): w for k, w in load_file(str(folder / "down_proj.safetensors")).items()
    }

    weights: dict[tuple[int, str], torch.Tensor] = {}
    if (folder / _INPUT_WEIGHTS).exists():
        for k, w in load_file(str(folder / _INPUT_WEIGHTS)).items():
            _, i, p = k.split(".")
            weights[(int(i), p)] = w

    def read(key: str) -> dict[int, float]:
        return {int(i): float(t) for i, t in body.get(key, {}).items()}

    return Dynamic(
        read("thresholds"),
        read("attn_thresholds"),
        down,
        read("qkv_thresholds"),
        read("gate_up_thresholds"),
        weights,
        read("head_thresholds"),
        str(body.get("weight_dtype", "float32")),
    )
