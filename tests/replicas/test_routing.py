"""The affinity router on a real Ray Serve: a key's requests go to the replica it hashes to,
keys spread over the replicas, and a full preferred replica hands the request to another
instead of making it wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from zerolayer.protocol import SamplingSpec
from zerolayer.replicas.routing import ROUTER, preferred

from tests.helm.test_autoscaling import local_serve  # noqa: F401  (a fixture)


def test_a_key_keeps_its_replica_when_another_one_goes() -> None:
    replicas = ["a1", "b2", "c3", "d4"]
    keys = [f"tenant\0conv:{i}" for i in range(200)]
    placed = {k: replicas[preferred(k, replicas)] for k in keys}
    assert len(set(placed.values())) == 4  # spread over every replica
    assert all(75 > sum(1 for v in placed.values() if v == r) > 25 for r in replicas)
    fewer = ["a1", "c3", "d4"]
    for k in keys:
        if placed[k] != "b2":  # only the keys of the replica that went move
            assert fewer[preferred(k, fewer)] == placed[k]


def test_tiers_route_by_affinity_on_a_cluster_and_leave_it_to_serve_behind_haproxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chart's tiers (Serve's proxies, no HAProxy) route with the affinity router; a local
    platform behind HAProxy keeps Serve's router, which is all Serve allows there."""
    from zerolayer.config import load_config
    from zerolayer.replicas.deployment import tier_deployment

    from tests.conftest import clean_env

    def router(cfg: Any) -> Any:
        d = tier_deployment("t", cfg, "smollm2-135m", "baseline")
        return d._deployment_config.request_router_config.request_router_class  # (Serve's own)

    monkeypatch.delenv("RAY_SERVE_ENABLE_HA_PROXY", raising=False)
    cluster = load_config(env=clean_env(), serve_file="cluster.yaml", environment=False)
    local = load_config(env=clean_env())
    assert router(cluster) == ROUTER
    assert local.ray.haproxy and router(local).endswith(":PowerOfTwoChoicesRequestRouter")
    monkeypatch.setenv("RAY_SERVE_ENABLE_HA_PROXY", "1")  # a cluster whose Ray runs HAProxy
    assert router(cluster).endswith(":PowerOfTwoChoicesRequestRouter")


@pytest.fixture
def probe(local_serve: None) -> Iterator[Any]:  # noqa: F811
    """Three replicas of a deployment that says which replica answered, after sleeping
    max_tokens milliseconds; routed by the affinity router."""
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    @serve.deployment(
        num_replicas=3,
        max_ongoing_requests=2,
        request_router_config=RequestRouterConfig(request_router_class=ROUTER),
        ray_actor_options={"num_cpus": 0.1},
    )
    class Which:
        async def complete(self, spec: SamplingSpec) -> str:
            await asyncio.sleep(spec.max_tokens / 1000)
            return serve.get_replica_context().replica_id.unique_id

    yield serve.run(Which.bind(), name="which", route_prefix=None)


@pytest.mark.slow
def test_the_router_keeps_a_key_on_its_replica_and_falls_back_when_it_is_full(
    probe: Any,
) -> None:
    def spec(key: str, ms: int = 0) -> SamplingSpec:
        return SamplingSpec("r", [1], ms, affinity=key)

    async def scenario() -> None:
        keys = [f"t\0conv:{i}" for i in range(12)]
        seen: dict[str, set[str]] = {k: set() for k in keys}
        for _ in range(3):
            for k in keys:
                seen[k].add(await probe.complete.remote(spec(k)))
        assert all(len(v) == 1 for v in seen.values()), seen
        ids = sorted(set().union(*seen.values()))
        assert len(ids) >= 2, ids  # the keys spread
        if len(ids) == 3:  # each went where rendezvous hashing over the replicas says
            assert all(seen[k] == {ids[preferred(k, ids)]} for k in keys)
        # the key's replica is full (two slow requests): the next one goes elsewhere at once
        k = keys[0]
        (home,) = seen[k]
        slow = [asyncio.ensure_future(probe.complete.remote(spec(k, 3000))) for _ in range(2)]
        await asyncio.sleep(0.5)
        start = time.monotonic()
        other = await probe.complete.remote(spec(k))
        assert other != home and time.monotonic() - start < 2.0
        assert set(await asyncio.gather(*slow)) == {home}

    asyncio.run(scenario())
