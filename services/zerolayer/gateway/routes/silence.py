"""The silence maps of the served models: GET /v1/models/{model}/silence_map (per layer and
channel, the share of calibration tokens it stays silent on) and one channel's figures
(zerolayer.gateway.silence reads them from the artifacts)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from fastapi import APIRouter, Depends, Request

from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.deps import SilenceDep, reader
from zerolayer.gateway.replies import SilenceChannel, SilenceMap, json_reply
from zerolayer.gateway.silence import share_param

__all__ = ["router"]

# an API key or the admin key, before anything else
router = APIRouter(
    prefix="/v1/models/{model}/silence_map", dependencies=[Depends(reader)], route_class=BodyRoute
)


@router.get("", responses=json_reply(SilenceMap))
async def overview(request: Request, model: str, maps: SilenceDep) -> dict[str, Any]:
    """The model's map, with each layer's silent channels at `silent_share`."""
    q = share_param(request, "quantile", math.nan)
    share = share_param(request, "silent_share", 0.5)
    return await asyncio.to_thread(maps.overview, model, None if math.isnan(q) else q, share)


@router.get("/{kind}/{layer}/{channel}", responses=json_reply(SilenceChannel))
async def channel(
    request: Request, model: str, kind: str, layer: int, channel: int, maps: SilenceDep
) -> dict[str, Any]:
    """One channel's figures, per calibration sample."""
    q = share_param(request, "quantile", math.nan)
    return await asyncio.to_thread(
        maps.channel, model, kind, layer, channel, None if math.isnan(q) else q
    )
