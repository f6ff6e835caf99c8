"""Timing one request through an engine, and reading a measuring worker's tagged reply: what the
price step (collapse.price) and the tier benchmarks share."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Timed", "tagged", "timed_request"]


@dataclass
class Timed:
    """One request's tokens, seconds to its last token (to its end when it made none), seconds
    to its first token, and the gaps in seconds between its successive tokens."""

    tokens: int = 0
    seconds: float = 0.0
    ttft_s: float = 0.0
    gaps: list[float] = field(default_factory=list)

    @property
    def decode_s(self) -> float:
        """Seconds from the first token to the last."""
        return self.seconds - self.ttft_s


async def timed_request(engine: Any, ids: list[int], tokens: int, fresh: bool = False) -> Timed:
    """One greedy request of up to `tokens` tokens, timed. `fresh`: a cache salt of its own,
    so none of its prompt is read from the prefix cache."""
    from zerolayer.engines.base import SamplingSpec

    salt = uuid.uuid4().hex if fresh else ""
    spec = SamplingSpec(uuid.uuid4().hex, ids, tokens, 0.0, cache_salt=salt)
    out = Timed()
    t0 = last = time.perf_counter()
    async for d in engine.generate(spec):
        now = time.perf_counter()
        for _ in d.token_ids:
            if out.tokens == 0:
                out.ttft_s = now - t0
            else:
                out.gaps.append(now - last)
            last = now
            out.tokens += 1
    out.seconds = (last if out.tokens else time.perf_counter()) - t0
    return out


def tagged(line: str, tag: str) -> dict[str, Any] | None:
    """The JSON object after `tag` on a line of a worker's output (its child processes may
    write to the same stdout, even on that line), or None when the line has no tag."""
    at = line.find(tag)
    if at < 0:
        return None
    return dict(json.JSONDecoder().raw_decode(line[at + len(tag) :])[0])
