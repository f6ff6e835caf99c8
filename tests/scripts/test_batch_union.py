"""benchmarks/batch_union.py: the masks it counts are the inputs the tier's thresholds zero."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def union():
    spec = importlib.util.spec_from_file_location(
        "bench_union", ROOT / "benchmarks" / "batch_union.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_union"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_masks_are_the_zeroed_inputs_and_rows_count_every_reader(union, model_dir: Path) -> None:
    from zerolayer.artifacts import Dynamic
    from zerolayer.collapse.model import decoder_layers, load_model

    model = load_model(model_dir)
    layer = decoder_layers(model)[3]
    t = float(layer.mlp.down_proj.weight.abs().mean())
    art = Dynamic({3: t}, qkv={5: 0.05})
    windows = [list(range(100, 116)), list(range(200, 216))]
    seen: list[torch.Tensor] = []
    hook = layer.mlp.down_proj.register_forward_pre_hook(lambda _m, a: seen.append(a[0][0]))
    with torch.no_grad():
        for w in windows:
            model(torch.tensor([w]), use_cache=False)
    hook.remove()
    masks = union.silent_masks(model, art, windows)
    assert set(masks) == {(3, "mlp"), (5, "qkv")}
    assert masks[(3, "mlp")].shape == (2, 16, layer.mlp.down_proj.in_features)
    expected = torch.stack([x.abs() <= t for x in seen])
    assert torch.equal(masks[(3, "mlp")], expected)
    assert 0.0 < float(expected.float().mean()) < 1.0
    attn = decoder_layers(model)[5].self_attn
    readers = attn.q_proj.out_features + attn.k_proj.out_features + attn.v_proj.out_features
    assert union.row_bytes(model, (5, "qkv")) == readers * 4
