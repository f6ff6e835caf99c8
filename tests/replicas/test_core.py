"""TierReplica over the fake engine: event order, counts, and abort on early close."""

from __future__ import annotations

import asyncio

from zerolayer.engines.fake import FakeEngine
from zerolayer.protocol import Delta, End, Failed, SamplingSpec, Start
from zerolayer.replicas.core import TierReplica
from zerolayer.tokenfix.prompt import PromptBuilder


def _replica(engine: FakeEngine, prompts: PromptBuilder) -> TierReplica:
    return TierReplica("m:t", engine, len(prompts.tokenizer), 2048)


def test_closing_the_stream_early_aborts_the_engine_request(prompts: PromptBuilder) -> None:
    engine = FakeEngine(["a", "b", "c", "d"], delay_s=0.01)
    replica = _replica(engine, prompts)

    async def run() -> list[type]:
        await replica.start()
        seen: list[type] = []
        gen = replica.stream(SamplingSpec("r1", prompts.completion("hello"), 16))
        async for ev in gen:
            seen.append(type(ev))
            if isinstance(ev, Delta):
                break
        await gen.aclose()
        return seen

    seen = asyncio.run(run())
    assert seen == [Start, Delta]
    assert engine.aborted == ["r1"]


def test_complete_counts_tokens_and_joins_text(prompts: PromptBuilder) -> None:
    engine = FakeEngine(["x", "y"], delay_s=0.05)
    replica = _replica(engine, prompts)
    res = asyncio.run(replica.complete(SamplingSpec("r2", [1, 2, 3], 16)))
    assert isinstance(res, End)
    # an engine that does not report its queue: the time to its first token (0.05 s here)
    assert res.queue_s is not None and 0.04 <= res.queue_s < 1.0
    reported = _replica(FakeEngine(["x"], delay_s=0.05, queue_s=0.0), prompts)
    assert asyncio.run(reported.complete(SamplingSpec("r3", [1], 4))).queue_s == 0.0
    assert (res.finish_reason, res.prompt_tokens, res.completion_tokens, res.text) == (
        "stop",
        3,
        2,
        "xy",
    )


def test_out_of_vocab_token_ids_are_an_error_value(prompts: PromptBuilder) -> None:
    replica = _replica(FakeEngine(), prompts)
    res = asyncio.run(replica.complete(SamplingSpec("r3", [10**9], 16)))
    assert isinstance(res, Failed) and res.error.status == 400


def test_prompt_token_ids_from_tokenfix_are_used_as_they_are(prompts: PromptBuilder) -> None:
    replica = _replica(FakeEngine(["x"]), prompts)
    res = asyncio.run(replica.complete(SamplingSpec("r4", [5, 6, 7, 8], 16)))
    assert isinstance(res, End) and res.prompt_tokens == 4


def test_a_request_over_the_context_is_refused_before_the_engine_runs(
    prompts: PromptBuilder,
) -> None:
    engine = FakeEngine(["x"])
    replica = _replica(engine, prompts)
    res = asyncio.run(replica.complete(SamplingSpec("r5", [5] * 2040, 16)))
    assert isinstance(res, Failed) and res.error.code == "context_length_exceeded"
    assert engine.requests == 0


def test_swap_serves_new_requests_from_the_new_engine_and_drains_the_old(
    prompts: PromptBuilder,
) -> None:
    old = FakeEngine(["o"] * 20, delay_s=0.02)
    new = FakeEngine(["n", "n"])
    replica = _replica(old, prompts)

    async def run() -> tuple[End | Failed, End | Failed, bool]:
        await replica.start()
        ids = prompts.completion("hello")
        slow = asyncio.ensure_future(replica.complete(SamplingSpec("r1", ids, 20)))
        await asyncio.sleep(0.1)  # r1 runs on the old engine
        await new.start()
        swap = asyncio.ensure_future(replica.swap(new, {"tier": "t", "note": "new"}, 30))
        await asyncio.sleep(0)
        fresh = await replica.complete(SamplingSpec("r2", ids, 20))
        still_up = old.started  # the old engine still runs r1
        await swap
        return await slow, fresh, still_up

    slow, fresh, still_up = asyncio.run(run())
    assert isinstance(slow, End) and slow.text == "o" * 20  # finished on the old engine
    assert isinstance(fresh, End) and fresh.text == "nn"  # the next request: the new one
    assert still_up and not old.started  # shut down only after its request ended
    assert replica.card["note"] == "new" and replica.engine is new
