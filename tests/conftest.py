"""Shared fixtures: a real redis-server, the imported default model, and (for integration tests)
the whole platform started once per session.

Tests never read the developer's own cache or HOME: their platform config and every process they
start use the test cache (ZEROLAYER_TEST_CACHE, default .test-cache/ in the repository, kept
between runs so the model is imported once) and a HOME inside it; the developer's ZEROLAYER_*,
REDIS_URL and RAY_ADDRESS are left out."""

from __future__ import annotations

import ctypes
import ctypes.util
import faulthandler
import gc
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from zerolayer.chunker.service import Chunker
from zerolayer.config import PlatformConfig, load_config
from zerolayer.store.embedded import EmbeddedRedis
from zerolayer.tokenfix.prompt import PromptBuilder
from zerolayer.tokenfix.service import Tokenfix

# two domains (the chat domain would have the model answer a hundred prompts first): every
# measurement of a build runs over each domain's windows
TINY_DOMAINS = ("docs", "zh")
# collapse build settings small enough for tests (the real ones take tens of minutes)
TINY_COLLAPSE: dict[str, Any] = {
    "domains": list(TINY_DOMAINS),
    "samples": 4,  # two calibration windows per domain
    "seq_len": 64,
    "validation_samples": 1,
    "eval_samples": 2,
    "distill_epochs": 1,
    "search_tries": 2,
    "static_levels": [0.3],
    "dynamic_levels": [0.7],
    "input_levels": {"attn": [0.5], "gate_up": [0.2], "qkv": [0.2], "head": [0.2]},
    "flip_prompts": 3,
    "flip_tokens": 12,
    "price_after_build": False,
}


def _tiny_settings() -> Any:
    from zerolayer.config import CollapseConfig

    return CollapseConfig(**TINY_COLLAPSE)


TEST_CACHE = Path(
    os.environ.get("ZEROLAYER_TEST_CACHE") or Path(__file__).resolve().parents[1] / ".test-cache"
)
_LEFT_OUT = ("ZEROLAYER_", "REDIS_URL", "RAY_ADDRESS", "XDG_CACHE_HOME", "HOME")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for processes a test starts (and for load_config): this process's,
    without the developer's zerolayer settings, with the test cache and a HOME inside it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LEFT_OUT)}
    home = TEST_CACHE / "home"
    home.mkdir(parents=True, exist_ok=True)
    return {**env, "HOME": str(home), "ZEROLAYER_CACHE_DIR": str(TEST_CACHE), **extra}


@contextmanager
def setup_budget(seconds: float) -> Iterator[None]:
    """A session fixture's own time budget. pytest's per-test timeout covers test bodies only
    (timeout_func_only), since set-up shared by many tests may take long on a busy machine; past
    this budget, every thread's stack is printed and the run ends instead of hanging."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs the imported model (directly or through another fixture) as
    `model`, so the fast selection can leave them out. Tests that start a Ray of their own
    (`local_serve`) run first: the integration tests' platform keeps its Ray in this process
    from its first test to the session's end, and a process holds one Ray at a time."""
    for item in items:
        if "model_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.model)
    items.sort(key=lambda item: "local_serve" not in getattr(item, "fixturenames", ()))


_LIBC = ctypes.CDLL(ctypes.util.find_library("c")) if ctypes.util.find_library("c") else None


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Give the memory a test module freed back to the system after its last test: the
    in-process engines' worker threads each leave a malloc arena of freed blocks, and the
    integration platform (in this process, with its Ray) later needs that memory (Ray's memory
    monitor kills replicas past 95% of the machine's). tests/engines/test_torch_engine.py
    alone: 1907 MB held at its end without this, 591 MB with it. Once a module, not once a
    test: a collection over this process's heap takes a good part of a second."""
    if nextitem is not None and nextitem.module is item.module:
        return
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def base_config() -> PlatformConfig:
    """The repo's platform config over the test cache (models are imported into it once)."""
    return load_config(env=clean_env())


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """The platform's embedded server, locked down as `zerolayer up` starts it, for the session."""
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: EmbeddedRedis) -> str:
    """The session server's address with its credentials in it, on database 1: the integration
    platform keeps database 0 of the same server, and its gateways' batch workers and billing
    consumers would otherwise take the queued batches and usage events of in-process tests."""
    url = redis_server.secret_url()
    assert url.endswith("?db=0"), url
    return url.removesuffix("?db=0") + "?db=1"


@pytest.fixture(scope="session")
def model_dir(base_config: PlatformConfig) -> Path:
    """The default model imported into the cache (about 30 s the first time)."""
    from zerolayer.models.importer import ensure_model

    with setup_budget(1200):
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
    from zerolayer.collapse.domains import standard_corpora
    from zerolayer.collapse.strategies import build

    with setup_budget(3600):
        root = tmp_path_factory.mktemp("artifacts")
        out = root / "smollm2-135m"
        corpora = tmp_path_factory.mktemp("build-corpora")
        domains = standard_corpora(model_dir, corpora, TINY_DOMAINS)
        builder = Builder(model_dir, out, domains, _tiny_settings(), "smollm2-135m")
        cards = build(builder, ["pruned", "dynamic", "sparse24"])  # pruned brings masked along
    return {"root": root, "out": out, "cards": cards, "builder": builder}


@pytest.fixture(scope="session")
def tokenfix(model_dir: Path) -> Tokenfix:
    """The tokenfix step for the default model."""
    return Tokenfix({"smollm2-135m": model_dir})


@pytest.fixture(scope="session")
def chunker(model_dir: Path, base_config: PlatformConfig) -> Chunker:
    """The chunker for the default model, with the platform's settings."""
    return Chunker({"smollm2-135m": model_dir}, base_config.chunker)
