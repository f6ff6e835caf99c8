"""Timing one request through an engine, and reading a measuring worker's tagged reply."""

from __future__ import annotations

import asyncio

import pytest
from zerolayer.engines import FakeEngine
from zerolayer.engines.timing import tagged, timed_request


def test_a_timed_request_counts_tokens_and_gaps():
    engine = FakeEngine(["a", "b", "c", "d", "e"], delay_s=0.02)
    got = asyncio.run(timed_request(engine, [1, 2, 3], 4, fresh=True))
    assert got.tokens == 4
    assert len(got.gaps) == 3 and all(g >= 0.015 for g in got.gaps)
    assert got.ttft_s >= 0.015
    assert got.decode_s == pytest.approx(sum(got.gaps), abs=0.01)
    spec = engine.specs[0]
    assert spec.max_tokens == 4 and spec.temperature == 0.0 and spec.cache_salt


def test_a_request_shares_the_prefix_cache_unless_fresh():
    engine = FakeEngine()
    asyncio.run(timed_request(engine, [1], 2))
    assert engine.specs[0].cache_salt == ""


def test_tagged_finds_the_reply_among_other_output():
    line = 'INFO noise @tag {"tps": 3.5, "n": [1, 2]} trailing child output'
    assert tagged(line, "@tag ") == {"tps": 3.5, "n": [1, 2]}
    assert tagged("no reply here", "@tag ") is None
