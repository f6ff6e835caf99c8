"""Long prompts, when a chat request opts in ("long_prompt": "summarize"): the longest message is
cut into chunks by the chunker, each chunk is summarised by the same tier (map), the summaries are
joined and, while they are still longer than one chunk, summarised again (reduce); the message is
then replaced by the summary and the request answered as usual.

The whole job is admitted once, before any model call, with a reservation that covers every map
call and the final answer and counts each possible map call as a request of the key's minute; it
is settled to the tokens all the calls used. A message that makes more than
`chunker.max_summary_chunks` chunks is a 400, and every map call passes the tier's admission
control as a request of its own would. Without the opt-in a prompt over the context is a 400
that states both numbers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zerolayer.errors import ContextLengthExceeded, EngineError, InvalidRequest
from zerolayer.gateway.parts import Backend, chunked, prompt_ids
from zerolayer.protocol import ChunkOptions, Failed, PromptInput, SamplingSpec, Target

__all__ = ["MAP_INSTRUCTION", "SUMMARY_NOTE", "SummaryJob", "plan_summary"]

MAP_INSTRUCTION = "Summarise this part of a longer text in a few sentences:\n\n"
SUMMARY_NOTE = "(The following is a summary of a text too long to read whole.)\n"
_TEMPLATE_TOKENS = 64  # instruction + chat template around each chunk, an upper bound
_MAX_ROUNDS = 3
_PARALLEL = 4


@dataclass
class SummaryJob:
    """One map-reduce over a request's longest message; counts the tokens it used."""

    backend: Backend
    model: str
    dest: Target
    rid: str
    chunk_tokens: int
    summary_tokens: int
    index: int  # the message that is summarised
    chunks: list[str]
    shed: Callable[[], None] = lambda: None  # admission control, before each map call
    prompt_used: int = 0
    completion_used: int = 0
    calls: int = 0
    rounds: int = 0

    def reserve(self) -> tuple[int, int]:
        """(prompt, completion) tokens that every round of map calls may use at most."""
        n = len(self.chunks)
        prompt = n * (self.chunk_tokens + _TEMPLATE_TOKENS)
        # later rounds read at most the previous round's summaries
        prompt += 2 * n * (self.summary_tokens + _TEMPLATE_TOKENS)
        return prompt, 3 * n * self.summary_tokens

    def most_calls(self) -> int:
        """The most map calls the job may make (every round at most as many as the first)."""
        return _MAX_ROUNDS * len(self.chunks)

    async def _one(self, text: str, sem: asyncio.Semaphore) -> str:
        async with sem:
            self.shed()
            req = PromptInput(messages=[{"role": "user", "content": MAP_INSTRUCTION + text}])
            ids = await prompt_ids(self.backend, self.model, req)
            self.calls += 1
            spec = SamplingSpec(
                f"{self.rid}-map{self.calls}",
                ids,
                self.summary_tokens,
                temperature=0.0,
                cache_salt=self.rid,  # a part of one request's message: nothing to share
            )
            res = await self.backend.complete(self.dest, spec)
            self.prompt_used += res.prompt_tokens
            self.completion_used += res.completion_tokens
            if isinstance(res, Failed):
                raise EngineError("a partial summary failed: " + res.error.message)
            return res.text.strip()

    async def run(self) -> str:
        """The summary of the message (map, then reduce rounds)."""
        sem = asyncio.Semaphore(_PARALLEL)
        parts = self.chunks
        while True:
            self.rounds += 1
            summaries = await asyncio.gather(*(self._one(p, sem) for p in parts))
            joined = "\n".join(s for s in summaries if s)
            ev = await chunked(self.backend, self.model, joined, ChunkOptions(self.chunk_tokens))
            if len(ev.chunks) <= 1 or self.rounds >= _MAX_ROUNDS:
                return joined
            parts = [c.text for c in ev.chunks]

    def usage(self) -> dict[str, int]:
        """What the map-reduce cost, for the reply."""
        return {
            "chunks": len(self.chunks),
            "rounds": self.rounds,
            "calls": self.calls,
            "prompt_tokens": self.prompt_used,
            "completion_tokens": self.completion_used,
        }


async def plan_summary(
    backend: Backend,
    model: str,
    dest: Target,
    rid: str,
    messages: list[dict[str, Any]],
    max_model_len: int,
    chunk_tokens: int,
    summary_tokens: int,
    overflow: ContextLengthExceeded,
    max_chunks: int,
    shed: Callable[[], None],
) -> SummaryJob:
    """The map-reduce job for a request whose prompt is over the context (nothing runs yet)."""
    index = max(range(len(messages)), key=lambda i: len(messages[i]["content"]))
    size = min(chunk_tokens, max_model_len - summary_tokens - _TEMPLATE_TOKENS)
    if size < 16:
        raise overflow
    ev = await chunked(backend, model, messages[index]["content"], ChunkOptions(size))
    if len(ev.chunks) <= 1:
        raise overflow  # the longest message is not what overflows: nothing to summarise
    if len(ev.chunks) > max_chunks:
        raise InvalidRequest(
            f"the message is too long to summarise: it makes {len(ev.chunks)} chunks of "
            f"{size} tokens, at most {max_chunks} are summarised",
            param="messages",
        )
    texts = [c.text for c in ev.chunks]
    return SummaryJob(backend, model, dest, rid, size, summary_tokens, index, texts, shed)
