"""One module per tier strategy of the collapse compiler; each takes the shared Builder and
returns the tier's card. `build` runs the strategies of the tiers asked for."""

from __future__ import annotations

from typing import Any

from zerolayer.artifacts import BUILD_KINDS
from zerolayer.collapse.build import Builder
from zerolayer.collapse.strategies.dynamic import build_dynamic
from zerolayer.collapse.strategies.masked import build_masked, build_pruned
from zerolayer.collapse.strategies.sparse24 import build_sparse24

__all__ = ["TIERS", "build", "build_dynamic", "build_masked", "build_pruned", "build_sparse24"]

TIERS = BUILD_KINDS


def build(builder: Builder, tiers: list[str]) -> dict[str, dict[str, Any]]:
    """Build the named tiers (pruned needs masked, which is then built too); their cards."""
    unknown = set(tiers) - set(TIERS)
    if unknown:
        raise ValueError(f"unknown tiers {sorted(unknown)}; known: {', '.join(TIERS)}")
    cards: dict[str, dict[str, Any]] = {}
    if "masked" in tiers or "pruned" in tiers:
        cards["masked"] = build_masked(builder)
    if "pruned" in tiers:
        cards["pruned"] = build_pruned(builder, cards["masked"])
    if "dynamic" in tiers:
        cards["dynamic"] = build_dynamic(builder)
    if "sparse24" in tiers:
        cards["sparse24"] = build_sparse24(builder)
    return cards
