"""A stored history far longer than the context, over real HTTP: its items are counted newest
first and what cannot fit is never tokenized; a refusal counts the tokens read against the
key's tokens per minute; truncation 'auto' keeps the newest items that fit."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from zerolayer.tokenfix.service import Tokenfix, _size

from tests.gateway.conftest import Gateway, GatewayFactory, plan
from tests.gateway.test_api import assert_openai_error

MODEL = "smollm2-135m"
ITEMS, CHARS = 60, 1000  # 60,000 characters of history; the context is 2,048 tokens


@pytest.fixture
def tokenized(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The characters of every prompt tokenized from now on."""
    seen: list[int] = []
    real = Tokenfix.token_ids

    def spy(self: Tokenfix, model: str, req: Any) -> list[int]:
        seen.append(_size(req))
        return real(self, model, req)

    monkeypatch.setattr(Tokenfix, "token_ids", spy)
    return seen


def long_conversation(gw: Gateway) -> str:
    url, auth = gw.http(), gw.auth
    cid: str = httpx.post(f"{url}/conversations", headers=auth, json={}).json()["id"]
    for start in range(0, ITEMS, 20):
        items = [
            {"role": "user", "content": (f"item {i}: " + "lakes and rivers " * 80)[:CHARS]}
            for i in range(start, start + 20)
        ]
        r = httpx.post(f"{url}/conversations/{cid}/items", headers=auth, json={"items": items})
        assert r.status_code == 200, r.text
    return cid


def test_a_history_past_the_context_is_refused_without_reading_all_of_it(
    make_gateway: GatewayFactory, tokenized: list[int]
) -> None:
    gw = make_gateway(plans={"t": plan(tokens_per_minute=1_000_000)}, key_plan="t")
    cid = long_conversation(gw)
    tokenized.clear()
    body = {"model": MODEL, "input": "Q", "conversation": cid, "max_output_tokens": 16}
    r = httpx.post(f"{gw.http()}/responses", headers=gw.auth, json=body, timeout=30)
    err = assert_openai_error(r, 400, "invalid_request_error")
    assert err["code"] == "context_length_exceeded" and "at least" in err["message"]
    # the newest items until they alone pass the context, one by one: not the 60,000
    # characters (the whole history was tokenized before, and the binary search again)
    assert sum(tokenized) < 10_000, tokenized
    # what was read counts against the key's tokens per minute
    after = httpx.post(
        f"{gw.http()}/responses", headers=gw.auth, json={"model": MODEL, "input": "x"}
    )
    used = 1_000_000 - int(after.headers["x-ratelimit-remaining-tokens"])
    assert used > 2048 - 16


def test_truncation_auto_keeps_the_newest_items_and_counts_each_once(
    make_gateway: GatewayFactory, tokenized: list[int]
) -> None:
    gw = make_gateway()
    cid = long_conversation(gw)
    body = {
        "model": MODEL,
        "input": "Q",
        "conversation": cid,
        "max_output_tokens": 16,
        "truncation": "auto",
    }
    sizes = []
    for _ in range(2):
        tokenized.clear()
        r = httpx.post(f"{gw.http()}/responses", headers=gw.auth, json=body, timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["input_tokens"] <= 2048 - 16
        sizes.append(list(tokenized))
    assert sum(sizes[0]) < 20_000, sizes[0]
    # the second turn counts only its own new items: the history's are remembered
    assert len(sizes[1]) < len(sizes[0]) and sum(sizes[1]) < sum(sizes[0])
