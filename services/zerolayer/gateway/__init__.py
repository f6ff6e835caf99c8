"""The gateway: OpenAI-compatible HTTP API, admin API, API keys, plan limits, admission control,
routing to tier replicas."""

from zerolayer.gateway.admission import Admission
from zerolayer.gateway.api import Backend, GatewayParts, create_app
from zerolayer.gateway.catalog import Catalog, tier_key
from zerolayer.gateway.limits import Limiter, Reservation
from zerolayer.gateway.metrics import Metrics

__all__ = [
    "Admission",
    "Backend",
    "GatewayParts",
    "create_app",
    "Catalog",
    "tier_key",
    "Limiter",
    "Reservation",
    "Metrics",
]
