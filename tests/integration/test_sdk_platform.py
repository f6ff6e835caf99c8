"""The Python SDK against the started platform (the real model, Ray Serve, Redis, billing):
every method once, a conversation of three turns, a retried request billed once, the same calls
through the official openai package, the async client, and the SDK's examples as they ship."""

from __future__ import annotations

import asyncio
from pathlib import Path

import openai
import pytest
import zerolayer_sdk as zl
from zerolayer.serve.launcher import Platform

from tests.integration.conftest import ADMIN_KEY
from tests.integration.up import wait
from tests.sdk.calls import (
    PARIS,
    async_calls,
    openai_compatible,
    run_example,
    zerolayer_only,
)
from tests.sdk.proxy import LossyProxy

pytestmark = pytest.mark.integration

MODEL = "smollm2-135m:sparse24"  # the torch engine: the quickest tier on a CPU


def client(p: Platform, **options: object) -> zl.Client:
    return zl.Client(api_key=p.key, admin_key=ADMIN_KEY, base_url=p.base_url, **options)  # type: ignore[arg-type]


def new_key(p: Platform, plan: str = "pro") -> zl.types.CreatedKey:
    return client(p).admin.keys.create(plan=plan, name="sdk platform test")


def counted(requests: int) -> object:
    def billed(customer: zl.Client) -> None:
        wait(lambda: customer.usage.retrieve().totals.requests >= requests, 30, "usage counted")

    return billed


def test_every_method_on_the_platform(platform: Platform, tmp_path: Path) -> None:
    c = client(platform)
    openai_compatible(c, MODEL)
    got = zerolayer_only(c, MODEL, tmp_path, counted(1))  # type: ignore[arg-type]
    assert got["invoice"].lines[0].tier == "sparse24"


def test_the_openai_package_makes_the_same_calls_on_the_platform(platform: Platform) -> None:
    openai_compatible(openai.OpenAI(api_key=platform.key, base_url=platform.base_url), MODEL)


def test_the_async_client_on_the_platform(platform: Platform) -> None:
    async def run() -> None:
        async with zl.AsyncClient(api_key=platform.key, base_url=platform.base_url) as c:
            await async_calls(c, MODEL)

    asyncio.run(run())


def test_a_conversation_of_three_turns(platform: Platform) -> None:
    key = new_key(platform)
    c = zl.Client(api_key=key.key, base_url=platform.base_url)
    conv = c.conversations.create(metadata={"user": "ada"})
    asked = ["My name is Ada.", "What is the capital of France?", "What is my name?"]
    turns = []
    for text in asked:
        turns.append(
            c.responses.create(model=MODEL, input=text, conversation=conv.id, max_output_tokens=12)
        )
    inputs = [t.usage.input_tokens for t in turns]
    assert inputs[0] < inputs[1] < inputs[2], inputs  # each turn read the ones before
    assert all(t.conversation is not None and t.conversation.id == conv.id for t in turns)
    items = list(c.conversations.items.list(conv.id, order="asc", limit=2))  # three pages
    assert [i.role for i in items] == ["user", "assistant"] * 3
    assert [i.text for i in items[::2]] == asked
    assert [i.id for i in items[1::2]] == [t.output[0].id for t in turns]
    assert [i.text for i in c.responses.input_items.list(turns[2].id)] == [asked[2]]
    other = zl.Client(api_key=new_key(platform).key, base_url=platform.base_url, max_retries=0)
    with pytest.raises(zl.NotFoundError):  # another tenant sees nothing of it
        other.conversations.retrieve(conv.id)


def test_a_retried_request_is_run_and_billed_once(platform: Platform) -> None:
    key = new_key(platform)
    with LossyProxy(platform.base_url.removesuffix("/v1"), drop=1) as proxy:
        c = zl.Client(api_key=key.key, base_url=proxy.url + "/v1")
        raw = c.with_raw_response.chat.completions.create(
            model=MODEL, messages=PARIS, max_tokens=6, temperature=0
        )
    assert raw.retries_taken == 1 and raw.replayed
    assert raw.request_id == proxy.answers[0][1]["x-request-id"]  # the first run's answer
    assert proxy.seen[0]["idempotency-key"] == proxy.seen[1]["idempotency-key"]
    direct = zl.Client(api_key=key.key, base_url=platform.base_url)
    usage = wait(
        lambda: (u := direct.usage.retrieve()).totals.requests and u, 30, "the request billed"
    )
    completion = raw.parse().usage
    assert completion is not None
    assert usage.totals.requests == 1 and usage.totals.total_tokens == completion.total_tokens
    assert usage.totals.cost_usd > 0


def test_the_examples_run_against_the_platform(platform: Platform) -> None:
    key = new_key(platform).key
    url = platform.base_url
    said = run_example(
        "chat_repl.py", url, key, "--model", MODEL, stdin="My name is Ada.\nWhat is my name?\n"
    )
    assert said.count("assistant>") == 2 and "conversation conv_" in said
    streamed = run_example("stream.py", url, key, "--model", MODEL)
    assert "tokens:" in streamed and "request id:" in streamed
    free = new_key(platform, "free").key  # 4 requests at once, 20 a minute
    batch = run_example("async_batch.py", url, free, "--model", MODEL, "--requests", "10")
    assert "10 answered" in batch, batch
