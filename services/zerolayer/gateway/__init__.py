"""The gateway: OpenAI-compatible HTTP API, admin API, API keys, plan limits, admission control,
routing to tier replicas."""

from zerolayer.gateway.admission import Admission
from zerolayer.gateway.api import create_app
from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.limits import Limiter, Reservation
from zerolayer.gateway.metrics import Metrics
from zerolayer.gateway.parts import Backend, GatewayParts

__all__ = [
    "Admission",
    "Backend",
    "GatewayParts",
    "create_app",
    "Catalog",
    "Limiter",
    "Reservation",
    "Metrics",
]
