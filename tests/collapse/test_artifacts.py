"""Masked and pruned artifacts of one cut: same logits; 2:4 weights keep their pattern."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from zerolayer.artifacts import save_masked, save_pruned
from zerolayer.collapse.apply import load_masked, load_pruned
from zerolayer.collapse.reconstruct import gram_matrices, obs_keep, repaired_weight
from zerolayer.collapse.select import protected
from zerolayer.collapse.silence_map import SilenceMap
from zerolayer.collapse.sparse24 import input_norms, is_24, mask_24, sparsified

pytestmark = pytest.mark.integration  # runs the collapse compiler


@pytest.fixture(scope="module")
def masked_folder(
    dense: Any,
    calib_windows: list[list[int]],
    small_map: SilenceMap,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    grams = gram_matrices(dense, calib_windows[:2], progress=False)
    protect = protected(small_map)
    keep, down = {}, {}
    for i, share in {0: 0.2, 3: 0.5, 7: 0.1}.items():
        w = dense.model.layers[i].mlp.down_proj.weight.detach()
        keep[i] = obs_keep(w, grams[i], share, protect[i])
        down[i] = repaired_weight(w, grams[i], keep[i])
    return save_masked(tmp_path_factory.mktemp("masked"), keep, down, {"test": True})


def test_pruned_reproduces_masked_logits(
    model_dir: Path, masked_folder: Path, tmp_path: Path, eval_windows: list[list[int]]
) -> None:
    masked = load_masked(model_dir, masked_folder)
    pruned_dir = save_pruned(tmp_path / "pruned", model_dir, masked_folder)
    pruned = load_pruned(pruned_dir)
    widths = [layer.mlp.gate_proj.out_features for layer in pruned.model.layers]
    full = masked.config.intermediate_size
    assert widths[0] == full - round(0.2 * full) and widths[3] == full - round(0.5 * full)
    assert widths[1] == full
    dense_bytes = (model_dir / "model.safetensors").stat().st_size
    assert (pruned_dir / "model.safetensors").stat().st_size < dense_bytes
    x = torch.tensor([eval_windows[0]])
    with torch.no_grad():
        a = masked(x, use_cache=False).logits
        b = pruned(x, use_cache=False).logits
    assert (a - b).abs().max().item() < 1e-4
    assert (pruned_dir / "tokenizer.json").exists()


def test_mask_24_keeps_two_of_four_with_the_largest_scores() -> None:
    w = torch.tensor([[1.0, -4.0, 0.5, 3.0, 2.0, 2.0, 2.0, 2.0]])
    norms = torch.tensor([1.0, 1.0, 1.0, 1.0, 10.0, 1.0, 1.0, 5.0])
    keep = mask_24(w, norms)
    assert keep.tolist() == [[False, True, False, True, True, False, False, True]]
    assert is_24(w * keep) and not is_24(w)


def test_sparsified_projections_have_the_24_pattern(
    dense: Any, calib_windows: list[list[int]]
) -> None:
    norms = input_norms(dense, calib_windows[:1], progress=False)
    units = [(2, "gate_proj"), (2, "down_proj"), (5, "q_proj")]
    before = dense.model.layers[2].mlp.gate_proj.weight.detach().clone()
    with sparsified(dense, units, norms):
        for i, name in units:
            layer = dense.model.layers[i]
            w = getattr(
                layer.mlp if "proj" in name and name != "q_proj" else layer.self_attn, name
            ).weight
            assert is_24(w)
            assert (w == 0).float().mean().item() == pytest.approx(0.5, abs=0.01)
        assert not is_24(dense.model.layers[3].mlp.gate_proj.weight)
    assert torch.equal(dense.model.layers[2].mlp.gate_proj.weight, before)
