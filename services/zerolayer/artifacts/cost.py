"""Measured costs of serving a tier (`zerolayer collapse price` writes them): one JSON file per
configured tier under <artifacts>/<model>/costs/, and what a tier card serves of it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["cost_file", "read_cost", "write_cost", "served_cost"]


def cost_file(root: Path, tier: str) -> Path:
    """Where a tier's measured cost lives: <artifacts>/<model>/costs/<tier>.json."""
    return Path(root) / "costs" / f"{tier}.json"


def read_cost(root: Path, tier: str) -> dict[str, Any] | None:
    """A tier's measured cost, None when it was never measured (or the file is unreadable)."""
    try:
        data = json.loads(cost_file(root, tier).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def served_cost(root: Path, tier: str, stamp: str | None) -> dict[str, Any] | None:
    """What a tier card serves of its measured cost: the price per 1M tokens, the hardware
    class, when, and the throughputs it follows from; `stale` when the artifact measured is
    not the one served now (rebuilt, promoted or rolled back since)."""
    cost = read_cost(root, tier)
    if cost is None:
        return None
    keep = ("cost_per_1m_tokens", "hardware_class", "replica_hour_usd", "measured")
    return {
        **{k: cost.get(k) for k in keep},
        "tokens_per_s": cost.get("tokens_per_s"),
        "prefill_tokens_per_s": cost.get("prefill_tokens_per_s"),
        "objective": cost.get("objective"),
        "stale": cost.get("artifact_stamp") != stamp,
    }


def write_cost(root: Path, tier: str, figures: dict[str, Any]) -> Path:
    """Write a tier's measured cost atomically (a reader sees the old file or the new one)."""
    path = cost_file(root, tier)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(figures, indent=1) + "\n")
    os.replace(tmp, path)
    return path
