"""Token-exact chunking: cut text into pieces of at most N tokens of a model's tokenizer.

A chunk's boundary is where the (N+1)-th token of the remaining text starts, moved back so no
character is split between chunks; the chunk's own text is then tokenized and, if that gives more
than N tokens (a merge across the boundary), the boundary moves back one token more. So every
chunk, tokenized on its own, has at most N tokens, and its reported count is exactly that. Without
overlap, the chunks' texts concatenate to the input.

Streamed input: `cut(..., final=False)` emits only chunks followed by at least `margin` more
tokens (so more text cannot change where they end) and returns where the unconsumed rest starts;
the caller keeps that rest and appends what arrives. Whole-text chunking is the same call with
final=True, so both give the same chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Span", "cut"]

MARGIN = 64  # tokens of look-ahead before a streamed chunk counts as complete


@dataclass(frozen=True)
class Span:
    """One chunk: text[start:end] with `tokens` tokens."""

    start: int
    end: int
    tokens: int


def _encode(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


def _char_start(offsets: list[tuple[int, int]], i: int) -> int:
    """Move token index i back until token i starts a new character (never below 1)."""
    while i > 1 and offsets[i][0] == offsets[i - 1][0]:
        i -= 1
    return i


def _count(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def cut(
    tokenizer: Any,
    text: str,
    n: int,
    overlap: int = 0,
    final: bool = True,
    margin: int = MARGIN,
) -> tuple[list[Span], int]:
    """Complete chunks of `text` and the offset where the unconsumed rest starts (len(text) when
    final). `overlap` tokens of each chunk's end start the next one."""
    if not 0 <= overlap < n:
        raise ValueError(f"overlap {overlap} must be in [0, {n})")
    spans: list[Span] = []
    pos = 0
    need = n + margin
    while pos < len(text):
        width = need * 8
        while True:
            window = text[pos : pos + width]
            ids, offsets = _encode(tokenizer, window)
            if len(ids) > need or pos + width >= len(text):
                break
            width *= 2
        if len(ids) <= n or (not final and len(ids) <= need):
            if final and ids:
                spans.append(Span(pos, len(text), _count(tokenizer, text[pos:])))
            if final:
                pos = len(text)
            break
        e = _char_start(offsets, n)
        while True:
            end = pos + offsets[e][0]
            tokens = _count(tokenizer, text[pos:end])
            if tokens <= n or e <= 1:
                break
            e = _char_start(offsets, e - 1)
        spans.append(Span(pos, end, tokens))
        nxt = pos + offsets[_char_start(offsets, e - overlap)][0] if overlap else end
        pos = nxt if nxt > pos else end
    return spans, pos
