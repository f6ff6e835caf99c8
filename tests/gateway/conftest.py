"""The gateway's FastAPI app over in-process replicas with the scripted fake engine, the real
tokenfix and chunker, and a real redis-server. `make_gateway` builds more than one app on the same
Redis: gateway replicas. Token counts come from a small tokenizer made for the session
(tests/fixtures/tokenizer.py), so these tests need no imported model."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from fastapi.testclient import TestClient
from zerolayer.batches import BatchStore
from zerolayer.billing.consumer import Biller
from zerolayer.billing.ledger import Ledger
from zerolayer.chunker.service import Chunker
from zerolayer.config import PlanConfig, PlatformConfig
from zerolayer.conversations import ConversationStore
from zerolayer.engines.fake import FakeEngine
from zerolayer.files import FileStore
from zerolayer.gateway.api import create_app
from zerolayer.gateway.limits import Limiter
from zerolayer.gateway.live import LiveSignals
from zerolayer.gateway.metrics import Metrics
from zerolayer.gateway.parts import GatewayParts
from zerolayer.protocol import Target
from zerolayer.replicas.core import TierReplica
from zerolayer.replicas.local import LocalBackend
from zerolayer.store.abandoned import AbandonedReports
from zerolayer.store.keys import AsyncKeyStore, KeyStore, hash_key
from zerolayer.store.tiers import AsyncTierBoard
from zerolayer.store.traffic import AsyncTrafficStore, TrafficStore
from zerolayer.tokenfix.prompt import PromptBuilder
from zerolayer.tokenfix.service import Tokenfix

from tests.conftest import free_port
from tests.fixtures.tokenizer import make_tokenizer_dir

SCRIPT = ["The", " capital", " of", " France", " is", " Paris", "."]
RAISE = True
ADMIN_KEY = "zla-test-admin-key"
PRICE = {"prompt_per_1k": 1.0, "completion_per_1k": 2.0}


def plan(priority: int = 0, **limits: Any) -> PlanConfig:
    """A plan on the baseline tier with the given limits (a micro-dollar per prompt token)."""
    return PlanConfig(
        tiers=["baseline"],
        default_tier="baseline",
        prices={"baseline": PRICE},
        limits=limits,
        priority=priority,
    )


class Gateway:
    """A test client plus the parts a test may want to look at."""

    def __init__(
        self,
        client: TestClient,
        engine: FakeEngine,
        key: str,
        key_id: str,
        prompts: PromptBuilder,
        app: Any,
        clock: Callable[[], float],
        redis: redis.Redis,
        biller: Biller,
    ):
        self.biller = biller  # a billing consumer on the gateway's Redis, run by billed()
        self.clock = clock  # the limiter's: a fixed second in the middle of a minute
        self.redis = redis  # the Redis the gateway uses, for looking at its counters
        self.client = client
        self.engine = engine
        self.key = key
        self.key_id = key_id
        self.prompts = prompts
        self.app = app
        self._url: str | None = None
        self._server: Any = None
        self._serving: Any = None
        self._http_lock = threading.Lock()

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_KEY}"}

    def settled(self) -> None:
        """Wait until the background settlements of finished requests are written."""
        self.client.portal.call(self.app.state.meter.drain)

    def billed(self) -> None:
        """Settle, then count every usage event written so far into the ledger."""
        self.settled()

        async def count() -> None:
            await self.biller.setup()
            while True:
                await self.biller.step(block_ms=1)
                lag = await self.biller.lag()
                if not lag["unread"] and not lag["pending"]:
                    return

        self.client.portal.call(count)

    def event(self, request_id: str) -> dict[str, Any]:
        """The usage event of a request, as counted (billed() first)."""
        tenant = self.record().owner
        month = time.strftime("%Y-%m", time.gmtime())
        for text in self.redis.lrange(f"zl:bill:{{{tenant}}}:events:{month}", 0, -1):
            ev = json.loads(text)
            if ev["id"] == request_id:
                return dict(ev)
        raise AssertionError(f"no usage event for {request_id}")

    def record(self) -> Any:
        return KeyStore(self.redis).get(self.key_id)

    def http(self) -> str:
        """Serve this app over real HTTP too (uvicorn on a free port, in the event loop the
        app and its replicas run in), for clients that bring their own HTTP stack (the openai
        package); its base URL. Stopped with the fixture."""
        with self._http_lock:  # threads of one test may ask at once: one server
            if self._url is None:
                import uvicorn

                port = free_port()
                server = uvicorn.Server(
                    uvicorn.Config(
                        self.app,
                        host="127.0.0.1",
                        port=port,
                        lifespan="off",
                        log_level="warning",
                        timeout_graceful_shutdown=1,  # then what is still open is cancelled
                    )
                )
                self._serving = self.client.portal.start_task_soon(server.serve)
                deadline = time.monotonic() + 10
                while not server.started:
                    assert time.monotonic() < deadline, "uvicorn did not start"
                    time.sleep(0.01)
                self._server = server
                self._url = f"http://127.0.0.1:{port}/v1"
            return self._url

    def stop_http(self) -> None:
        """Stop the HTTP server of http(), if started."""
        if self._server is not None:
            self._server.should_exit = True
            self._serving.result(timeout=15)
            self._server = None


GatewayFactory = Callable[..., Gateway]


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small tokenizer's folder, made once per session (in place of the imported model)."""
    return make_tokenizer_dir(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def prompts(tokenizer_dir: Path) -> PromptBuilder:
    """The gateway tests' prompt builder (the small tokenizer)."""
    return PromptBuilder(tokenizer_dir)


@pytest.fixture(scope="session")
def tokenfix(tokenizer_dir: Path) -> Tokenfix:
    """tokenfix over the small tokenizer."""
    return Tokenfix({"smollm2-135m": tokenizer_dir})


@pytest.fixture(scope="session")
def chunker(tokenizer_dir: Path, base_config: PlatformConfig) -> Chunker:
    """The chunker over the small tokenizer, with the platform's settings."""
    return Chunker({"smollm2-135m": tokenizer_dir}, base_config.chunker)


@pytest.fixture
def make_gateway(
    base_config: PlatformConfig,
    redis_url: str,
    prompts: PromptBuilder,
    tokenfix: Tokenfix,
    chunker: Chunker,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayFactory]:
    chunking = chunker
    """make_gateway(plans=..., key_plan=..., engine=..., key=...) -> a started Gateway. Apps made
    by one call of the fixture share Redis (and, when given, the key), and one limiter clock: a
    fixed time 20 s into the current minute, so no test's requests straddle a minute's edge."""
    stack: list[TestClient] = []
    made: list[Gateway] = []
    frozen = 60 * (time.time() // 60) + 20
    files_dir = tmp_path_factory.mktemp("files")  # uploaded files' bytes, shared as Redis is

    def clock() -> float:
        return frozen

    def make(
        plans: dict[str, PlanConfig] | None = None,
        key_plan: str = "pro",
        engine: FakeEngine | None = None,
        short_engine: FakeEngine | None = None,
        key: tuple[str, str] | None = None,
        tiers: dict[str, Any] | None = None,
        gateway: dict[str, Any] | None = None,
        chunker: dict[str, Any] | None = None,
        store: str | None = None,
        wrap: Callable[[Any], Any] | None = None,
        board: bool = False,
        traffic: dict[str, Any] | None = None,
        settings: dict[str, Any] | None = None,
        engines: dict[str, FakeEngine] | None = None,
        live: bool = False,
    ) -> Gateway:
        url = store or redis_url  # another Redis (with its credentials), for fault tests
        cfg = base_config.model_copy(
            update={
                "plans": {**base_config.plans, **(plans or {})},
                "chunker": base_config.chunker.model_copy(update=chunker or {}),
                "traffic_sampling": base_config.traffic_sampling.model_copy(update=traffic or {}),
                # copies a test may change (a batch worker's polling, the largest upload)
                "batches": base_config.batches.model_copy(),
                "files": base_config.files.model_copy(),
                "gateway": base_config.gateway.model_copy(
                    update={"admin_key_sha256": hash_key(ADMIN_KEY), **(gateway or {})}
                ),
                **(settings or {}),  # other top-level settings (artifacts_dir, ...)
            }
        )
        if tiers:  # a new models dict: the session's base_config stays as it is
            model = cfg.models["smollm2-135m"]
            model = model.model_copy(update={"tiers": {**model.tiers, **tiers}})
            cfg = cfg.model_copy(update={"models": {**cfg.models, "smollm2-135m": model}})
        engine = engine or FakeEngine(SCRIPT)
        sync = redis.Redis.from_url(url)
        if key is None:
            secret, record = KeyStore(sync).create(key_plan)
            key = (secret, record.key_id)
        vocab = len(prompts.tokenizer)
        baseline = Target("smollm2-135m", "baseline")
        replicas = {
            baseline: TierReplica(str(baseline), engine, vocab, 2048),
            # the tier's short-request group, used when the tier config declares one
            baseline.group(short=True): TierReplica(
                str(baseline), short_engine or engine, vocab, 2048
            ),
        }
        for tier in cfg.models["smollm2-135m"].tiers:  # the other tiers: engines of their own
            t = Target("smollm2-135m", tier)
            own = (engines or {}).get(tier) or FakeEngine(SCRIPT)
            replicas.setdefault(t, TierReplica(str(t), own, vocab, 2048))
        backend = LocalBackend(replicas, tokenfix, chunking)
        aclient = aioredis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
        for r in replicas.values():  # as a tier deployment's: what ran of abandoned requests
            r.on_abandoned = AbandonedReports(aclient)
        ts = cfg.traffic_sampling

        async def health() -> dict[str, str]:
            await aclient.ping()
            return {"status": "ok"}

        app = create_app(
            GatewayParts(
                backend=backend,
                lookup_key=AsyncKeyStore(aclient).lookup,
                config=cfg,
                health=health,
                limiter=Limiter(
                    aclient,
                    cfg.gateway.concurrency_lease_s,
                    clock=clock,
                    dedupe_ttl_s=cfg.billing.dedupe_ttl_s,
                ),
                metrics=Metrics(aclient),
                keys=KeyStore(sync),
                traffic=AsyncTrafficStore(aclient, ts.retention_s, ts.max_per_key),
                traffic_admin=TrafficStore(sync, ts.retention_s),
                conversations=ConversationStore(
                    aclient, cfg.conversations.response_ttl_s, cfg.conversations.conversation_ttl_s
                ),
                # the session's folder, or the store a test configured (a bucket)
                files=FileStore(
                    aclient, cfg.files.url or str(files_dir), cfg.files.storage_options
                ),
                batches=BatchStore(aclient),
                # the tier board the launcher writes, read at every request (no caching)
                tiers=AsyncTierBoard(aclient, ttl_s=0.0) if board else None,
                ledger=Ledger(aclient, cfg.billing.close_after_s),
                live=LiveSignals(aclient, cfg.monitoring) if live else None,
            )
        )
        # wrap: ASGI layers around the app, as Ray Serve puts its own around it
        client = TestClient(wrap(app) if wrap else app, raise_server_exceptions=RAISE)
        client.__enter__()
        stack.append(client)
        for r in replicas.values():
            client.portal.call(r.start)
        biller = Biller(aclient, cfg.billing, name=f"test-{uuid.uuid4().hex[:8]}")
        made.append(Gateway(client, engine, key[0], key[1], prompts, app, clock, sync, biller))
        return made[-1]

    yield make
    for gw in made:
        gw.stop_http()
    for client in reversed(stack):
        client.__exit__(None, None, None)


@pytest.fixture
def gateway(make_gateway: GatewayFactory) -> Gateway:
    """One gateway, a pro key."""
    return make_gateway()
