"""Gateway counters kept in Redis (so every gateway replica adds to the same numbers and /metrics
answers the same on each), rendered in Prometheus' text format under the zerolayer_ prefix."""

from __future__ import annotations

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


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Increment labelled counters; render them all."""

    def __init__(self, client: aioredis.Redis):
        self.client = client

    async def inc(self, counter: str, *labels: str) -> None:
        """Add one to a counter (labels in the counter's declared order)."""
        await self.client.hincrby(f"zl:metrics:{counter}", "\x1f".join(labels), 1)

    async def get(self, counter: str, *labels: str) -> int:
        """A counter's current value."""
        return int(await self.client.hget(f"zl:metrics:{counter}", "\x1f".join(labels)) or 0)

    async def render(self, gauges: dict[str, dict[str, float]] | None = None) -> str:
        """Prometheus text exposition of every counter, plus this replica's gauges
        ({name: {tier: value}})."""
        lines: list[str] = []
        for counter, (name, help_text, label_names) in _COUNTERS.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
            values = await self.client.hgetall(f"zl:metrics:{counter}")
            for raw, value in sorted(values.items()):
                parts = raw.decode().split("\x1f")
                labels = ",".join(
                    f'{k}="{_escape(v)}"' for k, v in zip(label_names, parts, strict=False)
                )
                lines.append(f"{name}{{{labels}}} {int(value)}")
        for name, by_tier in (gauges or {}).items():
            lines += [f"# HELP {name} Measured on this gateway replica", f"# TYPE {name} gauge"]
            lines += [f'{name}{{tier="{_escape(t)}"}} {v:.6f}' for t, v in sorted(by_tier.items())]
        return "\n".join(lines) + "\n"
