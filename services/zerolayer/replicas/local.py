"""In-process replicas, tokenfix and chunker behind the gateway's Backend protocol (unit tests,
benchmarks)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from zerolayer.chunker.service import Chunker
from zerolayer.replicas.core import TierReplica
from zerolayer.tokenfix.service import Tokenfix

__all__ = ["LocalBackend"]


class LocalBackend:
    """Calls TierReplica, Tokenfix and Chunker objects directly instead of through handles."""

    def __init__(self, replicas: dict[str, TierReplica], tokenfix: Tokenfix, chunker: Chunker):
        self.replicas = replicas
        self.tokenfix = tokenfix
        self.chunker = chunker

    async def prepare(self, model: str, req: dict[str, Any]) -> dict[str, Any]:
        return await self.tokenfix.prepare(model, req)

    async def chunk(self, model: str, text: str, **options: Any) -> dict[str, Any]:
        return await self.chunker.chunk(model, text, **options)

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
