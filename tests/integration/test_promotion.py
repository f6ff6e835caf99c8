"""Promotion and rollback on the running platform: a promoted candidate serves the next
requests and a rollback restores the previous artifact, while a client keeps sending requests
to the tier and none of them fails."""

from __future__ import annotations

import shutil
import threading
import time
import uuid

import httpx
import pytest
from zerolayer.artifacts import read_card, write_card
from zerolayer.collapse.promote import HISTORY, promote, rollback
from zerolayer.serve.launcher import Platform

pytestmark = pytest.mark.integration

TIER = "smollm2-135m:dynamic"


def _note(p: Platform) -> str | None:
    r = httpx.get(p.base_url + "/models", headers={"Authorization": f"Bearer {p.key}"}, timeout=30)
    cards = {m["id"]: m.get("tier_card") for m in r.json()["data"]}
    return (cards.get(TIER) or {}).get("note")


def _until(p: Platform, note: str | None, timeout_s: float = 240.0) -> float:
    t0 = time.monotonic()
    while _note(p) != note:
        assert time.monotonic() - t0 < timeout_s, f"the tier still serves {_note(p)!r}"
        time.sleep(0.5)
    return time.monotonic() - t0


def test_promotion_and_rollback_swap_the_artifact_without_failing_a_request(
    platform: Platform,
) -> None:
    root = platform.cfg.artifact_root("smollm2-135m")
    marker = f"candidate-{uuid.uuid4().hex[:8]}"
    candidate = root / "candidates" / marker
    shutil.copytree(root / "dynamic", candidate)
    write_card(candidate, {**read_card(candidate), "note": marker})
    assert _note(platform) is None

    results: list[int] = []
    stop = threading.Event()

    def client() -> None:
        body = {
            "model": TIER,
            "messages": [{"role": "user", "content": "Name a colour."}],
            "max_tokens": 8,
            "temperature": 0,
        }
        headers = {"Authorization": f"Bearer {platform.key}"}
        with httpx.Client(timeout=180) as http:
            while not stop.is_set():
                r = http.post(platform.base_url + "/chat/completions", json=body, headers=headers)
                results.append(r.status_code)

    sender = threading.Thread(target=client)
    sender.start()
    try:
        time.sleep(2)
        promote(root, "dynamic", candidate, {"passed": True})
        took = _until(platform, marker)
        served_before = len(results)
        time.sleep(3)  # requests served by the candidate
        assert len(results) > served_before
        rollback(root, "dynamic")
        back = _until(platform, None)
        time.sleep(2)
    finally:
        stop.set()
        sender.join(timeout=200)
        shutil.rmtree(root / HISTORY, ignore_errors=True)
        shutil.rmtree(root / "candidates", ignore_errors=True)
    print(f"swap to the candidate {took:.1f} s, back {back:.1f} s, {len(results)} requests")
    assert results and set(results) == {200}, results
