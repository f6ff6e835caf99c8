"""In-process replicas, tokenfix and chunker behind the gateway's Backend protocol (unit tests,
benchmarks)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from zerolayer.chunker.service import Chunker
from zerolayer.protocol import (
    ChunkOptions,
    Chunks,
    End,
    Failed,
    Prompt,
    PromptInput,
    ReplicaEvent,
    SamplingSpec,
    Target,
)
from zerolayer.replicas.core import TierReplica
from zerolayer.tokenfix.service import Tokenfix

__all__ = ["LocalBackend"]


class LocalBackend:
    """Calls TierReplica, Tokenfix and Chunker objects directly instead of through handles."""

    def __init__(self, replicas: dict[Target, TierReplica], tokenfix: Tokenfix, chunker: Chunker):
        self.replicas = replicas
        self.tokenfix = tokenfix
        self.chunker = chunker

    async def prepare(self, model: str, req: PromptInput) -> Prompt | Failed:
        return await self.tokenfix.prepare(model, req)

    async def chunk(self, model: str, text: str, options: ChunkOptions) -> Chunks | Failed:
        return await self.chunker.chunk(model, text, options)

    async def chunk_all(
        self, model: str, texts: list[str], options: ChunkOptions
    ) -> list[Chunks] | Failed:
        return await self.chunker.chunk_all(model, texts, options)

    async def stream(
        self, target: Target, spec: SamplingSpec
    ) -> AsyncGenerator[ReplicaEvent, None]:
        gen = self.replicas[target].stream(spec)
        try:
            async for ev in gen:
                yield ev
        finally:
            await gen.aclose()

    async def complete(self, target: Target, spec: SamplingSpec) -> End | Failed:
        return await self.replicas[target].complete(spec)

    async def cards(self, targets: list[Target]) -> dict[Target, dict[str, Any]]:
        return {t: self.replicas[t].card for t in targets if t in self.replicas}

    async def canary(self, target: Target, texts: list[str], top_k: int) -> list[dict[str, Any]]:
        return await self.replicas[target].engine.canary(texts, top_k)
