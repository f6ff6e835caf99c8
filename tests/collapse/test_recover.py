"""Distillation after a static cut: it lowers KL to the dense model, keeps removed channels at zero
and leaves the dense teacher untouched."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from zerolayer.collapse.ablate import Evaluator
from zerolayer.collapse.reconstruct import gram_matrices, obs_keep, repaired_weight, swapped
from zerolayer.collapse.recover import distill
from zerolayer.collapse.select import protected
from zerolayer.collapse.silence_map import SilenceMap

pytestmark = pytest.mark.integration  # runs the collapse compiler


def test_distillation_lowers_kl_and_keeps_the_cut(
    dense: Any, calib_windows: list[list[int]], small_map: SilenceMap
) -> None:
    grams = gram_matrices(dense, calib_windows, progress=False)
    protect = protected(small_map)
    layers = dense.model.layers
    keep, start = {}, {}
    for i in range(4, 12):
        w = layers[i].mlp.down_proj.weight.detach()
        keep[i] = obs_keep(w, grams[i], 0.6, protect[i])
        start[i] = repaired_weight(w, grams[i], keep[i])
    before_dense = layers[5].mlp.down_proj.weight.detach().clone()
    trained = distill(dense, start, keep, calib_windows, epochs=4, lr=1e-4, batch=2, progress=False)
    assert torch.equal(layers[5].mlp.down_proj.weight.detach(), before_dense)
    assert set(trained) == set(keep)
    for i, w in trained.items():
        assert bool((w[:, ~keep[i]] == 0).all())
        assert not torch.equal(w, start[i])
    on_train = Evaluator(dense, calib_windows)
    kl_repair = on_train.evaluate(swapped(dense, start)).kl
    kl_distilled = on_train.evaluate(swapped(dense, trained)).kl
    assert kl_distilled < 0.9 * kl_repair
    # zero epochs: the starting weights, unchanged
    same = distill(dense, start, keep, calib_windows, epochs=0)
    assert all(torch.equal(same[i], start[i]) for i in start)


def test_named_distillation_trains_only_the_given_projections(
    dense: Any, calib_windows: list[list[int]]
) -> None:
    from zerolayer.collapse.ablate import activation_threshold
    from zerolayer.collapse.recover import distill_named

    layers = dense.model.layers
    # 60% of q/k/v's input zeroed in layers 3-6: q/k/v learn to work with it
    th = {
        i: 0.6 * float(layers[i].input_layernorm.weight.detach().abs().mean()) for i in range(3, 7)
    }
    start = {
        (i, p): getattr(layers[i].self_attn, p).weight.detach().clone()
        for i in th
        for p in ("q_proj", "k_proj", "v_proj")
    }
    untouched = layers[4].mlp.up_proj.weight.detach().clone()
    trained = distill_named(
        dense,
        start,
        calib_windows,
        epochs=3,
        batch=2,
        progress=False,
        student_cut=lambda student: activation_threshold(student, th, "qkv"),
    )
    assert set(trained) == set(start)
    assert all(not torch.equal(trained[k], start[k]) for k in start)
    assert torch.equal(layers[3].self_attn.q_proj.weight, start[(3, "q_proj")]), "teacher kept"
    assert torch.equal(layers[4].mlp.up_proj.weight, untouched)
    from zerolayer.collapse.reconstruct import swapped_named

    on_train = Evaluator(dense, calib_windows)
    plain = on_train.evaluate(activation_threshold(dense, th, "qkv"))
    with swapped_named(dense, trained):
        distilled = on_train.evaluate(activation_threshold(dense, th, "qkv"))
    assert distilled.kl < 0.9 * plain.kl
