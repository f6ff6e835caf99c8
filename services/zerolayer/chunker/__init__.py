"""The chunker deployment: token-exact chunks of long inputs (POST /v1/chunks, map-reduce)."""

from zerolayer.chunker.core import Span, cut
from zerolayer.chunker.service import Chunker

__all__ = ["Span", "cut", "Chunker"]
