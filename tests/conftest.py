"""Shared fixtures: a real redis-server, the imported default model, and (for integration tests)
the whole platform started once per session."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from zerolayer.chunker.service import Chunker
from zerolayer.config import PlatformConfig, load_config
from zerolayer.store.embedded import EmbeddedRedis
from zerolayer.tokenfix.prompt import PromptBuilder
from zerolayer.tokenfix.service import Tokenfix

# collapse build settings small enough for tests (the real ones take tens of minutes)
TINY_COLLAPSE = {
    "samples": 3,
    "seq_len": 64,
    "validation_samples": 2,
    "eval_samples": 3,
    "distill_epochs": 1,
}


def _tiny_settings() -> Any:
    from zerolayer.collapse.build import BuildSettings

    return BuildSettings(
        **TINY_COLLAPSE,
        search_tries=2,
        static_levels=(0.3,),
        dynamic_levels=(0.7,),
        input_levels=(("attn", (0.5,)), ("gate_up", (0.2,)), ("qkv", (0.2,))),
    )


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


@pytest.fixture(scope="session")
def tiny_build(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every tier artifact of the default model, built by the real collapse compiler with tiny
    settings (a few minutes), under <root>/<model>/; shared by the build tests and the platform.
    Returns {"root": artifacts root, "out": the model's folder, "cards", "builder"}."""
    from zerolayer.collapse.build import Builder
    from zerolayer.collapse.corpus import pydoc_corpus

    root = tmp_path_factory.mktemp("artifacts")
    out = root / "smollm2-135m"
    corpora = tmp_path_factory.mktemp("build-corpora")
    builder = Builder(
        model_dir,
        out,
        pydoc_corpus("calibration", corpora),
        pydoc_corpus("evaluation", corpora),
        _tiny_settings(),
        "smollm2-135m",
    )
    cards = builder.build(["pruned", "dynamic", "sparse24"])  # pruned brings masked along
    return {"root": root, "out": out, "cards": cards, "builder": builder}


@pytest.fixture(scope="session")
def tokenfix(model_dir: Path) -> Tokenfix:
    """The tokenfix step for the default model."""
    return Tokenfix({"smollm2-135m": model_dir})


@pytest.fixture(scope="session")
def chunker(model_dir: Path, base_config: PlatformConfig) -> Chunker:
    """The chunker for the default model, with the platform's settings."""
    return Chunker({"smollm2-135m": model_dir}, base_config.chunker)
