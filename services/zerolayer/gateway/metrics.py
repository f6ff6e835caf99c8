"""Gateway counters kept in Redis (so every gateway replica adds to the same numbers and /metrics
answers the same on each), rendered in Prometheus' text format under the zerolayer_ prefix.

Counts are gathered in memory and written to Redis at most once a second (and before every
render), so counting costs the request path no Redis round trip; a replica that dies loses at
most its last second of counts."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import redis.asyncio as aioredis

__all__ = ["Metrics"]

_COUNTERS = {
    "shed": (
        "zerolayer_admission_shed_total",
        "Requests shed by admission control",
        ("tier", "plan"),
    ),
    "limited": (
        "zerolayer_rate_limited_total",
        "Requests refused by a per-key plan limit",
        ("limit", "plan"),
    ),
    "requests": (
        "zerolayer_requests_total",
        "Requests admitted to a tier",
        ("tier", "plan"),
    ),
}
_SEP = "\x1f"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Increment labelled counters; render them all."""

    def __init__(self, client: aioredis.Redis, flush_every_s: float = 1.0):
        self.client = client
        self.flush_every_s = flush_every_s
        self._pending: Counter[tuple[str, str]] = Counter()
        self._last = time.monotonic()
        self._flushing: asyncio.Task[None] | None = None

    def inc(self, counter: str, *labels: str) -> None:
        """Add one to a counter (labels in the counter's declared order)."""
        self._pending[(counter, _SEP.join(labels))] += 1
        now = time.monotonic()
        if now - self._last >= self.flush_every_s and self._flushing is None:
            self._last = now
            self._flushing = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        try:
            await self.flush()
        finally:
            self._flushing = None

    async def flush(self) -> None:
        """Write the counts gathered so far to Redis."""
        pending, self._pending = self._pending, Counter()
        if not pending:
            return
        pipe = self.client.pipeline(transaction=False)
        for (counter, labels), n in pending.items():
            pipe.hincrby(f"zl:metrics:{counter}", labels, n)
        try:
            await pipe.execute()
        except Exception:
            self._pending.update(pending)  # keep them for the next flush
            raise

    async def render(self, gauges: dict[str, dict[str, float]] | None = None) -> str:
        """Prometheus text exposition of every counter, plus this replica's gauges
        ({name: {tier: value}})."""
        await self.flush()
        lines: list[str] = []
        for counter, (name, help_text, label_names) in _COUNTERS.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
            values = await self.client.hgetall(f"zl:metrics:{counter}")
            for raw, value in sorted(values.items()):
                parts = raw.decode().split(_SEP)
                labels = ",".join(
                    f'{k}="{_escape(v)}"' for k, v in zip(label_names, parts, strict=False)
                )
                lines.append(f"{name}{{{labels}}} {int(value)}")
        for name, by_tier in (gauges or {}).items():
            lines += [f"# HELP {name} Measured on this gateway replica", f"# TYPE {name} gauge"]
            lines += [f'{name}{{tier="{_escape(t)}"}} {v:.6f}' for t, v in sorted(by_tier.items())]
        return "\n".join(lines) + "\n"
