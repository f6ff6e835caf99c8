"""Tier cards: what an artifact is and what it costs in quality, written last by the compiler so
that a folder with a card holds a finished artifact."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from zerolayer.artifacts.names import CARD_FILE, FORMAT_VERSION
from zerolayer.errors import ArtifactError

__all__ = [
    "write_card",
    "read_card",
    "is_built",
    "check_version",
    "card_stamp",
    "served_card",
    "live_reference",
]


def check_version(found: Any, where: Path | str) -> int:
    """The format version of an artifact (absent: 1); ArtifactError when it is newer than this
    code reads."""
    version = 1 if found is None else int(found)
    if version > FORMAT_VERSION:
        raise ArtifactError(
            f"{where} is artifact format {version}; this zerolayer reads up to "
            f"{FORMAT_VERSION}: rebuild it, or upgrade zerolayer"
        )
    return version


def write_card(folder: Path, card: dict[str, Any]) -> dict[str, Any]:
    """Write the card with the format version, atomically (a reader sees the whole card or
    none, never a half-written one); the card as written."""
    folder = Path(folder)
    card = {"format_version": FORMAT_VERSION, **card}
    tmp = folder / (CARD_FILE + ".tmp")
    tmp.write_text(json.dumps(card, indent=1) + "\n")
    os.replace(tmp, folder / CARD_FILE)
    return card


def read_card(folder: Path) -> dict[str, Any]:
    """The card of a finished artifact; ArtifactError when it is missing, broken or too new."""
    path = Path(folder) / CARD_FILE
    try:
        card = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ArtifactError(f"no {CARD_FILE} in {folder}: the artifact is not built") from exc
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(card, dict):
        raise ArtifactError(f"{path} is not a JSON object")
    check_version(card.get("format_version"), path)
    return card


def is_built(folder: Path | None) -> bool:
    """True when the folder holds a finished artifact this code can read."""
    if folder is None:
        return False
    try:
        read_card(folder)
    except ArtifactError:
        return False
    return True


def card_stamp(folder: Path | None) -> str | None:
    """A short hash of the artifact's card: changes when another artifact is put in the folder
    (every build writes a new card, last); None when there is no readable card."""
    if folder is None:
        return None
    try:
        return hashlib.sha256((Path(folder) / CARD_FILE).read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def served_card(folder: Path | None, tier: str, artifact: str) -> dict[str, Any]:
    """A served tier's card: what it serves and its measured quality change against dense
    (folder None: the dense model, or an engine that loads no artifact), its changed answers
    without their ROC curves."""
    if folder is None:
        card: dict[str, Any] = {
            "method": "dense",
            "quality": {"ppl_delta": 0.0, "kl": 0.0},
            "flips": {"flips": 0.0, "kl": 0.0, "overall": 0.0, "worst_domain": None},
        }
    else:
        card = read_card(folder)
    card.pop("tier", None)
    signals = card.get("flips", {}).get("confidence", {}).get("signals", {})
    for signal in signals.values():  # the ROC curves stay on disk: the AUC is what is served
        signal.pop("curve", None)
    return {"tier": tier, "artifact": artifact, **card}


def live_reference(card: dict[str, Any], silence_map: Path) -> dict[str, Any]:
    """What a tier's live signals are measured against: the silence map's per-layer |a|
    thresholds on down_proj's inputs, with the tier's calibrated sparsity and skip rate (its
    card's `live_reference`; for the dense model the silence map's own, from the model's
    `silence_map` folder). An artifact built before cards carried them gets the thresholds alone
    (no calibrated figures: no drift), and a model without a silence map gets nothing ({})."""
    if card.get("live_reference"):
        return dict(card["live_reference"])
    if card.get("method") == "dense":
        try:
            return dict(json.loads((silence_map / "live_reference.json").read_text()))
        except (OSError, ValueError):
            pass
    try:
        thresholds = json.loads((silence_map / "silence_map.json").read_text())["mlp"]["thresholds"]
    except (OSError, ValueError, KeyError):
        return {}
    return {"thresholds": thresholds, "sparsity": None, "skip_rate": None}
