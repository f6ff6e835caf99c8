"""The whole platform (Ray Serve, a real redis-server, the real model on vLLM and the torch
engine, every tier of the default model), started once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from zerolayer.config import PlanConfig, PlanLimits, PlatformConfig, TierPrice
from zerolayer.serve.launcher import Platform
from zerolayer.store.embedded import EmbeddedRedis

from tests.conftest import free_port, setup_budget

ADMIN_KEY = "zla-integration-admin"
MONITORING = {
    "sample_rate": 1.0,
    "bucket_s": 3,
    "flush_s": 0.5,
    "channels_flush_s": 0.5,
    "window_buckets": 5,
    "history_buckets": 40,
    "canary_interval_s": 86400.0,
}
BODY_TIMEOUT_S = 3.0
HEADER_TIMEOUT_S = 3  # HAProxy's `timeout http-request`, short so the test waits seconds
PER_SOURCE = 64  # HAProxy's open connections per client address
TIGHT = PlanConfig(
    tiers=["baseline", "masked", "sparse24"],
    default_tier="masked",
    prices={
        t: TierPrice(prompt_per_1k=0.1, completion_per_1k=0.2)
        for t in ("baseline", "masked", "sparse24")
    },
    limits=PlanLimits(requests_per_minute=2, concurrent_requests=4),
)


@pytest.fixture(scope="session")
def platform(
    base_config: PlatformConfig,
    redis_server: EmbeddedRedis,
    model_dir: Path,
    tiny_build: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Platform]:
    cfg = base_config.model_copy(
        update={
            "port": free_port(),
            "redis": redis_server.config(),  # as the launcher passes it: no secret inside
            "dev_key_file": str(tmp_path_factory.mktemp("keys") / "dev-key"),
            # every tier's artifact, from the real compiler at tiny settings (tests/conftest.py)
            "artifacts_dir": str(tiny_build["root"]),
            "build_missing_artifacts": False,
            "admin_key": ADMIN_KEY,
            # a plan with a tight limit, for the limits tests (reached through the admin API)
            "plans": {**base_config.plans, "tight": TIGHT},
            # the default runs tokenfix inside the gateway; here it is its own deployment, so
            # the platform tests cover that path (unit tests cover the same code in-process)
            "tokenfix": base_config.tokenfix.model_copy(update={"in_gateway": False}),
            # a short body timeout, so the slow-body test waits seconds, not the default 30
            "gateway": base_config.gateway.model_copy(update={"body_timeout_s": BODY_TIMEOUT_S}),
            "ray": base_config.ray.model_copy(
                update={
                    "haproxy_header_timeout_s": HEADER_TIMEOUT_S,
                    "haproxy_connections_per_source": PER_SOURCE,
                }
            ),
            # live signals in short buckets, every step sampled (a bucket of one short request then
            # always holds its prefill: steadier skip rates), the canary on demand
            "monitoring": base_config.monitoring.model_copy(update=MONITORING),
        }
    )
    with setup_budget(2400):
        p = Platform(cfg).start()
    yield p
    p.stop()
    # the Redis server is this test process's child, not the platform's: stop() leaves it up
    client = redis_server.client()
    assert client.ping(), "the platform's stop() ended a Redis server it did not start"
    client.close()
