"""client.models: every model and tier with its tier card and state."""

from __future__ import annotations

from .._pagination import AsyncPaginator, Page
from .._resource import AsyncAPIResource, SyncAPIResource
from ..types.models import Model

__all__ = ["Models", "AsyncModels"]


class Models(SyncAPIResource):
    """GET /v1/models."""

    def list(self) -> Page[Model]:
        """Every model (bare ids: the plan's default tier) and tier, with its status
        (ready, starting, building, failed) and tier card."""
        return self._list("/models", Model)


class AsyncModels(AsyncAPIResource):
    """GET /v1/models (async)."""

    def list(self) -> AsyncPaginator[Model]:
        """Every model and tier (see Models.list)."""
        return self._list("/models", Model)
