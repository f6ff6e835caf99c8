"""The traffic domain from prompts kept in a real redis-server: only opted-in keys' prompts,
answered by the real model, split into three parts that share nothing, with its source on the
card; too small a sample is refused with a clear message."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from zerolayer.collapse.traffic import MIN_PROMPTS, load_traffic, traffic_domain
from zerolayer.config import PlatformConfig, RedisConfig
from zerolayer.store.keys import KeyStore
from zerolayer.store.traffic import AsyncTrafficStore, prompt_text

pytestmark = pytest.mark.integration  # the model answers the kept prompts

TOPICS = ["tea", "rivers", "chess", "bread", "owls", "glass", "maps", "bees", "salt", "ice"]


def _keep_all(url: str, key_id: str, texts: list[str], model: str) -> None:
    async def go() -> None:
        client = aioredis.from_url(url)
        store = AsyncTrafficStore(client, 3600, 1000)
        for t in texts:
            msgs = [{"role": "user", "content": t}]
            await store.keep(key_id, False, model, "baseline", "chat", prompt_text(msgs, None, 500))
        await client.aclose()

    asyncio.run(go())


@pytest.fixture
def platform(base_config: PlatformConfig, redis_url: str) -> PlatformConfig:
    """The platform's config on the tests' Redis database (redis_url)."""
    return base_config.model_copy(update={"redis": RedisConfig(url=redis_url)})


def test_traffic_domain_from_opted_in_keys(
    platform: PlatformConfig, redis_url: str, model_dir: Path, tmp_path: Path
) -> None:
    sync = redis.Redis.from_url(redis_url)
    keys = KeyStore(sync)
    model = platform.default_model
    _, yes = keys.create("pro")
    keys.set_sampling(yes.key_id, True)
    _, no = keys.create("pro")  # not opted in: its prompts never reach Redis
    asked = [f"Tell me one fact about {t}." for t in TOPICS] + [
        f"Write a line of a poem about {t}." for t in TOPICS
    ]
    _keep_all(redis_url, yes.key_id, asked, model)
    _keep_all(redis_url, no.key_id, ["a secret about my account"], model)
    entries = [e for e in load_traffic(platform, model) if e.key_id in {yes.key_id, no.key_id}]
    assert len(entries) == len(asked) and {e.key_id for e in entries} == {yes.key_id}

    parts = traffic_domain(entries, model_dir, tmp_path, limit=16, max_tokens=8)
    assert set(parts) == {"calibration", "validation", "evaluation"}
    docs = [set(c.documents) for c in parts.values()]
    assert all(docs) and sum(map(len, docs)) == 16  # the limit, a sample of the 20
    assert not (docs[0] & docs[1] or docs[0] & docs[2] or docs[1] & docs[2])
    text = "".join(c.text() for c in parts.values())
    assert "<|im_start|>user" in text and "<|im_start|>assistant" in text  # template + reply
    assert "secret" not in text
    for c in parts.values():
        desc: dict[str, Any] = c.describe()
        assert desc["domain"] == "traffic" and "opted-in" in desc["source"]
        assert "consent" in desc["licence"]
    # the replies were cached: the same sample again runs no model
    again = traffic_domain(entries, model_dir, tmp_path, limit=16, max_tokens=8)
    assert again["evaluation"].documents == parts["evaluation"].documents

    with pytest.raises(ValueError, match=f"at least {MIN_PROMPTS}"):
        traffic_domain(entries[:3], model_dir, tmp_path, max_tokens=8)
