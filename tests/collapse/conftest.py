"""The real default model in transformers, and a small silence map calibrated on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from zerolayer.collapse.calibrate import calibrate
from zerolayer.collapse.corpus import pydoc_corpus, token_windows
from zerolayer.collapse.model import load_model
from zerolayer.collapse.silence_map import SilenceMap


@pytest.fixture(scope="session")
def dense(model_dir: Path) -> Any:
    return load_model(model_dir)


@pytest.fixture(scope="session")
def tokenizer(prompts: Any) -> Any:
    return prompts.tokenizer


@pytest.fixture(scope="session")
def corpus_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpora")


@pytest.fixture(scope="session")
def calib_windows(tokenizer: Any, corpus_cache: Path) -> list[list[int]]:
    return token_windows(tokenizer, pydoc_corpus("calibration", corpus_cache), 4, 128, seed=0)


@pytest.fixture(scope="session")
def eval_windows(tokenizer: Any, corpus_cache: Path) -> list[list[int]]:
    return token_windows(tokenizer, pydoc_corpus("evaluation", corpus_cache), 3, 128, seed=0)


@pytest.fixture(scope="session")
def small_map(dense: Any, calib_windows: list[list[int]]) -> SilenceMap:
    return calibrate(
        dense, calib_windows, quantile=0.1, meta={"model": "smollm2-135m"}, progress=False
    )
