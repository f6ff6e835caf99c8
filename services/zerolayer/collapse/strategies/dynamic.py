"""The dynamic tier: per-token thresholds on projection inputs. First the MLP intermediate
(down_proj's input), with per-layer shares allocated across layers and down_proj distilled with
the thresholds in place; then o_proj's, gate/up's, q/k/v's and the output layer's inputs, kind
by kind, at the largest share (the same in every layer) that keeps the whole cut within budget,
gate/up's and q/k/v's weights distilled with their thresholds in place where that lets a larger
share fit. Latency mode skips the weight rows of every input these thresholds zero."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import torch

from zerolayer.artifacts import Dynamic, save_dynamic
from zerolayer.collapse.ablate import activation_threshold
from zerolayer.collapse.allocate import Choice, layer_sensitivity
from zerolayer.collapse.apply import dynamic_cut
from zerolayer.collapse.build import Builder, Weights, dynamic_applied
from zerolayer.collapse.calibrate import capture_inputs
from zerolayer.collapse.model import PROJECTIONS_OF, decoder_layers, linear, projection
from zerolayer.collapse.recover import distill_named
from zerolayer.collapse.select import dynamic_thresholds

__all__ = ["build_dynamic", "measured_sparsity"]


def _with(art: Dynamic, kind: str, thresholds: Any) -> Dynamic:
    """The artifact with one input kind's thresholds (by layer) replaced."""
    fields: dict[str, Any] = {kind: thresholds}
    return replace(art, **fields)


def build_dynamic(b: Builder) -> dict[str, Any]:
    """Per-token thresholds on the MLP intermediate, allocated per layer."""
    smap = b.silence_map()

    def cut(shares: dict[int, float]) -> Any:
        return activation_threshold(
            b.model, dynamic_thresholds(smap, {i: s for i, s in shares.items() if s > 0})
        )

    sens = layer_sensitivity(
        b.sensor,
        lambda i, lv: cut({i: lv}),
        range(b.layers),
        b.s.dynamic_levels,
        desc="activation sparsity sensitivity",
    )
    layers = decoder_layers(b.model)

    def with_weights(th: dict[int, float]) -> Callable[[Weights], AbstractContextManager[None]]:
        return lambda w: b.applied(Dynamic(th, {}, w))

    def recover(choice: Choice) -> tuple[Weights, AbstractContextManager[None], bool]:
        th = dynamic_thresholds(smap, {i: s for i, s in choice.shares.items() if s > 0})
        start = {i: projection(layers[i], "mlp").weight.detach().clone() for i in th}
        down = b.distilled(
            choice,
            start,
            None,
            with_weights(th),
            student_cut=lambda student: activation_threshold(student, th),
        )
        return down, with_weights(th)(down), down is not start

    choice, down, quality, distilled = b.fit(
        sens,
        cut,
        lambda sh: sum(sh.values()) / b.layers,
        "dynamic",
        recover,
        max_share=0.95,
    )
    thresholds = dynamic_thresholds(smap, {i: s for i, s in choice.shares.items() if s > 0})
    if not distilled:
        down = {}  # the dense weights: nothing to store
    art, shares, quality, weights, trials = _input_thresholds(
        b, Dynamic(thresholds, {}, down), quality
    )
    art = replace(art, weight_dtype=b.s.dynamic_weight_dtype)
    folder = save_dynamic(b.out / "dynamic", art)
    val_after = b.validator.evaluate(b.applied(art)).ppl_delta
    sparsity = measured_sparsity(b, art)
    level: dict[str, Any] = {
        "per_layer_share": {str(i): round(s, 4) for i, s in choice.shares.items()}
    }
    level.update({f"{kind}_share": share for kind, share in shares.items()})
    level.update({f"{kind}_weights": how for kind, how in weights.items()})
    level["input_trials"] = trials
    extra = {
        "level": level,
        "activation_sparsity": round(sparsity.pop("mlp"), 5),
        **{f"{kind}_activation_sparsity": round(v, 5) for kind, v in sparsity.items()},
        "validation_ppl_delta": round(val_after, 5),
        "validation_ppl_delta_thresholds_only": round(choice.val_delta, 5),
        "distill_epochs": b.s.distill_epochs if distilled else 0,
        "sensitivity": sens.as_json(),
    }
    extra["leave_one_domain_out"] = b.leave_one_out(
        quality,
        lambda left_out: b.applied(_rederived(b, art, choice.shares, shares, left_out)),
        "the thresholds (the silence map's per-layer quantiles at the chosen shares, then each "
        "input kind's quantile at its share) measured again without the domain; trained "
        "weights kept",
    )
    return b.card(
        "dynamic",
        "input-dependent masking of the MLP intermediate (per-layer |a| thresholds "
        "allocated across layers, down_proj distilled with the thresholds in place), then "
        "of the attention output, gate/up's, q/k/v's and the output layer's inputs (one share "
        "per kind in every layer, within what the budget leaves; gate/up's and q/k/v's weights "
        "distilled with their thresholds in place where that lets a larger share fit)",
        quality,
        extra,
        folder,
    )


