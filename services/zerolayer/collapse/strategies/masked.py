"""The masked tier (and its pruned checkpoint): a static cut of MLP channels. Per-layer
sensitivity on the validation windows, an allocation across layers within the budget, a
least-squares repair of down_proj over the kept channels, then distillation of those columns;
kept only when the evaluation corpus confirms the budget."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from zerolayer.artifacts import save_masked, save_pruned
from zerolayer.collapse.allocate import Choice, layer_sensitivity, static_cut, static_keeps
from zerolayer.collapse.build import Builder, Weights
from zerolayer.collapse.model import decoder_layers, projection
from zerolayer.collapse.reconstruct import gram_matrices, repaired, repaired_weight, swapped
from zerolayer.collapse.select import protected

__all__ = ["build_masked", "build_pruned"]


def build_masked(b: Builder) -> dict[str, Any]:
    """Static MLP channel cut: per-layer sensitivity, convex allocation, least-squares
    repair, then distillation of the kept down_proj columns; confirmed on the eval corpus."""
    smap, grams = b.silence_map(), b.grams()
    protect = protected(smap)
    layers = decoder_layers(b.model)
    cut = static_cut(b.model, grams, protect)
    sens = layer_sensitivity(
        b.sensor,
        lambda i, lv: cut({i: lv}),
        b.cut_layers,
        b.s.static_levels,
        desc="MLP cut sensitivity",
    )
    total = sum(projection(layer, "mlp").in_features for layer in layers)

    def removed(shares: dict[int, float]) -> float:
        return (
            sum(round(s * projection(layers[i], "mlp").in_features) for i, s in shares.items())
            / total
        )

    def recover(choice: Choice) -> tuple[Weights, AbstractContextManager[None], bool]:
        keep = static_keeps(b.model, grams, choice.shares, protect)
        start = {
            i: repaired_weight(projection(layers[i], "mlp").weight.detach(), grams[i], k)
            for i, k in keep.items()
        }
        down = b.distilled(choice, start, keep, lambda w: swapped(b.model, w))
        return down, swapped(b.model, down), down is not start

    choice, down, quality, distilled = b.fit(sens, cut, removed, "masked", recover)
    keep = static_keeps(b.model, grams, choice.shares, protect)
    val_after = b.validator.evaluate(swapped(b.model, down)).ppl_delta
    folder = b.out / "masked"
    save_masked(folder, keep, down, {"model": b.name, "dense_dir": str(b.model_dir)})
    widths = [
        int(keep[i].sum()) if i in keep else projection(layer, "mlp").in_features
        for i, layer in enumerate(layers)
    ]
    # gate, up and down all shrink with the intermediate width: MLP FLOPs and parameters
    # fall by the same share as the channels.
    share = 1 - sum(widths) / total
    extra = {
        "level": {
            "mlp_channels_removed": round(share, 5),
            "per_layer_share": {str(i): round(s, 4) for i, s in choice.shares.items()},
        },
        "intermediate_sizes": widths,
        "mlp_params_removed": round(share, 5),
        "mlp_flops_removed": round(share, 5),
        "validation_ppl_delta": round(val_after, 5),
        "validation_ppl_delta_repair_only": round(choice.val_delta, 5),
        "distill_epochs": b.s.distill_epochs if distilled else 0,
        "sensitivity": sens.as_json(),
        "dense_layers": b.s.dense_layers,
    }
    extra["leave_one_domain_out"] = b.leave_one_out(quality, _rederive(b, choice.shares), _RECIPE)
    return b.card(
        "masked",
        "static MLP channel cut: OBS ranking, least-squares repair, KL-convex allocation "
        "across layers, distillation of the kept down_proj columns",
        quality,
        extra,
        folder,
    )


_RECIPE = (
    "the channel choice (OBS ranking, outlier channels kept) and the least-squares repair "
    "measured again without the domain, at the same per-layer shares; not distilled (the "
    "figure with the domain seen uses the same recipe)"
)


def _rederive(
    b: Builder, shares: dict[int, float]
) -> Callable[[str | None], AbstractContextManager[None]]:
    """The static cut made again without one domain's calibration windows: the Gram matrices
    are the build's less that domain's, the outlier channels those of a silence map of the
    other windows."""

    def cut(left_out: str | None) -> AbstractContextManager[None]:
        grams = b.grams()
        if left_out is not None:
            own = gram_matrices(b.model, b.calib_of({left_out}), progress=False)
            grams = [g - o for g, o in zip(grams, own, strict=True)]
        protect = protected(b.silence_map_without(left_out))
        return repaired(b.model, static_keeps(b.model, grams, shares, protect), grams)

    return cut


def build_pruned(b: Builder, masked_card: dict[str, Any]) -> dict[str, Any]:
    """The masked cut with channels physically removed."""
    folder = save_pruned(b.out / "pruned", b.model_dir, b.out / "masked")
    extra = {
        k: masked_card[k]
        for k in (
            "level",
            "intermediate_sizes",
            "mlp_params_removed",
            "mlp_flops_removed",
            "leave_one_domain_out",
        )
    }
    return b.card("pruned", "masked cut applied physically", masked_card["quality"], extra, folder)
