"""The whole platform (Ray Serve, a real redis-server, the real model on vLLM and the torch
engine, every tier of the default model), started once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from zerolayer.config import PlatformConfig, RedisConfig
from zerolayer.serve.launcher import Platform

from tests.conftest import free_port


@pytest.fixture(scope="session")
def platform(
    base_config: PlatformConfig,
    redis_url: str,
    model_dir: Path,
    tiny_build: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Platform]:
    cfg = base_config.model_copy(
        update={
            "port": free_port(),
            "redis": RedisConfig(url=redis_url),
            "dev_key_file": str(tmp_path_factory.mktemp("keys") / "dev-key"),
            # every tier's artifact, from the real compiler at tiny settings (tests/conftest.py)
            "artifacts_dir": str(tiny_build["root"]),
            "build_missing_artifacts": False,
        }
    )
    p = Platform(cfg).start()
    yield p
    p.stop()
