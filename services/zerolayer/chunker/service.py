"""The chunker step of the request path: token-exact chunks of long text for one model."""

from __future__ import annotations

import asyncio
from pathlib import Path

from zerolayer.chunker.core import cut
from zerolayer.config import ChunkerConfig
from zerolayer.errors import APIError, InvalidRequest, PayloadTooLarge
from zerolayer.protocol import Chunk, ChunkOptions, Chunks, Failed

__all__ = ["Chunker"]


class Chunker:
    """Cuts text with each served model's tokenizer (the one its tier counts with)."""

    def __init__(self, model_dirs: dict[str, str | Path], settings: ChunkerConfig):
        from transformers import AutoTokenizer

        self.settings = settings
        self.tokenizers = {m: AutoTokenizer.from_pretrained(str(d)) for m, d in model_dirs.items()}

    def spans(
        self,
        model: str,
        text: str,
        final: bool = True,
        chunk_tokens: int | None = None,
        overlap_tokens: int | None = None,
    ) -> Chunks:
        """The complete chunks of text and where its unconsumed rest starts; raises
        InvalidRequest or PayloadTooLarge."""
        n = chunk_tokens or self.settings.chunk_tokens
        overlap = self.settings.overlap_tokens if overlap_tokens is None else overlap_tokens
        if overlap >= n:
            raise InvalidRequest(
                f"overlap_tokens ({overlap}) must be below chunk_tokens ({n})",
                param="overlap_tokens",
            )
        spans, rest = cut(self.tokenizers[model], text, n, overlap, final)
        if len(spans) > self.settings.max_chunks:
            raise PayloadTooLarge(
                f"the input makes {len(spans)} chunks of {n} tokens; at most "
                f"{self.settings.max_chunks} are served per request"
            )
        chunks = [Chunk(text[s.start : s.end], s.start, s.end, s.tokens) for s in spans]
        return Chunks(chunks, rest)

    def all_spans(self, model: str, texts: list[str], options: ChunkOptions) -> list[Chunks]:
        """spans() of every text, at most max_chunks in all."""
        out: list[Chunks] = []
        made = 0
        for text in texts:
            ev = self.spans(model, text, True, options.chunk_tokens, options.overlap_tokens)
            made += len(ev.chunks)
            if made > self.settings.max_chunks:
                raise PayloadTooLarge(
                    f"the inputs make more than {self.settings.max_chunks} chunks; at most "
                    f"{self.settings.max_chunks} are served per request"
                )
            out.append(ev)
        return out

    async def chunk(self, model: str, text: str, options: ChunkOptions) -> Chunks | Failed:
        """spans() with the error as a value (this is a deployment method); the work runs in a
        worker thread, off the caller's event loop."""
        try:
            return await asyncio.to_thread(
                self.spans, model, text, options.final, options.chunk_tokens, options.overlap_tokens
            )
        except APIError as exc:
            return Failed.of(exc)

    async def chunk_all(
        self, model: str, texts: list[str], options: ChunkOptions
    ) -> list[Chunks] | Failed:
        """all_spans() in one call (a request's many inputs cost one hop), errors as values."""
        try:
            return await asyncio.to_thread(self.all_spans, model, texts, options)
        except APIError as exc:
            return Failed.of(exc)
