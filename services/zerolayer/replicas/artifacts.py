"""The artifact behind each tier, as a replica needs it: its folder, which must hold a finished
artifact, and its tier card (quality measured by the collapse compiler). The card's reading is
zerolayer.artifacts'; this module says which folder a configured tier serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zerolayer.artifacts import read_card
from zerolayer.artifacts.card import card_stamp, served_card
from zerolayer.artifacts.card import live_reference as card_live_reference
from zerolayer.artifacts.cost import served_cost
from zerolayer.config import PlatformConfig
from zerolayer.errors import ArtifactError

__all__ = ["require_artifact", "tier_card", "live_reference"]


def require_artifact(cfg: PlatformConfig, model: str, tier: str) -> Path | None:
    """The tier's artifact folder (None for the dense model and a fake engine's tier);
    ArtifactError if it is missing."""
    folder = cfg.served_artifact_dir(model, tier)
    if folder is None:
        return None
    try:
        read_card(folder)
    except ArtifactError as exc:
        kind = cfg.models[model].tiers[tier].build_tier()
        raise ArtifactError(
            f"tier {model}:{tier} serves the {kind!r} artifact, which is missing or unreadable "
            f"({exc}). Build it with `zerolayer collapse build --model {model} --tiers {kind}`, "
            "or start the platform with build_missing_artifacts: true"
        ) from exc
    return folder


def tier_card(cfg: PlatformConfig, model: str, tier: str) -> dict[str, Any]:
    """The tier's card: what it serves, its measured quality change against dense, and what it
    costs to serve where `zerolayer collapse price` measured it (`cost`)."""
    tc = cfg.models[model].tiers[tier]
    folder = cfg.served_artifact_dir(model, tier)
    card = served_card(folder, tier, tc.artifact)
    cost = served_cost(cfg.artifact_root(model), tier, card_stamp(folder))
    return {**card, "cost": cost} if cost else card


def live_reference(cfg: PlatformConfig, model: str, card: dict[str, Any]) -> dict[str, Any]:
    """What a tier's live signals are measured against (zerolayer.artifacts.card.live_reference,
    with the model's silence map folder)."""
    return card_live_reference(card, cfg.artifact_root(model) / "silence_map")
