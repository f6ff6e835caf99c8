"""POST /v1/chunks: token-exact chunks of texts, by the model's own tokenizer."""

from __future__ import annotations

from .._models import BaseModel, RequestModel

__all__ = ["ChunksCreateParams", "Chunk", "ChunkUsage", "ChunkList", "ChunksDone"]


class ChunksCreateParams(RequestModel):
    """The JSON body of a chunking request."""

    model: str
    input: str | list[str]
    chunk_tokens: int | None = None
    overlap_tokens: int | None = None


class Chunk(BaseModel):
    """One chunk: its text, tokens and where it lies in its input (characters)."""

    object: str = "chunk"
    index: int
    input_index: int = 0
    text: str
    tokens: int
    start_char: int
    end_char: int


class ChunkUsage(BaseModel):
    """Tokens cut (chunking is free; they count against the key's tokens per minute)."""

    prompt_tokens: int = 0
    total_tokens: int = 0


class ChunkList(BaseModel):
    """Every chunk of a request."""

    object: str = "list"
    model: str | None = None
    data: list[Chunk] = []
    usage: ChunkUsage | None = None


class ChunksDone(BaseModel):
    """The last line of a streamed chunking: how many chunks, tokens and characters."""

    object: str = "chunks.done"
    chunks: int
    tokens: int
    chars: int
