"""In-process replicas behind the gateway's Backend protocol (unit tests, benchmarks)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from zerolayer.replicas.core import TierReplica

__all__ = ["LocalBackend"]


class LocalBackend:
    """Calls TierReplica objects directly instead of through Ray Serve handles."""

    def __init__(self, replicas: dict[str, TierReplica]):
        self.replicas = replicas

    async def stream(self, target: str, req: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        gen = self.replicas[target].stream(req)
        try:
            async for ev in gen:
                yield ev
        finally:
            await gen.aclose()

    async def complete(self, target: str, req: dict[str, Any]) -> dict[str, Any]:
        return await self.replicas[target].complete(req)

    async def cards(self) -> dict[str, dict[str, Any]]:
        return {target: r.card for target, r in self.replicas.items()}