def _input_thresholds(
    b, art: Dynamic, quality: dict[str, float]
) -> tuple[Dynamic, dict[str, float], dict[str, float], dict[str, str], list[dict[str, Any]]]:
    """Thresholds on the inputs of o_proj, gate/up, q/k/v and the output layer ("head"), kind
    by kind (`input_levels`):
    the largest share, the same in every layer, that keeps the whole cut within budget on
    the validation windows and then on the evaluation corpus; each kind's thresholds are
    measured with the ones chosen before it in place. For gate/up and q/k/v, a share whose
    cut misses the budget on the validation windows by no more than the distillation
    headroom has the weights reading that input distilled (KL against dense, the whole cut
    in place) and is tried again (`DISTILLATIONS` per kind at most). Returns the artifact,
    the share per kind (0 where none fits), the quality of the whole cut, per kind with
    a share its weights ("dense" or "distilled"), and every share tried with its perplexity
    change on the validation windows (before and after distillation, where distilled) and on
    the evaluation corpus (where it got that far): the card's `level.input_trials`.
    Latency mode skips the weight rows of every input these thresholds zero."""
    budget = b.s.budget("dynamic")
    headroom = b.s.distill_headroom.get("dynamic", 1.0) if b.s.distill_epochs else 1.0
    shares: dict[str, float] = {}
    trials: list[dict[str, Any]] = []
    for kind, levels in b.s.input_levels.items():
        shares[kind] = 0.0
        tries = DISTILLATIONS if kind in DISTILLED_INPUTS and b.s.distill_epochs > 0 else 0
        quantiles = _input_quantiles(b, art, kind, sorted(levels, reverse=True))
        for share, th in quantiles.items():
            trial = _with(art, kind, th)
            val = b.validator.evaluate(b.applied(trial)).ppl_delta
            tried: dict[str, Any] = {"kind": kind, "share": share, "validation": round(val, 5)}
            trials.append(tried)
            if budget < val <= budget * headroom and tries > 0:
                tries -= 1
                trial = _distil(b, trial, kind)
                val = b.validator.evaluate(b.applied(trial)).ppl_delta
                tried["validation_distilled"] = round(val, 5)
            if val > budget:
                continue
            desc = f"dynamic + {kind} on eval"
            q = b.evaluator.evaluate(b.applied(trial), desc=desc).as_dict()
            tried["evaluation"] = q["ppl_delta"]
            if q["ppl_delta"] <= budget:
                art, shares[kind], quality = trial, share, q
                break
    return art, shares, quality, _weights_of(art), trials


