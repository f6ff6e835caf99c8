"""What serving asks of the compiler: which tier artifacts a model's served tiers need and lack,
which tiers an artifact kind serves, and clearing a kind's card before it is built again
(`zerolayer up` builds in a worker process, collapse.worker)."""

from __future__ import annotations

from pathlib import Path

from zerolayer.artifacts import CARD_FILE, is_built
from zerolayer.config import PlatformConfig
from zerolayer.errors import ArtifactError

__all__ = [
    "clear_cards",
    "missing_kinds",
    "tiers_of_kind",
]


def missing_kinds(cfg: PlatformConfig, model: str) -> list[str]:
    """Artifact kinds (collapse build tiers) that some served tier of the model needs and lacks.
    ArtifactError when one is missing from a folder the config names (not ours to build into)."""
    out = []
    for tier, tc in cfg.models[model].tiers.items():
        kind = tc.build_tier()
        if kind is None or tc.engine == "fake" or is_built(cfg.artifact_dir(model, tier)):
            continue
        if tc.artifact_dir is not None:
            raise ArtifactError(
                f"tier {model}:{tier}: no finished {kind!r} artifact in {tc.artifact_dir}, the "
                "folder models.yaml names"
            )
        if kind not in out:
            out.append(kind)
    return out


def tiers_of_kind(cfg: PlatformConfig, model: str, kind: str) -> list[str]:
    """The model's served tiers that serve this artifact kind from the model's artifact folder."""
    return [
        t
        for t, tc in cfg.models[model].tiers.items()
        if tc.build_tier() == kind and tc.engine != "fake" and tc.artifact_dir is None
    ]


def clear_cards(out: Path, kinds: list[str]) -> None:
    """Before these kinds build into `out`: remove their cards (a card is written last, so a
    folder with one is taken as finished; a build that stops half way must not leave one)."""
    built = {"masked", *kinds} if "pruned" in kinds else set(kinds)
    for kind in built:
        (Path(out) / kind / CARD_FILE).unlink(missing_ok=True)
