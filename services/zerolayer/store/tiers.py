"""The tier board: what state each served tier is in (starting, ready, building, failed), with
a build's current step and progress, kept in Redis so that every gateway replica sees what the
launcher knows. The launcher writes it; gateways read it.

A tier the board does not name counts as ready: it was deployed with the application by
something other than the launcher (a Kubernetes RayService, an in-process test)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import redis.asyncio as aioredis
from redis import Redis

from zerolayer.store import keyspace

__all__ = ["BOARD_KEY", "TierState", "TierBoard", "AsyncTierBoard", "READY", "state_of"]

BOARD_KEY = keyspace.tier_board()  # hash: '<model>:<tier>' -> TierState as JSON
Status = Literal["starting", "ready", "building", "failed"]


@dataclass(frozen=True)
class TierState:
    """One tier's state. `step` and `progress` (0..1, of that step) while it builds; `reason`
    when it failed; `since` when it entered this status (Unix seconds)."""

    status: Status
    step: str | None = None
    progress: float | None = None
    reason: str | None = None
    since: float = 0.0

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    def public(self) -> dict[str, Any]:
        """The state as /v1/models shows it (no empty fields)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def parse(cls, raw: str | bytes) -> TierState:
        data = json.loads(raw)
        return cls(
            **{k: data.get(k) for k in ("status", "step", "progress", "reason")},
            since=float(data.get("since") or 0.0),
        )


READY = TierState("ready")


class TierBoard:
    """The launcher's side: writes each tier's state."""

    def __init__(self, client: Redis):
        self.client = client

    def set(self, tier: str, state: TierState) -> None:
        if not state.since:
            state = replace(state, since=time.time())
        self.client.hset(BOARD_KEY, tier, json.dumps(asdict(state)))

    def reset(self, tiers: list[str]) -> None:
        """Forget every tier but these (a tier a previous start served and this one does not)."""
        stale = [_s(t) for t in self.client.hkeys(BOARD_KEY) if _s(t) not in tiers]
        if stale:
            self.client.hdel(BOARD_KEY, *stale)


class AsyncTierBoard:
    """A gateway's side: reads the board, at most once per `ttl_s` (a request's tier check costs
    no Redis call in between)."""

    def __init__(self, client: aioredis.Redis, ttl_s: float = 1.0):
        self.client = client
        self.ttl_s = ttl_s
        self._states: dict[str, TierState] = {}
        self._read_at = float("-inf")

    async def states(self) -> dict[str, TierState]:
        now = time.monotonic()
        if now - self._read_at >= self.ttl_s:
            raw = await self.client.hgetall(BOARD_KEY)
            self._states = {_s(k): TierState.parse(v) for k, v in raw.items()}
            self._read_at = now
        return self._states


def state_of(states: Mapping[str, TierState], target: object) -> TierState:
    """A tier's state on the board (str(target) names it); ready when the board does not name
    it."""
    return states.get(str(target), READY)


_s = keyspace.text
