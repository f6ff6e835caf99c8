"""The artifact behind each tier, as a replica needs it: its folder, which must hold a finished
artifact, and its tier card (quality measured by the collapse compiler)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zerolayer.artifacts import read_card
from zerolayer.config import PlatformConfig
from zerolayer.errors import ArtifactError

__all__ = ["require_artifact", "tier_card", "live_reference"]


def require_artifact(cfg: PlatformConfig, model: str, tier: str) -> Path | None:
    """The tier's artifact folder (None for the dense model and a fake engine's tier);
    ArtifactError if it is missing."""
    folder = cfg.artifact_dir(model, tier)
    if folder is None or cfg.models[model].tiers[tier].engine == "fake":
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
    """The tier's card: what it serves and its measured quality change against dense."""
    tc = cfg.models[model].tiers[tier]
    folder = cfg.artifact_dir(model, tier)
    if folder is None or tc.engine == "fake":
        card: dict[str, Any] = {"method": "dense", "quality": {"ppl_delta": 0.0, "kl": 0.0}}
    else:
        card = read_card(folder)
    card.pop("tier", None)
    return {"tier": tier, "artifact": tc.artifact, **card}


def live_reference(cfg: PlatformConfig, model: str, card: dict[str, Any]) -> dict[str, Any]:
    """What a tier's live signals are measured against: the silence map's per-layer |a|
    thresholds on down_proj's inputs, with the tier's calibrated sparsity and skip rate (its
    card's `live_reference`; for the dense model the silence map's own). An artifact built
    before cards carried them gets the thresholds alone (no calibrated figures: no drift), and
    a model without a silence map gets nothing ({})."""
    if card.get("live_reference"):
        return dict(card["live_reference"])
    folder = cfg.artifact_root(model) / "silence_map"
    if card.get("method") == "dense":
        try:
            return dict(json.loads((folder / "live_reference.json").read_text()))
        except (OSError, ValueError):
            pass
    try:
        thresholds = json.loads((folder / "silence_map.json").read_text())["mlp"]["thresholds"]
    except (OSError, ValueError, KeyError):
        return {}
    return {"thresholds": thresholds, "sparsity": None, "skip_rate": None}
