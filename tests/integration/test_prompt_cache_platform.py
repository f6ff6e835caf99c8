"""Prompt caching on the started platform, through the official openai package: the second turn
of a previous_response_id chain reads the first turn's prompt and answer from the tier's prefix
cache (vLLM's count on baseline, the torch engine's on dynamic), the reply says how much, and
the usage the billing deployment counts shows the same tokens apart, at the cached price."""

from __future__ import annotations

import httpx
import openai
import pytest
from zerolayer.serve.launcher import Platform

from tests.integration.test_gateway_platform import new_key
from tests.integration.up import wait

pytestmark = pytest.mark.integration

# long enough for vLLM's 128-token blocks on a CPU: two of them and more
SYSTEM = (
    "You are a patient geography tutor for adult learners. Answer each question in two or "
    "three plain sentences, name the countries and cities involved, give one number that "
    "helps the learner picture the size of what you describe, and connect the answer to what "
    "was said before in the conversation when you can. Avoid lists, avoid jargon, and never "
    "invent facts: when you are unsure, say so plainly. "
) * 4


@pytest.mark.parametrize("tier", ["baseline", "dynamic"])  # vLLM, torch
def test_a_continued_turn_is_read_from_the_prefix_cache_and_billed_apart(
    platform: Platform, tier: str
) -> None:
    made = new_key(platform, "pro")  # a tenant of its own: nothing of it is cached yet
    client = openai.OpenAI(api_key=made["key"], base_url=platform.base_url, max_retries=0)
    model = f"smollm2-135m:{tier}"
    ask = {"model": model, "instructions": SYSTEM, "max_output_tokens": 24, "temperature": 0}
    first = client.responses.create(input="Where does the river Nile begin?", **ask)
    second = client.responses.create(
        input="And which countries does it cross?", previous_response_id=first.id, **ask
    )
    assert first.usage is not None and second.usage is not None
    assert first.usage.input_tokens > 300
    assert first.usage.input_tokens_details.cached_tokens == 0
    cached = second.usage.input_tokens_details.cached_tokens
    # at least the whole blocks of the first turn's prompt
    block = 128 if tier == "baseline" else 16
    assert first.usage.input_tokens // block * block <= cached < second.usage.input_tokens
    auth = {"Authorization": f"Bearer {made['key']}"}

    def counted() -> dict | None:
        got = httpx.get(platform.base_url + "/usage", headers=auth, timeout=30).json()
        return got if got["totals"]["requests"] >= 2 else None

    totals = wait(counted, 30, "both turns in /v1/usage")["totals"]
    assert totals["cached_prompt_tokens"] == cached
    assert totals["prompt_tokens"] == first.usage.input_tokens + second.usage.input_tokens
