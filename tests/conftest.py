"""Shared fixtures: a real redis-server, the imported default model, and (for integration tests)
the whole platform started once per session."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from zerolayer.config import PlatformConfig, load_config
from zerolayer.store.embedded import EmbeddedRedis
from zerolayer.tokenfix.prompt import PromptBuilder


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def base_config() -> PlatformConfig:
    """The repo's platform config with the user's model cache (models are imported once)."""
    return load_config(env=dict(os.environ))


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server (the embedded one) on a free port, for the whole session."""
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"), free_port())
    yield server.start()
    server.stop()


@pytest.fixture(scope="session")
def model_dir(base_config: PlatformConfig) -> Path:
    """The default model imported into the cache (about 30 s the first time)."""
    from zerolayer.models.importer import ensure_model

    return ensure_model(base_config, base_config.default_model)


@pytest.fixture(scope="session")
def prompts(model_dir: Path) -> PromptBuilder:
    """The default model's prompt builder (chat template, exact token counts)."""
    return PromptBuilder(model_dir)