def _rederived(
    b: Builder,
    art: Dynamic,
    mlp_shares: dict[int, float],
    shares: dict[str, float],
    left_out: str | None,
) -> Dynamic:
    """The artifact's thresholds measured again without one domain's calibration windows (None:
    with all of them), at the same shares and in the same order, with its trained weights."""
    smap = b.silence_map_without(left_out)
    windows = b.windows_without(left_out)
    out = Dynamic(
        dynamic_thresholds(smap, {i: s for i, s in mlp_shares.items() if s > 0}),
        down=art.down,
        weights=art.weights,
    )
    for kind, share in shares.items():
        if share > 0:
            quantile = _input_quantiles(b, out, kind, [share], windows)[share]
            out = _with(out, kind, quantile)
    return out


def _weights_of(art: Dynamic) -> dict[str, str]:
    """Per thresholded input kind other than the MLP's: "distilled" where the artifact carries
    trained weights for the projections reading it, else "dense"."""
    return {
        kind: "distilled"
        if any((i, name) in art.weights for i in th for name in PROJECTIONS_OF.get(kind, ()))
        else "dense"
        for kind, th in art.inputs().items()
        if kind != "mlp" and th
    }


# the inputs whose projections are distilled with their thresholds in place (down_proj's, the
# MLP intermediate, is distilled when the MLP thresholds are chosen), and how many shares of
# each may be distilled (each costs `distill_epochs` over the calibration windows)
DISTILLED_INPUTS = ("gate_up", "qkv")
DISTILLATIONS = 2


def _distil(b, trial: Dynamic, kind: str) -> Dynamic:
    """The trial with the weights reading `kind` distilled (from the dense ones) with the whole
    trial cut in place."""
    layers = decoder_layers(b.model)
    start = {
        (i, name): linear(layers[i], name).weight.detach().clone()
        for i in trial.inputs()[kind]
        for name in PROJECTIONS_OF[kind]
    }
    weights = distill_named(
        b.model,
        start,
        b.calib_windows,
        epochs=b.s.distill_epochs,
        lr=b.s.distill_lr,
        seed=b.s.seed,
        student_cut=lambda student: dynamic_applied(student, trial),
    )
    return replace(trial, weights={**trial.weights, **weights})


@torch.no_grad()
def _input_quantiles(
    b, art: Dynamic, kind: str, shares: list[float], windows: list[list[int]] | None = None
) -> dict[float, dict[int, float]]:
    """Per share, per layer: the |x| under which that share of the kind's input falls on
    calibration text (`windows`, default the build's) with the artifact in place (20,000
    values sampled per window and layer, 16 windows)."""
    gen = torch.Generator().manual_seed(b.s.seed)
    seen: dict[int, list[torch.Tensor]] = {}  # per layer (only 0 for the output layer's)

    def sample(i: int, _kind: str, x: torch.Tensor) -> None:
        x = x.abs().flatten()
        pick = torch.randint(x.numel(), (min(20_000, x.numel()),), generator=gen)
        seen.setdefault(i, []).append(x[pick])

    with b.applied(art), capture_inputs(b.model, sample, [kind]):
        for ids in (b.calib_windows if windows is None else windows)[:16]:
            b.model(torch.tensor([ids]), use_cache=False)
    values = {i: torch.cat(v) for i, v in seen.items()}
    return {
        share: {i: float(torch.quantile(v, share)) for i, v in values.items()} for share in shares
    }


@torch.no_grad()
def measured_sparsity(b: Builder, art: Dynamic) -> dict[str, float]:
    """Per kind (mlp, attn, qkv, gate_up, head), the share of its input that is zero on evaluation
    text after the thresholds (0 for a kind without any); one pass counts all."""
    cut = art.inputs()
    zeros, total = {k: 0 for k in cut}, {k: 0 for k in cut}

    def count(i: int, kind: str, x: torch.Tensor) -> None:
        if i in cut[kind]:
            zeros[kind] += int((x == 0).sum())
            total[kind] += x.numel()

    # the cut's hooks first, so the counts see the thresholded inputs
    with dynamic_cut(b.model, art), capture_inputs(b.model, count, cut):
        for ids in b.eval_windows[:8]:
            b.model(torch.tensor([ids]), use_cache=False)
    return {k: zeros[k] / max(1, total[k]) for k in cut}
