"""TierReplica over the fake engine: event order, counts, and abort on early close."""

from __future__ import annotations

import asyncio

from zerolayer.engines.fake import FakeEngine
from zerolayer.replicas.core import TierReplica
from zerolayer.tokenfix.prompt import PromptBuilder


def test_closing_the_stream_early_aborts_the_engine_request(prompts: PromptBuilder) -> None:
    engine = FakeEngine(["a", "b", "c", "d"], delay_s=0.01)
    replica = TierReplica("m:t", engine, prompts, 2048, 16)

    async def run() -> list[str]:
        await replica.start()
        seen = []
        gen = replica.stream({"request_id": "r1", "prompt": "hello"})
        async for ev in gen:
            seen.append(ev["event"])
            if ev["event"] == "delta":
                break
        await gen.aclose()
        return seen

    seen = asyncio.run(run())
    assert seen == ["start", "delta"]
    assert engine.aborted == ["r1"]


def test_complete_counts_tokens_and_joins_text(prompts: PromptBuilder) -> None:
    engine = FakeEngine(["x", "y"], delay_s=0.05)
    replica = TierReplica("m:t", engine, prompts, 2048, 16)
    res = asyncio.run(replica.complete({"request_id": "r2", "prompt": [1, 2, 3]}))
    # decode time: from the first token on (the second token came 0.05 s after it)
    assert 0.04 <= res.pop("decode_s") < 1.0
    assert res == {
        "event": "end",
        "finish_reason": "stop",
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "text": "xy",
    }


def test_out_of_vocab_token_ids_are_an_error_event(prompts: PromptBuilder) -> None:
    replica = TierReplica("m:t", FakeEngine(), prompts, 2048, 16)
    res = asyncio.run(replica.complete({"request_id": "r3", "prompt": [10**9]}))
    assert res["event"] == "error" and res["status"] == 400


def test_prompt_token_ids_from_tokenfix_are_used_as_they_are(prompts: PromptBuilder) -> None:
    replica = TierReplica("m:t", FakeEngine(["x"]), prompts, 2048, 16)
    req = {"request_id": "r4", "prompt_token_ids": [5, 6, 7, 8], "messages": None}
    res = asyncio.run(replica.complete(req))
    assert res["event"] == "end" and res["prompt_tokens"] == 4
