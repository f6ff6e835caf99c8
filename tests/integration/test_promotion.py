"""Promotion and rollback on the running platform: a promoted candidate serves the next
requests and a rollback restores the previous artifact, while a client keeps sending requests
to the tier and none of them fails; on a torch-engine tier (dynamic) and on a vLLM one (masked,
served from the pruned checkpoint), whose replica runs two vLLM engines for the moment of the
swap."""

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


def _note(p: Platform, tier: str) -> str | None:
    r = httpx.get(p.base_url + "/models", headers={"Authorization": f"Bearer {p.key}"}, timeout=30)
    cards = {m["id"]: m.get("tier_card") for m in r.json()["data"]}
    return (cards.get(tier) or {}).get("note")


def _until(p: Platform, tier: str, note: str | None, timeout_s: float = 300.0) -> float:
    t0 = time.monotonic()
    while _note(p, tier) != note:
        assert time.monotonic() - t0 < timeout_s, f"the tier still serves {_note(p, tier)!r}"
        time.sleep(0.5)
    return time.monotonic() - t0


@pytest.mark.parametrize(("name", "kind"), [("dynamic", "dynamic"), ("masked", "pruned")])
def test_promotion_and_rollback_swap_the_artifact_without_failing_a_request(
    platform: Platform, name: str, kind: str
) -> None:
    tier = f"smollm2-135m:{name}"
    root = platform.cfg.artifact_root("smollm2-135m")
    assert platform.cfg.artifact_dir("smollm2-135m", name) == root / kind
    marker = f"candidate-{uuid.uuid4().hex[:8]}"
    candidate = root / "candidates" / marker
    shutil.copytree(root / kind, candidate)
    write_card(candidate, {**read_card(candidate), "note": marker})
    assert _note(platform, tier) is None

    results: list[int] = []
    stop = threading.Event()

    def client() -> None:
        body = {
            "model": tier,
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
        promote(root, kind, candidate, {"passed": True})
        took = _until(platform, tier, marker)
        served_before = len(results)
        # requests served by the candidate (a new vLLM engine's first request may take longer
        # than a few seconds on a busy machine: wait for one, bounded)
        deadline = time.monotonic() + 120
        while len(results) <= served_before and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(results) > served_before
        rollback(root, kind)
        back = _until(platform, tier, None)
        time.sleep(2)
    finally:
        stop.set()
        sender.join(timeout=200)
        shutil.rmtree(root / HISTORY, ignore_errors=True)
        shutil.rmtree(root / "candidates", ignore_errors=True)
    print(f"{tier}: swap to the candidate {took:.1f} s, back {back:.1f} s, {len(results)} requests")
    assert results and set(results) == {200}, results
