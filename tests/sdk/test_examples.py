"""The SDK's examples as they ship, run against the gateway (fake engine, real Redis, real
HTTP): the chat REPL keeps its conversation, the stream prints its usage, and the async batch
gets every answer through a plan's concurrency limit."""

from __future__ import annotations

from pathlib import Path

from zerolayer.engines.fake import FakeEngine

from tests.gateway.conftest import SCRIPT, GatewayFactory, plan
from tests.sdk.calls import run_example as run


def test_chat_repl_keeps_its_conversation(make_gateway: GatewayFactory, tmp_path: Path) -> None:
    gw = make_gateway()
    stdin = "Hi!\n\nWhat is the capital?\n"
    out = run("chat_repl.py", gw.http(), gw.key, stdin=stdin, cache=tmp_path)
    assert out.count("assistant> The capital of France is Paris.") == 2, out
    conversation = out.split("conversation ")[1].split()[0]
    items = gw.client.get(
        f"/v1/conversations/{conversation}/items?order=asc", headers=gw.auth
    ).json()["data"]
    assert [i["role"] for i in items] == ["user", "assistant"] * 2
    assert items[2]["content"][0]["text"] == "What is the capital?"


def test_stream_prints_the_answer_and_its_usage(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    out = run("stream.py", gw.http(), gw.key, "Where", "is", "Paris?")
    lines = out.splitlines()
    assert lines[0] == "The capital of France is Paris."
    assert lines[1].startswith("tokens: ") and f"{len(SCRIPT)} out" in lines[1]
    assert lines[2].startswith("request id: chatcmpl-")


def test_async_batch_gets_through_a_concurrency_limit(make_gateway: GatewayFactory) -> None:
    slow = FakeEngine(SCRIPT, delay_s=0.05)
    gw = make_gateway(plans={"two": plan(concurrent_requests=2)}, key_plan="two", engine=slow)
    out = run("async_batch.py", gw.http(), gw.key, "--requests", "8", "--concurrency", "4")
    summary = out.splitlines()[-1]
    assert summary.startswith("8 answered") and out.count("Paris.") == 8, out
    retries = int(summary.split(", ")[1].split()[0])
    assert retries > 0, summary  # 4 at once against a limit of 2: some were refused, retried
