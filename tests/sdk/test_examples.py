"""The SDK's examples as they ship, run against the gateway (fake engine, real Redis, real
HTTP): the chat REPL keeps its conversation, the stream prints its usage, and the async batch
gets every answer through a plan's concurrency limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from zerolayer.engines.fake import FakeEngine

from tests.gateway.conftest import SCRIPT, GatewayFactory, plan

EXAMPLES = Path(__file__).resolve().parents[2] / "sdk" / "examples"


def run(
    name: str, url: str, key: str, *args: str, stdin: str = "", cache: Path | None = None
) -> str:
    """The example's output. With `cache`: the key is not given, the example finds it where
    `./zl up` keeps it (<cache>/dev-key), as on a developer's machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZEROLAYER_")}
    env["ZEROLAYER_BASE_URL"] = url  # the gateway's own port, not ./zl up's 8000
    if cache is None:
        env["ZEROLAYER_API_KEY"] = key
    else:
        (cache / "dev-key").write_text(key + "\n")
        env["ZEROLAYER_CACHE_DIR"] = str(cache)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


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
