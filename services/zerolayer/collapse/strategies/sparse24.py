"""The sparse24 tier: 2:4 weights (|W| x ||a|| scores) on the projection groups whose ablation
keeps the tier within budget, cheapest groups first, confirmed on the evaluation corpus."""

from __future__ import annotations

from typing import Any

from zerolayer.artifacts import ATTN_PROJ, MLP_PROJ, save_sparse24
from zerolayer.collapse.build import Builder
from zerolayer.collapse.model import decoder_layers
from zerolayer.collapse.progress import bar
from zerolayer.collapse.sparse24 import input_norms, linear, mask_24, sparsified

__all__ = ["build_sparse24"]


def build_sparse24(b: Builder) -> dict[str, Any]:
    """2:4 on the projection groups whose ablation keeps the tier in budget."""
    norms = input_norms(b.model, b.calib_windows[:16])
    units = [(i, group) for i in range(b.layers) for group in ("mlp", "attn")]

    def expand(chosen: list[tuple[int, str]]) -> list[tuple[int, str]]:
        return [(i, p) for i, g in chosen for p in (MLP_PROJ if g == "mlp" else ATTN_PROJ)]

    cost = {}
    for unit in bar(units, desc="2:4 sensitivity", unit="group"):
        cost[unit] = b.sensor.evaluate(sparsified(b.model, expand([unit]), norms)).ppl_delta
    order = sorted(units, key=lambda u: cost[u])
    lo, hi, best = 0, len(order), 0
    budget = b.s.budget("sparse24")
    for _ in bar(range(b.s.search_tries + 2), desc="2:4 search", unit="try"):
        if lo >= hi:
            break
        mid = (lo + hi + 1) // 2
        if (
            b.validator.evaluate(sparsified(b.model, expand(order[:mid]), norms)).ppl_delta
            <= budget
        ):
            lo, best = mid, mid
        else:
            hi = mid - 1

    # Keep the choice only if the evaluation corpus confirms the budget; else search lower.
    def on_eval(k: int) -> dict[str, float]:
        cut = sparsified(b.model, expand(order[:k]), norms)
        return b.evaluator.evaluate(cut, desc="sparse24 on eval").as_dict()

    quality = on_eval(best)
    if quality["ppl_delta"] > budget:
        lo, hi, quality = 0, best - 1, on_eval(0)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            q = on_eval(mid)
            if q["ppl_delta"] <= budget:
                lo, quality = mid, q
            else:
                hi = mid - 1
        best = lo
    chosen = expand(order[:best])
    folder = b.out / "sparse24"
    layers = decoder_layers(b.model)
    save_sparse24(
        folder,
        {
            (i, p): (w := linear(layers[i], p).weight.detach()) * mask_24(w, norms[(i, p)])
            for i, p in chosen
        },
    )

    def size(projections: list[tuple[int, str]]) -> int:
        return sum(linear(layers[i], p).weight.numel() for i, p in projections)

    every = [(i, p) for i in range(len(layers)) for p in (*MLP_PROJ, *ATTN_PROJ)]
    mlp = [(i, p) for i, p in every if p in MLP_PROJ]
    extra = {
        "level": {"groups": [f"{i}.{g}" for i, g in order[:best]]},
        "mlp_weights_24": round(size([u for u in chosen if u[1] in MLP_PROJ]) / size(mlp), 5),
        # of every decoder projection's weights (attention and MLP; not the embeddings)
        "weights_24": round(size(chosen) / size(every), 5),
        "projections_24": [f"{i}.{p}" for i, p in chosen],
        "hardware_sparsity": "2:4 sparse tensor cores on NVIDIA sm80+; dense elsewhere",
    }
    extra["leave_one_domain_out"] = b.leave_one_out(
        quality,
        lambda left_out: sparsified(
            b.model, chosen, input_norms(b.model, b.windows_without(left_out)[:16], progress=False)
        ),
        "the 2:4 pattern (|W| x ||a|| with the input norms measured again without the domain) "
        "on the same projections",
    )
    return b.card(
        "sparse24",
        "2:4 semi-structured weights (|W| x ||a||), chosen groups",
        quality,
        extra,
        folder,
    )
