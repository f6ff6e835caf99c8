"""Artifact formats without a model: round trips of small tensors, versions (an older artifact
without one reads as version 1, a newer one is a clear error), and cards written whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from zerolayer.artifacts import (
    FORMAT_VERSION,
    Dynamic,
    is_built,
    read_card,
    read_dynamic,
    read_masks,
    read_sparse24,
    save_dynamic,
    save_masked,
    save_sparse24,
    write_card,
)
from zerolayer.errors import ArtifactError


def test_a_card_is_written_whole_with_its_version(tmp_path: Path) -> None:
    assert not is_built(tmp_path)
    card = write_card(tmp_path, {"tier": "masked", "quality": {"ppl_delta": 0.01}})
    assert card["format_version"] == FORMAT_VERSION
    assert read_card(tmp_path) == card and is_built(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["tier_card.json"]  # no temporary left


def test_old_artifacts_read_as_version_1_and_newer_ones_are_refused(tmp_path: Path) -> None:
    (tmp_path / "tier_card.json").write_text(json.dumps({"tier": "masked"}))
    assert read_card(tmp_path) == {"tier": "masked"}
    (tmp_path / "tier_card.json").write_text(json.dumps({"format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ArtifactError, match="rebuild it, or upgrade zerolayer"):
        read_card(tmp_path)
    assert not is_built(tmp_path)
    (tmp_path / "tier_card.json").write_text("{half a card")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        read_card(tmp_path)


def test_masked_round_trip_and_version_check(tmp_path: Path) -> None:
    keep = {0: torch.tensor([True, False, True, True])}
    down = {0: torch.arange(12, dtype=torch.float32).view(3, 4)}
    save_masked(tmp_path, keep, down, {"model": "m"})
    got_keep, got_down = read_masks(tmp_path)
    assert torch.equal(got_keep[0], keep[0])
    assert torch.equal(got_down[0], down[0][:, keep[0]])
    tensors = load_file(str(tmp_path / "masks.safetensors"))
    meta = {"meta": json.dumps({"format_version": FORMAT_VERSION + 1})}
    save_file(tensors, str(tmp_path / "masks.safetensors"), metadata=meta)
    with pytest.raises(ArtifactError, match="masks.safetensors"):
        read_masks(tmp_path)


def test_dynamic_round_trip_keeps_every_kind(tmp_path: Path) -> None:
    art = Dynamic(
        mlp={0: 0.5, 3: 0.25},
        attn={1: 0.125},
        down={0: torch.ones(2, 3)},
        qkv={2: 0.75},
        gate_up={4: 1.5},
        head={0: 0.0625},
    )
    save_dynamic(tmp_path, art)
    back = read_dynamic(tmp_path)
    assert back.inputs() == art.inputs() and back.head == {0: 0.0625}
    assert torch.equal(back.down[0], art.down[0])
    body = json.loads((tmp_path / "thresholds.json").read_text())
    assert body["format_version"] == FORMAT_VERSION
    # as older artifacts wrote it: no version, no q/k/v thresholds, no output layer's
    del body["format_version"], body["qkv_thresholds"], body["head_thresholds"]
    (tmp_path / "thresholds.json").write_text(json.dumps(body))
    old = read_dynamic(tmp_path)
    assert old.qkv == {} and old.head == {} and old.gate_up == art.gate_up


def test_sparse24_round_trip_is_exact(tmp_path: Path) -> None:
    w = torch.tensor([[0.0, 2.0, -3.0, 0.0, 1.0, 0.0, 0.0, -4.0]])
    save_sparse24(tmp_path, {(5, "up_proj"): w})
    assert torch.equal(read_sparse24(tmp_path)[(5, "up_proj")], w)


def test_dynamic_input_weights_round_trip_and_format_1_still_loads(tmp_path: Path) -> None:
    weights = {(2, "q_proj"): torch.randn(4, 3), (2, "up_proj"): torch.randn(5, 3)}
    save_dynamic(tmp_path, Dynamic(mlp={2: 0.5}, qkv={2: 0.1}, gate_up={2: 0.2}, weights=weights))
    back = read_dynamic(tmp_path)
    assert set(back.weights) == set(weights)
    assert all(torch.equal(back.weights[k], w) for k, w in weights.items())
    # a format 1 artifact, written before the distilled input weights: thresholds and down_proj only
    body = json.loads((tmp_path / "thresholds.json").read_text())
    body["format_version"] = 1
    (tmp_path / "thresholds.json").write_text(json.dumps(body))
    (tmp_path / "inputs.safetensors").unlink()
    old = read_dynamic(tmp_path)
    assert old.weights == {} and old.inputs() == back.inputs()
    # saving an artifact without input weights leaves no stale file from an earlier one
    save_dynamic(tmp_path, Dynamic(mlp={2: 0.5}, weights=weights))
    save_dynamic(tmp_path, Dynamic(mlp={2: 0.5}))
    assert read_dynamic(tmp_path).weights == {}
