"""The Ray Serve deployment of the chunker (one tokenizer per served model)."""

from __future__ import annotations

from typing import Any

from ray import serve

from zerolayer.chunker.service import Chunker
from zerolayer.config import PlatformConfig
from zerolayer.protocol import ChunkOptions, Chunks, Failed

__all__ = ["ChunkerDeployment", "chunker_deployment"]


class ChunkerDeployment:
    """Token-exact chunks for the gateway (POST /v1/chunks, long prompts)."""

    def __init__(self, config: dict[str, Any]):
        cfg = PlatformConfig.model_validate(config)
        self.chunker = Chunker({m: cfg.model_dir(m) for m in cfg.models}, cfg.chunker)

    async def chunk(self, model: str, text: str, options: ChunkOptions) -> Chunks | Failed:
        """Complete chunks of `text` and where its unconsumed rest starts, or the error."""
        return await self.chunker.chunk(model, text, options)

    async def chunk_all(
        self, model: str, texts: list[str], options: ChunkOptions
    ) -> list[Chunks] | Failed:
        """The chunks of every text, in one call, or the error."""
        return await self.chunker.chunk_all(model, texts, options)


def chunker_deployment(cfg: PlatformConfig) -> Any:
    """ChunkerDeployment with its configured options."""
    return serve.deployment(
        ChunkerDeployment, name="chunker", ray_actor_options={"num_cpus": cfg.chunker.num_cpus}
    )
