"""Least-squares repair: it must beat plain masking, on random data and on the real model."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from zerolayer.collapse.ablate import Evaluator, channel_mask
from zerolayer.collapse.reconstruct import gram_matrices, obs_keep, repaired, repaired_weight
from zerolayer.collapse.select import protected
from zerolayer.collapse.silence_map import SilenceMap

pytestmark = pytest.mark.integration  # runs the collapse compiler


def test_repair_minimises_output_error_on_correlated_inputs() -> None:
    gen = torch.Generator().manual_seed(0)
    mix = torch.randn(32, 32, generator=gen)
    a = torch.randn(2000, 32, generator=gen) @ mix  # correlated channels, as real activations are
    w = torch.randn(8, 32, generator=gen)
    gram = a.double().T @ a.double()
    keep = obs_keep(w, gram, 0.25)
    assert int((~keep).sum()) == 8
    target = a @ w.T
    masked_err = ((a * keep) @ w.T - target).pow(2).mean()
    repaired_err = (a @ repaired_weight(w, gram, keep).T - target).pow(2).mean()
    assert repaired_err < 0.5 * masked_err
    assert bool((repaired_weight(w, gram, keep)[:, ~keep] == 0).all())
    assert torch.allclose(repaired_weight(w, gram, torch.ones(32, dtype=torch.bool)), w)


def test_repaired_cut_costs_less_than_plain_masking_on_the_model(
    dense: Any, calib_windows: list[list[int]], eval_windows: list[list[int]], small_map: SilenceMap
) -> None:
    grams = gram_matrices(dense, calib_windows, progress=False)
    protect = protected(small_map)
    layers = range(dense.config.num_hidden_layers - 2)
    keep = {
        i: obs_keep(dense.model.layers[i].mlp.down_proj.weight.detach(), grams[i], 0.1, protect[i])
        for i in layers
    }
    before = dense.model.layers[0].mlp.down_proj.weight.detach().clone()
    ev = Evaluator(dense, eval_windows)
    plain = ev.evaluate(channel_mask(dense, keep))
    fixed = ev.evaluate(repaired(dense, keep, grams))
    assert 0 < fixed.ppl_delta < plain.ppl_delta
    assert torch.equal(dense.model.layers[0].mlp.down_proj.weight, before), "weights restored"
