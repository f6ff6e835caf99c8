"""The probes' routes, open to anyone on the gateway's port: GET /healthz (Redis and the
replica) and GET /metrics (Prometheus)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse
from redis.exceptions import RedisError

from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.deps import CatalogDep, Parts, PipelineDep
from zerolayer.gateway.live import render_live

__all__ = ["router"]

router = APIRouter(route_class=BodyRoute)

_PROMETHEUS = "text/plain; version=0.0.4"


@router.get("/healthz")
async def healthz(parts: Parts) -> JSONResponse:
    """200 when this replica reaches what it needs, else 503 with what failed."""
    report = await parts.health()
    return JSONResponse(report, status_code=200 if report.get("status") == "ok" else 503)


@router.get("/metrics")
async def metrics(parts: Parts, pipeline: PipelineDep, catalog: CatalogDep) -> PlainTextResponse:
    """Every counter and histogram, this replica's queue waits, and the live signals."""
    waits = {str(t): pipeline.admission.wait_s(str(t)) for t in catalog.served()}
    up = "# HELP zerolayer_redis_up 1 when this gateway reaches Redis\n"
    up += "# TYPE zerolayer_redis_up gauge\nzerolayer_redis_up {}\n"
    try:
        text = await parts.metrics.render({"zerolayer_queue_wait_seconds": waits})
        if parts.live is not None:
            text += render_live(await parts.live.report([str(t) for t in catalog.served()]))
    except (RedisError, OSError):
        # the counters live in Redis: without it there are none, and that is the news
        return PlainTextResponse(up.format(0), media_type=_PROMETHEUS)
    return PlainTextResponse(
        up.format(1) + await _memory(parts.limiter.client) + text, media_type=_PROMETHEUS
    )


async def _memory(client: Any) -> str:
    """How full Redis is (its INFO memory), for the alert before it refuses writes; nothing
    when the server does not let the platform read INFO (an external Redis's ACL)."""
    try:
        info = await client.info("memory")
    except (RedisError, OSError):
        return ""
    out = ""
    for name, field, what in (
        ("used_memory_bytes", "used_memory", "Memory the platform's Redis holds"),
        ("maxmemory_bytes", "maxmemory", "Its memory limit (0: none); past it writes are refused"),
    ):
        out += f"# HELP zerolayer_redis_{name} {what}\n# TYPE zerolayer_redis_{name} gauge\n"
        out += f"zerolayer_redis_{name} {int(info.get(field, 0))}\n"
    return out
