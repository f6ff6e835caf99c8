"""Answer a batch of prompts concurrently without running into the key's limits: at most
--concurrency requests in flight (the free plan allows 4), a pause when the x-ratelimit headers
say the minute's requests are used up, and the SDK's retries (Retry-After honoured) for a 429
that comes anyway. Every request carries its own Idempotency-Key, so a retry is billed once.

    ./zl up                      # in another terminal
    python sdk/examples/async_batch.py [--requests 20] [--concurrency 4]"""

from __future__ import annotations

import argparse
import asyncio
import time

from zerolayer_sdk import AsyncClient, RateLimit
from zerolayer_sdk.types import ChatCompletion

QUESTIONS = [
    "What is the capital of France?",
    "Name a primary colour.",
    "What is 2 + 2?",
    "Which planet is the largest?",
    "What language is spoken in Brazil?",
    "What is the boiling point of water in Celsius?",
    "Who wrote Hamlet?",
    "What is the chemical symbol of gold?",
    "How many days are in a week?",
    "What is the opposite of hot?",
]


class Pace:
    """Holds new requests back until the minute's count starts over, once the platform said
    no request of this minute is left."""

    def __init__(self) -> None:
        self.until = 0.0

    async def wait(self) -> None:
        while (left := self.until - time.monotonic()) > 0:
            await asyncio.sleep(left)

    def update(self, limit: RateLimit) -> None:
        if limit.remaining_requests == 0 and limit.reset_requests_s:
            self.until = max(self.until, time.monotonic() + limit.reset_requests_s)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="model or model:tier")
    parser.add_argument("--requests", type=int, default=len(QUESTIONS), help="how many prompts")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight at once")
    args = parser.parse_args()
    gate, pace, retried = asyncio.Semaphore(args.concurrency), Pace(), [0]
    started = time.monotonic()
    async with AsyncClient(max_retries=8) as client:

        async def ask(question: str) -> ChatCompletion:
            async with gate:
                await pace.wait()
                raw = await client.with_raw_response.chat.completions.create(
                    model=args.model,
                    messages=[{"role": "user", "content": question}],
                    max_tokens=32,
                )
                pace.update(raw.ratelimit)
                retried[0] += raw.retries_taken
                return raw.parse()  # type: ignore[return-value]

        prompts = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.requests)]
        answers = await asyncio.gather(*(ask(q) for q in prompts))
    for question, answer in zip(prompts, answers, strict=True):
        print(f"{question} -> {answer.text.strip()[:60]!r}")
    tokens = sum(a.usage.total_tokens for a in answers if a.usage is not None)
    took = time.monotonic() - started
    print(f"{len(answers)} answered in {took:.1f} s, {retried[0]} retries, {tokens} tokens")


if __name__ == "__main__":
    asyncio.run(main())
