"""Ablation on the real model: a 0% cut is the dense model; cuts cost quality in order."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from zerolayer.collapse.ablate import Evaluator, activation_threshold, channel_mask
from zerolayer.collapse.select import channel_scores, dynamic_thresholds, keep_masks, protected
from zerolayer.collapse.silence_map import SilenceMap

pytestmark = pytest.mark.integration  # runs the collapse compiler


def test_zero_cut_gives_exactly_the_dense_perplexity(
    dense: Any, eval_windows: list[list[int]]
) -> None:
    ev = Evaluator(dense, eval_windows)
    keep_all = {
        i: torch.ones(dense.config.intermediate_size, dtype=torch.bool)
        for i in range(dense.config.num_hidden_layers)
    }
    result = ev.evaluate(channel_mask(dense, keep_all))
    assert result.ppl == ev.dense()
    assert result.ppl_delta == 0.0 and result.kl < 1e-4
    assert ev.dense() < 100.0 and ev.dense() > 1.0  # a sane language-model perplexity


def test_bigger_cuts_cost_more_and_hooks_are_removed(
    dense: Any, eval_windows: list[list[int]], small_map: SilenceMap
) -> None:
    ev = Evaluator(dense, eval_windows)
    scores, protect = channel_scores(small_map, dense), protected(small_map)
    layers = range(dense.config.num_hidden_layers)
    deltas = []
    for level in (0.05, 0.3):
        r = ev.evaluate(
            channel_mask(dense, keep_masks(scores, {i: level for i in layers}, protect))
        )
        deltas.append((r.ppl_delta, r.kl))
    assert 0 < deltas[0][0] < deltas[1][0] and 0 < deltas[0][1] < deltas[1][1]
    assert ev.evaluate().ppl_delta == 0.0  # the cuts' hooks are gone after their runs


def test_masks_never_cut_protected_channels(small_map: SilenceMap, dense: Any) -> None:
    scores, protect = channel_scores(small_map, dense), protected(small_map)
    masks = keep_masks(scores, {0: 0.9, 5: 0.9}, protect)
    for layer, keep in masks.items():
        assert bool(keep[protect[layer]].all())
        assert int((~keep).sum()) <= int(0.9 * keep.numel()) + 1


def test_dynamic_thresholds_skip_about_their_share(
    dense: Any, calib_windows: list[list[int]], small_map: SilenceMap
) -> None:
    from zerolayer.collapse.calibrate import capture_inputs

    thresholds = dynamic_thresholds(
        small_map, {i: 0.4 for i in range(dense.config.num_hidden_layers)}
    )
    zeros, total = [0], [0]

    def count(i: int, kind: str, x: torch.Tensor) -> None:
        if kind == "mlp":
            zeros[0] += int((x == 0).sum())
            total[0] += x.numel()

    with torch.no_grad(), activation_threshold(dense, thresholds), capture_inputs(dense, count):
        dense(torch.tensor([calib_windows[0]]), use_cache=False)
    assert 0.3 < zeros[0] / total[0] < 0.5


def test_the_output_layers_input_is_thresholded_and_captured(
    dense: Any, calib_windows: list[list[int]]
) -> None:
    from zerolayer.collapse.calibrate import capture_inputs

    seen: dict[tuple[int, str], torch.Tensor] = {}

    def grab(i: int, kind: str, x: torch.Tensor) -> None:
        seen[(i, kind)] = x

    x = torch.tensor([calib_windows[0][:64]])
    with torch.no_grad(), capture_inputs(dense, grab, ["head"]):
        logits = dense(x, use_cache=False).logits
    assert list(seen) == [(0, "head")]  # one output layer, as layer 0
    h = seen[(0, "head")]
    t = float(h.abs().flatten().quantile(0.3))
    with torch.no_grad(), activation_threshold(dense, {0: t}, "head"):
        with capture_inputs(dense, grab, ["head"]):
            cut = dense(x, use_cache=False).logits
    assert 0.25 < float((seen[(0, "head")] == 0).float().mean()) < 0.35
    expected = F.linear(F.hardshrink(h, t), dense.lm_head.weight)
    assert torch.allclose(cut, expected, atol=1e-4) and not torch.allclose(cut, logits, atol=1e-2)
