"""How the gateway's handles pick a tier replica: requests that share a prefix go where it is
cached.

A request with an affinity key (SamplingSpec.affinity: its tenant with its conversation, the
first response of its previous_response_id chain, or its prompt_cache_key) goes first to the
replica the key hashes to by rendezvous hashing over the running replicas (a replica added or
removed moves only the keys that hashed to it), unless that replica's last known queue is
longer than the shortest known one by more than `imbalance` requests: then, and for requests
without a key, the power of two choices decides (two replicas drawn at random, the shorter
queue of those that accept). The preferred replica is a first rank only: when it refuses (its
queue is full), the request falls back to the others instead of waiting for it.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica

from zerolayer.protocol import SamplingSpec
from zerolayer.ray_private import queue_length

__all__ = ["AffinityRouter", "ROUTER", "affinity_of", "preferred"]

ROUTER = "zerolayer.replicas.routing:AffinityRouter"


def affinity_of(pending: PendingRequest | None) -> str:
    """The affinity key of a request to a tier replica ('' for none: a card, a canary); a
    group of a batch's requests shares one (zerolayer.gateway.grouped)."""
    if pending is None or not pending.args:
        return ""
    spec = pending.args[0]
    if isinstance(spec, list) and spec:
        spec = spec[0]
    return spec.affinity if isinstance(spec, SamplingSpec) else ""


def preferred(key: str, replica_ids: list[str]) -> int:
    """The index of the replica a key goes to: the highest hash of key and replica id."""

    def score(rid: str) -> bytes:
        return hashlib.blake2b(f"{key}\0{rid}".encode(), digest_size=8).digest()

    return max(range(len(replica_ids)), key=lambda j: score(replica_ids[j]))


class AffinityRouter(FIFOMixin, RequestRouter):
    """The power of two choices, with a first rank for the replica a request's affinity key
    prefers (see the module doc)."""

    def initialize_state(self, imbalance: int = 4, **kwargs: Any) -> None:
        self.imbalance = imbalance

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        n = len(candidate_replicas)
        two = random.sample(candidate_replicas, min(2, n))
        key = affinity_of(pending_request)
        if not key or n < 2:
            return [two]
        best = candidate_replicas[
            preferred(key, [r.replica_id.unique_id for r in candidate_replicas])
        ]
        known = [queue_length(self, r.replica_id) for r in candidate_replicas]
        shortest = min((q for q in known if q is not None), default=None)
        queued = queue_length(self, best.replica_id)
        if queued is not None and shortest is not None and queued > shortest + self.imbalance:
            return [two]  # it is busy: load decides
        return [[best], [r for r in two if r is not best] or two]
