"""The billing deployment: consumers of the usage event stream (billing.consumer), one per
replica, all in one consumer group, so replicas share the stream and take over each other's
pending events."""

from __future__ import annotations

import asyncio
from typing import Any

from ray import serve

from zerolayer.billing.consumer import Biller, consumer_name
from zerolayer.config import PlatformConfig
from zerolayer.store.connect import async_client

__all__ = ["BillingDeployment", "billing_deployment"]


class BillingDeployment:
    """Counts usage events into the ledger in the background, from the replica's start."""

    # Ray Serve awaits an async constructor before the replica takes requests
    async def __init__(self, config: dict[str, Any]):  # type: ignore[misc]
        cfg = PlatformConfig.model_validate(config)
        client = async_client(
            cfg.redis, health_check_interval=30, socket_timeout=10, socket_connect_timeout=2
        )
        self.biller = Biller(client, cfg.billing, name=consumer_name())
        self._stop = asyncio.Event()
        self._task = asyncio.ensure_future(self.biller.run(self._stop))

    async def check_health(self) -> None:
        """Ray Serve's probe: a consumer loop that ended (it never should) fails the replica."""
        if self._task.done():
            raise RuntimeError(f"the billing consumer stopped: {self._task.exception()!r}")

    async def stats(self) -> dict[str, Any]:
        """What this consumer counted, and the group's backlog."""
        return {
            "consumer": self.biller.name,
            "counted": self.biller.counted,
            "handled": self.biller.handled,
            **await self.biller.lag(),
        }

    def __del__(self) -> None:
        self._stop.set()


def billing_deployment(cfg: PlatformConfig) -> Any:
    """BillingDeployment with its configured options."""
    b = cfg.billing
    return serve.deployment(
        BillingDeployment,
        name="billing",
        num_replicas=b.replicas,
        ray_actor_options={"num_cpus": b.num_cpus},
    )
