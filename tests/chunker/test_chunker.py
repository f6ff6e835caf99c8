"""Token-exact chunking, whole and streamed."""

from __future__ import annotations

import pydoc

import pytest
from zerolayer.chunker.core import cut
from zerolayer.chunker.service import Chunker
from zerolayer.errors import InvalidRequest

TEXT = (
    pydoc.render_doc("json", renderer=pydoc.plaintext)
    + " 人工智能正在改变世界。😀 naïve café — “quotes” " * 40
)


def count(chunker: Chunker, text: str) -> int:
    tok = chunker.tokenizers["smollm2-135m"]
    return len(tok(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("n", [16, 100, 512])
def test_chunks_are_exact_bounded_and_rebuild_the_text(chunker: Chunker, n: int) -> None:
    tok = chunker.tokenizers["smollm2-135m"]
    spans, rest = cut(tok, TEXT, n)
    assert rest == len(TEXT)
    assert "".join(TEXT[s.start : s.end] for s in spans) == TEXT
    for s in spans:
        assert 0 < s.tokens <= n
        assert s.tokens == count(chunker, TEXT[s.start : s.end])
    # chunks are full, except the last and where a character or merge would be split
    assert sum(s.tokens == n for s in spans) >= 0.8 * (len(spans) - 1)


def test_streamed_input_gives_the_same_chunks(chunker: Chunker) -> None:
    tok = chunker.tokenizers["smollm2-135m"]
    whole, _ = cut(tok, TEXT, 128)
    got, buffer, base = [], "", 0
    for i in range(0, len(TEXT), 333):
        buffer += TEXT[i : i + 333]
        spans, rest = cut(tok, buffer, 128, final=False)
        got += [(base + s.start, base + s.end, s.tokens) for s in spans]
        buffer, base = buffer[rest:], base + rest
    spans, _ = cut(tok, buffer, 128, final=True)
    got += [(base + s.start, base + s.end, s.tokens) for s in spans]
    assert got == [(s.start, s.end, s.tokens) for s in whole]


def test_overlap_repeats_the_end_of_each_chunk(chunker: Chunker) -> None:
    tok = chunker.tokenizers["smollm2-135m"]
    spans, _ = cut(tok, TEXT[:5000], 64, overlap=16)
    for a, b in zip(spans, spans[1:], strict=False):
        assert a.start < b.start < a.end  # b starts inside a
        assert count(chunker, TEXT[b.start : a.end]) >= 12


def test_service_options_and_errors(chunker: Chunker) -> None:
    out = chunker.spans("smollm2-135m", TEXT, chunk_tokens=256)
    assert all(c.text == TEXT[c.start : c.end] for c in out.chunks)
    with pytest.raises(InvalidRequest):
        chunker.spans("smollm2-135m", TEXT, chunk_tokens=64, overlap_tokens=64)
    assert chunker.spans("smollm2-135m", "").chunks == []
