"""The artifact behind each tier: where it is, whether it is there, building it when missing, and
its tier card (quality measured by the collapse compiler)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

from zerolayer.config import PlatformConfig
from zerolayer.errors import ArtifactError

__all__ = [
    "require_artifact",
    "missing_builds",
    "build_missing",
    "build_kinds",
    "tier_card",
]

CARD = "tier_card.json"


def require_artifact(cfg: PlatformConfig, model: str, tier: str) -> Path | None:
    """The tier's artifact folder (None for the dense model); ArtifactError if it is missing."""
    folder = cfg.artifact_dir(model, tier)
    if folder is None:
        return None
    if not (folder / CARD).exists():
        kind = cfg.models[model].tiers[tier].build_tier()
        raise ArtifactError(
            f"tier {model}:{tier} serves the {kind!r} artifact, which is missing: no {CARD} in "
            f"{folder}. Build it with `zerolayer collapse build --model {model} --tiers {kind}`, "
            "or start the platform with build_missing_artifacts: true"
        )
    return folder


def missing_builds(cfg: PlatformConfig, model: str) -> list[str]:
    """Collapse build tiers whose artifact some tier of the model needs and lacks."""
    out = []
    for tier, tc in cfg.models[model].tiers.items():
        kind = tc.build_tier()
        if kind is None or tc.engine == "fake":
            continue
        try:
            require_artifact(cfg, model, tier)
        except ArtifactError:
            if tc.artifact_dir is not None:
                raise  # a folder the user named is not ours to build into
            if kind not in out:
                out.append(kind)
    return out


def build_missing(cfg: PlatformConfig, model: str, log: TextIO = sys.stderr) -> list[str]:
    """Build the model's missing tier artifacts with its collapse settings (progress bars on
    stderr); the build tiers built. Without build_missing_artifacts, fail naming them."""
    kinds = missing_builds(cfg, model)
    if kinds and not cfg.build_missing_artifacts:
        for tier in cfg.models[model].tiers:
            require_artifact(cfg, model, tier)
    return build_kinds(cfg, model, kinds, log)


def build_kinds(
    cfg: PlatformConfig, model: str, kinds: list[str], log: TextIO = sys.stderr
) -> list[str]:
    """Build these collapse tiers (masked, pruned, dynamic, sparse24) into the model's artifact
    folder with its collapse settings; the tiers built."""
    if not kinds:
        return []
    from zerolayer.collapse.build import Builder
    from zerolayer.collapse.chat import default_corpus
    from zerolayer.collapse.commands import build_settings
    from zerolayer.models.importer import ensure_model

    settings = build_settings(cfg, model)
    print(
        f"collapse: building {', '.join(kinds)} for {model} ({settings.samples} calibration "
        f"samples of {settings.seq_len} tokens); later starts reuse them",
        file=log,
        flush=True,
    )
    corpora = Path(cfg.cache_dir) / "corpora"
    model_dir = ensure_model(cfg, model)
    builder = Builder(
        model_dir,
        cfg.artifact_root(model),
        default_corpus("calibration", model_dir, corpora),
        default_corpus("evaluation", model_dir, corpora),
        settings,
        model,
    )
    for kind, card in builder.build(kinds).items():
        q = card["quality"]
        print(f"collapse: {kind} ppl {q['ppl_delta']:+.2%} kl {q['kl']:.4f}", file=log, flush=True)
    return kinds


def tier_card(cfg: PlatformConfig, model: str, tier: str) -> dict[str, Any]:
    """The tier's card: what it serves and its measured quality change against dense."""
    tc = cfg.models[model].tiers[tier]
    folder = cfg.artifact_dir(model, tier)
    if folder is None or tc.engine == "fake":
        card: dict[str, Any] = {"method": "dense", "quality": {"ppl_delta": 0.0, "kl": 0.0}}
    else:
        card = json.loads((folder / CARD).read_text())
    card.pop("tier", None)
    return {"tier": tier, "artifact": tc.artifact, **card}
