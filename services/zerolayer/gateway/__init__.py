"""The gateway: OpenAI-compatible HTTP API, API keys, routing to tier replicas."""

from zerolayer.gateway.api import Backend, create_app
from zerolayer.gateway.catalog import Catalog, tier_key

__all__ = ["Backend", "create_app", "Catalog", "tier_key"]
