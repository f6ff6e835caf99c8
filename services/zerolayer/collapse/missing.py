"""The compiler's one entry for serving: build the tier artifacts a model's served tiers need
and lack, with the model's collapse settings, reporting progress to a callback. The launcher
calls it before the platform starts; nothing else in serving imports the compiler."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zerolayer.artifacts import is_built
from zerolayer.config import PlatformConfig
from zerolayer.errors import ArtifactError

__all__ = ["BuildProgress", "missing_kinds", "build_missing", "build_tiers"]


@dataclass(frozen=True)
class BuildProgress:
    """One step of a build: `kind` is the artifact (None for the build as a whole), `step`
    one of start, done; `message` says it in words."""

    model: str
    kind: str | None
    step: str
    message: str


Progress = Callable[[BuildProgress], None]


def _quiet(_: BuildProgress) -> None:
    pass


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


def build_tiers(
    cfg: PlatformConfig, model: str, kinds: list[str], progress: Progress = _quiet
) -> list[str]:
    """Build these artifact kinds (masked, pruned, dynamic, sparse24) into the model's artifact
    folder with its collapse settings (progress bars on stderr, steps to `progress`); the kinds
    built."""
    if not kinds:
        return []
    from zerolayer.collapse.build import Builder
    from zerolayer.collapse.chat import default_corpus
    from zerolayer.collapse.strategies import build
    from zerolayer.models.importer import ensure_model

    settings = cfg.models[model].collapse
    progress(
        BuildProgress(
            model,
            None,
            "start",
            f"collapse: building {', '.join(kinds)} for {model} ({settings.samples} calibration "
            f"samples of {settings.seq_len} tokens); later starts reuse them",
        )
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
    for kind, card in build(builder, kinds).items():
        q = card["quality"]
        message = f"collapse: {kind} ppl {q['ppl_delta']:+.2%} kl {q['kl']:.4f}"
        progress(BuildProgress(model, kind, "done", message))
    return kinds


def build_missing(cfg: PlatformConfig, model: str, progress: Progress = _quiet) -> list[str]:
    """Build the model's missing tier artifacts (missing_kinds); the kinds built."""
    return build_tiers(cfg, model, missing_kinds(cfg, model), progress)
