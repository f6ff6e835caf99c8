"""A tier scales out under load and back after it, on a local Ray Serve, with the autoscaling
settings the chart renders for it (a scripted engine stands in for the model: what is tested is
Serve's autoscaler acting on the chart's numbers, not the engine)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from zerolayer.config import ActorOptions, AutoscalingConfig, FakeTier, PlatformConfig
from zerolayer.protocol import SamplingSpec
from zerolayer.serve.app import deployment_name, tier_apps
from zerolayer.serve.launcher import SERVE_LOGGING, ray_temp_dir

from tests.conftest import setup_budget
from tests.helm.conftest import one

MODEL, TIER = "smollm2-135m", "dynamic"
APP = deployment_name(MODEL, TIER)
TOKEN_S = 0.1  # the scripted engine's pause per token: each request stays in flight ~6 s
TOKENS = 60


def rendered_autoscaling(render: Callable[..., Any]) -> dict[str, Any]:
    """The tier deployment's autoscaling_config in the RayService the chart renders (defaults)."""
    objects, _ = render()
    serve = yaml.safe_load(one(objects, "RayService")["spec"]["serveConfigV2"])
    (app,) = [a for a in serve["applications"] if a["name"] == APP]
    (dep,) = [d for d in app["deployments"] if d["name"] == APP]
    return dep["autoscaling_config"]


def running(app: str) -> int:
    """The application's replicas that serve now."""
    from ray import serve

    status = serve.status().applications.get(app)
    if status is None or APP not in status.deployments:
        return 0
    return status.deployments[APP].replica_states.get("RUNNING", 0)


@pytest.fixture
def local_serve() -> Iterator[None]:
    """Ray (2 CPUs, its own local instance) with Serve started; shut down after the test."""
    import ray
    from ray import serve

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        logging_level="WARNING",
        _temp_dir=str(ray_temp_dir()),  # short paths for its sockets, this user's alone
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": 0})
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.mark.integration
@pytest.mark.slow
def test_a_tier_scales_out_under_load_and_back_with_the_charts_autoscaling(
    render: Callable[..., Any],
    base_config: PlatformConfig,
    model_dir: Any,
    redis_url: str,
    local_serve: None,
) -> None:
    from ray import serve
    from ray.serve.handle import DeploymentHandle

    chart = AutoscalingConfig.model_validate(rendered_autoscaling(render))
    assert chart.min_replicas == 1 and chart.max_replicas >= 2
    assert chart.downscale_delay_s >= chart.upscale_delay_s
    # the chart's bounds, target and scale-out delay as rendered; its scale-in delay (90 s, a
    # plain timer in Serve's autoscaler) shortened so the test waits seconds for the way back
    scaling = chart.model_copy(update={"downscale_delay_s": min(chart.downscale_delay_s, 10.0)})
    served = base_config.models[MODEL].tiers[TIER]
    tc = FakeTier(
        engine="fake",
        artifact=served.artifact,
        cluster=served.cluster,
        max_ongoing_requests=served.max_ongoing_requests,
        short_requests=served.short_requests,
        fake_script=[" x"] * TOKENS,
        fake_delay_s=TOKEN_S,
        autoscaling_config=scaling,  # the chart's numbers, in place of the local ones
        ray_actor_options=ActorOptions(num_cpus=0.1),  # no GPU here
    )
    model = base_config.models[MODEL]
    model = model.model_copy(update={"tiers": {**model.tiers, TIER: tc}})
    cfg = base_config.model_copy(
        update={
            "models": {**base_config.models, MODEL: model},
            "redis": base_config.redis.model_copy(update={"url": redis_url}),
        }
    )
    with setup_budget(300):
        serve.run(
            tier_apps(cfg, MODEL, TIER)[APP],
            name=APP,
            route_prefix=None,
            logging_config=SERVE_LOGGING,
        )
    assert running(APP) == 1
    handle: DeploymentHandle = serve.get_app_handle(APP)
    # three replicas' worth of requests: each answer takes ~6 s, and a new one replaces it
    load = int(3 * scaling.target_ongoing_requests)
    ids = itertools.count()
    seen: list[tuple[float, int]] = []

    async def client(stop: asyncio.Event) -> int:
        done = 0
        while not stop.is_set():
            spec = SamplingSpec(f"r{next(ids)}", [1, 2, 3], max_tokens=TOKENS, temperature=0.0)
            end = await handle.complete.remote(spec)
            assert end.text == " x" * TOKENS, end
            done += 1
        return done

    async def until(want: Callable[[int], bool], within: float) -> float:
        start = time.monotonic()
        while time.monotonic() - start < within:
            n = await asyncio.to_thread(running, APP)
            seen.append((time.monotonic(), n))
            if want(n):
                return time.monotonic() - start
            await asyncio.sleep(2)
        raise AssertionError(f"replicas over time: {[n for _, n in seen]}")

    async def scenario() -> tuple[float, float, int]:
        stop = asyncio.Event()
        clients = [asyncio.create_task(client(stop)) for _ in range(load)]
        try:
            up = await until(lambda n: n >= 2, within=scaling.upscale_delay_s + 150)
        finally:
            stop.set()
        answered = sum(await asyncio.gather(*clients))
        down = await until(lambda n: n == 1, within=scaling.downscale_delay_s + 150)
        return up, down, answered

    up, down, answered = asyncio.run(scenario())
    # every request taken was answered, through the scale-out; printed for whoever tunes the chart
    assert answered >= load
    changes = [
        (round(t - seen[0][0]), n)
        for (t, n), prev in zip(seen, [None, *seen[:-1]], strict=True)
        if not prev or n != prev[1]
    ]
    print(
        f"scaled out in {up:.0f} s under {load} streams, back to 1 in {down:.0f} s: "
        f"(seconds, replicas) {changes}"
    )
    assert max(n for _, n in seen) <= scaling.max_replicas
