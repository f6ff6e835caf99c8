"""Tier artifacts at start: found, built when missing (and reused after), or a clear failure
before anything starts."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest
from zerolayer.collapse import BuildProgress, build_missing, missing_kinds
from zerolayer.config import PlatformConfig, RedisConfig
from zerolayer.errors import ArtifactError
from zerolayer.replicas.artifacts import require_artifact, tier_card
from zerolayer.serve.launcher import Platform

from tests.conftest import TINY_COLLAPSE, free_port

MODEL = "smollm2-135m"


def _cfg(base: PlatformConfig, root: Path, build: bool = True) -> PlatformConfig:
    data = base.model_dump()
    data["artifacts_dir"] = str(root)
    data["build_missing_artifacts"] = build
    data["models"][MODEL]["collapse"].update(TINY_COLLAPSE)
    return PlatformConfig.model_validate(data)


def test_missing_artifact_is_named_with_the_command_that_builds_it(
    base_config: PlatformConfig, tmp_path: Path
) -> None:
    cfg = _cfg(base_config, tmp_path)
    assert require_artifact(cfg, MODEL, "baseline") is None
    with pytest.raises(ArtifactError) as err:
        require_artifact(cfg, MODEL, "masked")
    msg = str(err.value)
    assert str(tmp_path / MODEL / "pruned") in msg
    assert f"zerolayer collapse build --model {MODEL} --tiers pruned" in msg
    assert missing_kinds(cfg, MODEL) == ["pruned", "sparse24"]


def test_platform_with_a_missing_artifact_fails_at_start_not_at_first_request(
    base_config: PlatformConfig, tmp_path: Path, redis_url: str
) -> None:
    cfg = _cfg(base_config, tmp_path, build=False).model_copy(
        update={"port": free_port(), "redis": RedisConfig(url=redis_url)}
    )
    log = io.StringIO()
    with pytest.raises(ArtifactError, match="sparse24|pruned"):
        Platform(cfg, log=log).start()
    said = log.getvalue()
    assert "redis:" not in said and "ray: starting" not in said  # it stopped before both


@pytest.mark.integration  # runs the collapse compiler
def test_missing_tier_artifacts_are_built_once_then_reused(
    base_config: PlatformConfig, tiny_build: dict[str, Any], tmp_path: Path
) -> None:
    root = tmp_path / "artifacts"
    shutil.copytree(tiny_build["out"], root / MODEL)
    shutil.rmtree(root / MODEL / "sparse24")
    cfg = _cfg(base_config, root)
    assert missing_kinds(cfg, MODEL) == ["sparse24"]
    steps: list[BuildProgress] = []
    assert build_missing(cfg, MODEL, steps.append) == ["sparse24"]
    assert [(p.kind, p.step) for p in steps] == [(None, "start"), ("sparse24", "done")]
    assert "sparse24 ppl" in steps[-1].message
    card = tier_card(cfg, MODEL, "sparse24")
    assert card["artifact"] == "sparse24" and card["quality"]["ppl_delta"] <= 0.10
    stamp = (root / MODEL / "sparse24" / "tier_card.json").stat().st_mtime_ns
    assert build_missing(cfg, MODEL) == []
    assert (root / MODEL / "sparse24" / "tier_card.json").stat().st_mtime_ns == stamp


@pytest.mark.integration  # the compiler's artifacts (tiny_build)
def test_tier_cards(base_config: PlatformConfig, tiny_build: dict[str, Any]) -> None:
    cfg = _cfg(base_config, tiny_build["root"])
    base = tier_card(cfg, MODEL, "baseline")
    assert base["quality"]["ppl_delta"] == 0.0 and base["artifact"] == "dense"
    masked = tier_card(cfg, MODEL, "masked")  # on vLLM: the pruned checkpoint's card
    assert masked["quality"] == tiny_build["cards"]["pruned"]["quality"]
    assert masked["tier"] == "masked" and masked["artifact"] == "masked"
