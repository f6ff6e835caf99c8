"""The artifact behind each tier, as a replica needs it: its folder, which must hold a finished
artifact, and its tier card (quality measured by the collapse compiler)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zerolayer.artifacts import read_card
from zerolayer.config import PlatformConfig
from zerolayer.errors import ArtifactError

__all__ = ["require_artifact", "tier_card"]


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
