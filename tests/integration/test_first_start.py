"""A first start on an empty cache, as a new user makes it: `zerolayer up` serves the tier it can
(the dense model) at once and builds the missing artifact in the background (the dynamic tier,
at tiny compiler settings). While it builds, the tier is listed as building and refused with
503 tier_building; a build killed half way fails the tier with its reason and leaves nothing a
later start takes as finished; the next start builds it again and the tier joins the running
platform and answers.

The tests run in file order over one cache: the first start, then the second."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.conftest import TINY_COLLAPSE, setup_budget
from tests.integration.up import Up, platform_dir, wait

pytestmark = pytest.mark.integration

TIERS = {"baseline": {"artifact": "dense"}, "dynamic": {"artifact": "dynamic"}}


@pytest.fixture(scope="module")
def up(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    cache = tmp_path_factory.mktemp("first-cache")
    platform = platform_dir(
        tmp_path_factory.mktemp("first") / "platform", model_dir, TIERS, collapse=TINY_COLLAPSE
    )
    u = Up(cache, platform)
    yield u
    u.kill()


def models(up: Up, key: str) -> dict[str, dict[str, Any]]:
    r = httpx.get(up.base + "/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 200, r.text
    return {m["id"]: m for m in r.json()["data"]}


def chat(up: Up, key: str, tier: str, stream: bool = False) -> httpx.Response:
    question = "What is the capital of France?"
    return up.chat(key, question, f"smollm2-135m:{tier}", stream=stream, max_tokens=16)


def workers(up: Up) -> list[psutil.Process]:
    return [p for p in up.processes() if "zerolayer.collapse.worker" in " ".join(p.cmdline())]


def card(up: Up) -> Path:
    return up.cache / "artifacts" / "smollm2-135m" / "dynamic" / "tier_card.json"


def test_first_start_serves_baseline_while_the_dynamic_tier_builds(up: Up) -> None:
    with setup_budget(900):
        up.start().ready()
    text = up.text()
    assert "tier smollm2-135m:baseline ready" in text and "s after start" in text
    key, _ = up.key()
    state = models(up, key)["smollm2-135m:dynamic"]
    assert state["status"] == "building" and state["tier_card"] is None, state
    r = chat(up, key, "dynamic")
    assert r.status_code == 503 and r.json()["error"]["code"] == "tier_building", r.text
    assert int(r.headers["retry-after"]) > 0
    assert models(up, key)["smollm2-135m:baseline"]["status"] == "ready"
    ok = chat(up, key, "baseline")
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"]
    # the build runs below serving's CPU priority
    procs = wait(lambda: workers(up), 60, "the build worker")
    assert procs[0].nice() >= psutil.Process(up.proc.pid).nice() + 5  # type: ignore[union-attr]


def test_a_build_killed_half_way_fails_the_tier_and_leaves_no_artifact(up: Up) -> None:
    key, _ = up.key()

    def building() -> bool:
        s = models(up, key)["smollm2-135m:dynamic"]
        return s["status"] == "building" and s.get("step") not in (
            None,
            "queued",
            "preparing the model and corpora",
        )

    wait(building, 300, "a step of the build itself", every_s=0.1)
    for p in workers(up):
        p.kill()  # kill -9
    failed = wait(
        lambda: (s := models(up, key)["smollm2-135m:dynamic"])["status"] == "failed" and s,
        60,
        "the tier to fail",
    )
    assert "SIGKILL" in failed["reason"], failed
    r = chat(up, key, "dynamic")
    assert r.status_code == 503 and r.json()["error"]["code"] == "tier_failed"
    assert "SIGKILL" in r.json()["error"]["message"]
    assert not card(up).exists()
    assert chat(up, key, "baseline").status_code == 200  # serving goes on
    assert up.stop() == 0


def test_the_next_start_builds_it_again_and_it_joins_without_a_restart(up: Up) -> None:
    with setup_budget(900):
        up.start().ready()
    key, _ = up.key()
    assert models(up, key)["smollm2-135m:dynamic"]["status"] == "building"
    pid = up.proc.pid  # type: ignore[union-attr]
    wait(
        lambda: models(up, key)["smollm2-135m:dynamic"]["status"] == "ready",
        900,
        "the dynamic tier",
        every_s=2,
    )
    assert up.proc is not None and up.proc.pid == pid and up.proc.poll() is None  # same process
    listed = models(up, key)["smollm2-135m:dynamic"]
    assert listed["tier_card"]["quality"] == json.loads(card(up).read_text())["quality"]
    # built on the domains models.yaml names (collapse.domains), not every standard one
    assert json.loads(card(up).read_text())["domains"] == TINY_COLLAPSE["domains"]
    r = chat(up, key, "dynamic")
    assert r.status_code == 200 and r.json()["model"] == "smollm2-135m:dynamic"
    streamed = chat(up, key, "dynamic", stream=True)
    assert streamed.status_code == 200 and "data: [DONE]" in streamed.text
    assert "build: smollm2-135m dynamic ready in" in up.text()
    assert up.stop() == 0
