"""The gateway's FastAPI app over in-process replicas with the scripted fake engine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aioredis
from fastapi.testclient import TestClient
from zerolayer.config import PlatformConfig
from zerolayer.engines.fake import FakeEngine
from zerolayer.gateway.api import create_app
from zerolayer.gateway.catalog import Catalog
from zerolayer.replicas.core import TierReplica
from zerolayer.replicas.local import LocalBackend
from zerolayer.store.keys import AsyncKeyStore, KeyStore
from zerolayer.tokenfix.prompt import PromptBuilder

SCRIPT = ["The", " capital", " of", " France", " is", " Paris", "."]


class Gateway:
    """A test client plus the parts a test may want to look at."""

    def __init__(self, client: TestClient, engine: FakeEngine, key: str, prompts: PromptBuilder):
        self.client = client
        self.engine = engine
        self.key = key
        self.prompts = prompts

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@pytest.fixture
def gateway(
    base_config: PlatformConfig, redis_url: str, prompts: PromptBuilder
) -> Iterator[Gateway]:
    engine = FakeEngine(SCRIPT)
    key, _ = KeyStore(redis.Redis.from_url(redis_url)).create("pro")
    replica = TierReplica("smollm2-135m:baseline", engine, prompts, 2048, 16)
    backend = LocalBackend({"smollm2-135m:baseline": replica})
    aclient = aioredis.from_url(redis_url)

    async def health() -> dict[str, str]:
        await aclient.ping()
        return {"status": "ok"}

    app = create_app(
        backend, AsyncKeyStore(aclient).lookup, Catalog(base_config), base_config.gateway, health
    )
    with TestClient(app, raise_server_exceptions=False) as client:
        client.portal.call(replica.start)
        yield Gateway(client, engine, key, prompts)
