"""Tier artifacts at start: found, built when missing by the compiler's worker process (and
reused after; a worker killed half way leaves nothing taken as finished), or a clear failure
before anything starts."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from zerolayer.artifacts.cost import read_cost, write_cost
from zerolayer.collapse import missing_kinds
from zerolayer.collapse.worker import units
from zerolayer.config import PlatformConfig, RedisConfig
from zerolayer.errors import ArtifactError
from zerolayer.replicas.artifacts import require_artifact, tier_card
from zerolayer.serve.launcher import Platform

from tests.conftest import TINY_COLLAPSE, clean_env, free_port

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
    assert missing_kinds(cfg, MODEL) == ["pruned", "dynamic", "sparse24"]


def test_worker_builds_masked_with_pruned_and_each_other_kind_alone() -> None:
    assert units(["pruned", "dynamic", "sparse24"]) == [["pruned"], ["dynamic"], ["sparse24"]]
    assert units(["masked", "dynamic", "pruned"]) == [["masked", "pruned"], ["dynamic"]]
    assert units(["dynamic"]) == [["dynamic"]]


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


def _worker(cfg: PlatformConfig, *kinds: str) -> subprocess.Popen[str]:
    """The compiler's worker process, as `zerolayer up` starts it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "zerolayer.collapse.worker", MODEL, *kinds, "--nice", "5"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
    )
    assert proc.stdin is not None
    proc.stdin.write(cfg.model_dump_json())
    proc.stdin.close()
    return proc


@pytest.mark.integration  # runs the collapse compiler
def test_worker_killed_half_way_leaves_no_card_then_builds_once_and_is_reused(
    base_config: PlatformConfig, tiny_build: dict[str, Any], tmp_path: Path
) -> None:
    root = tmp_path / "artifacts"
    shutil.copytree(tiny_build["out"], root / MODEL)
    shutil.rmtree(root / MODEL / "sparse24")
    cfg = _cfg(base_config, root)
    assert missing_kinds(cfg, MODEL) == ["sparse24"]
    folder = root / MODEL / "sparse24"
    # killed in the middle of a step of the build itself: nothing looks finished
    proc = _worker(cfg, "sparse24")
    assert proc.stdout is not None
    for line in proc.stdout:
        ev = json.loads(line)
        assert ev["event"] == "step" and ev["kind"] == "sparse24"
        if ev["step"] == "2:4 sensitivity" and 0 < (ev["progress"] or 0) < 1:
            assert psutil.Process(proc.pid).nice() >= os.nice(0) + 5  # below serving
            os.kill(proc.pid, signal.SIGKILL)
            break
    assert proc.wait(60) == -signal.SIGKILL
    assert missing_kinds(cfg, MODEL) == ["sparse24"]
    # built to the end by the next worker, which measures the tier's cost before it says done
    # (the dense tier's cost is on file already: it is not measured again)
    write_cost(root / MODEL, "baseline", {"cost_per_1m_tokens": {"completion": "1"}})
    priced = {"price_after_build": True, "price_streams": [1, 2], "price_tokens": 8}
    model_cfg = cfg.models[MODEL]
    collapse = model_cfg.collapse.model_copy(update=priced)
    cfg = cfg.model_copy(
        update={"models": {MODEL: model_cfg.model_copy(update={"collapse": collapse})}}
    )
    proc = _worker(cfg, "sparse24")
    assert proc.stdout is not None
    events = [json.loads(line) for line in proc.stdout]
    assert proc.wait(60) == 0
    assert events[-1]["event"] == "done" and events[-1]["kind"] == "sparse24"
    assert {e["event"] for e in events[:-1]} == {"step"}
    assert events[-2]["step"] == "measuring the cost of sparse24"
    cost = read_cost(root / MODEL, "sparse24")
    assert cost is not None and set(cost["streams"]) == {"1", "2"}
    assert "background build" in cost["measured_by"] and cost["tokens"] == 8
    assert read_cost(root / MODEL, "baseline") == {"cost_per_1m_tokens": {"completion": "1"}}
    assert all(e["progress"] is None or 0 <= e["progress"] <= 1 for e in events[:-1])
    assert events[-1]["ppl_delta"] == pytest.approx(
        json.loads((folder / "tier_card.json").read_text())["quality"]["ppl_delta"]
    )
    assert missing_kinds(cfg, MODEL) == []
    card = tier_card(cfg, MODEL, "sparse24")
    assert card["artifact"] == "sparse24" and card["quality"]["ppl_delta"] <= 0.10
    assert card["cost"]["stale"] is False  # measured on the artifact it serves


@pytest.mark.integration  # the compiler's artifacts (tiny_build)
def test_tier_cards(base_config: PlatformConfig, tiny_build: dict[str, Any]) -> None:
    cfg = _cfg(base_config, tiny_build["root"])
    base = tier_card(cfg, MODEL, "baseline")
    assert base["quality"]["ppl_delta"] == 0.0 and base["artifact"] == "dense"
    masked = tier_card(cfg, MODEL, "masked")  # on vLLM: the pruned checkpoint's card
    assert masked["quality"] == tiny_build["cards"]["pruned"]["quality"]
    assert masked["tier"] == "masked" and masked["artifact"] == "masked"
