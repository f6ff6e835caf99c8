"""client.account (the calling key's record, plan and month's spend), client.requests (the
request log of the key's tenant) and client.keys (the tenant's own keys: list, relabel,
revoke; new keys and plans come from the operator, client.admin.keys)."""

from __future__ import annotations

from typing import Any, cast

import httpx

from .._base_client import Call, json_as
from .._models import body_of
from .._pagination import AsyncPaginator, Page
from .._resource import AsyncAPIResource, SyncAPIResource
from ..types.account import Account, KeyRenameParams, RequestLogEntry
from ..types.admin import ApiKey

__all__ = [
    "Accounts",
    "AsyncAccounts",
    "Requests",
    "AsyncRequests",
    "OwnKeys",
    "AsyncOwnKeys",
]

_LOG = {"cursor_param": "cursor"}


def _log_params(days: int | None, limit: int | None, key_id: str | None) -> dict[str, Any]:
    return {"days": days, "limit": limit, "key_id": key_id}


def _csv_call(days: int | None, key_id: str | None) -> Call:
    def text(response: httpx.Response) -> str:
        return response.text

    params = {"days": days, "key_id": key_id, "format": "csv"}
    return Call("GET", "/requests", parse=text, params=params, accept="text/csv")


def _rename(key_id: str, name: str) -> Call:
    body = body_of(KeyRenameParams, name=name)
    return Call("PATCH", f"/keys/{key_id}", parse=json_as(ApiKey), json=body)


def _revoke(key_id: str) -> Call:
    return Call("DELETE", f"/keys/{key_id}", parse=json_as(ApiKey))


_ACCOUNT = Call("GET", "/account", parse=json_as(Account))


class Accounts(SyncAPIResource):
    """client.account"""

    def retrieve(self) -> Account:
        """The calling key's record, its plan (tiers, prices, limits) and this month's spend
        against its budget."""
        return cast("Account", self._send(_ACCOUNT))


class AsyncAccounts(AsyncAPIResource):
    """client.account (async)"""

    async def retrieve(self) -> Account:
        """The calling key's record, plan and month's spend (see Accounts.retrieve)."""
        return cast("Account", await self._send(_ACCOUNT))


class Requests(SyncAPIResource):
    """client.requests"""

    def list(
        self, *, days: int | None = None, limit: int | None = None, key_id: str | None = None
    ) -> Page[RequestLogEntry]:
        """The tenant's requests of the last `days` (default 7, up to 90), newest first,
        `limit` to a page (default 50); iterating goes on through the following pages."""
        return self._list("/requests", RequestLogEntry, _log_params(days, limit, key_id), **_LOG)

    def export(self, *, days: int | None = None, key_id: str | None = None) -> str:
        """The same requests as CSV text (up to 100,000 rows)."""
        return cast("str", self._send(_csv_call(days, key_id)))


class AsyncRequests(AsyncAPIResource):
    """client.requests (async)"""

    def list(
        self, *, days: int | None = None, limit: int | None = None, key_id: str | None = None
    ) -> AsyncPaginator[RequestLogEntry]:
        """The tenant's recent requests, newest first (see Requests.list)."""
        return self._list("/requests", RequestLogEntry, _log_params(days, limit, key_id), **_LOG)

    async def export(self, *, days: int | None = None, key_id: str | None = None) -> str:
        """The same requests as CSV text."""
        return cast("str", await self._send(_csv_call(days, key_id)))


class OwnKeys(SyncAPIResource):
    """client.keys"""

    def list(self) -> Page[ApiKey]:
        """The keys of the calling key's tenant, oldest first (`current`: the calling one)."""
        return self._list("/keys", ApiKey)

    def update(self, key_id: str, *, name: str) -> ApiKey:
        """A new label for one of the tenant's keys."""
        return cast("ApiKey", self._send(_rename(key_id, name)))

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke one of the tenant's keys (refused from its next request)."""
        return cast("ApiKey", self._send(_revoke(key_id)))


class AsyncOwnKeys(AsyncAPIResource):
    """client.keys (async)"""

    def list(self) -> AsyncPaginator[ApiKey]:
        """The keys of the calling key's tenant."""
        return self._list("/keys", ApiKey)

    async def update(self, key_id: str, *, name: str) -> ApiKey:
        """A new label for one of the tenant's keys."""
        return cast("ApiKey", await self._send(_rename(key_id, name)))

    async def revoke(self, key_id: str) -> ApiKey:
        """Revoke one of the tenant's keys."""
        return cast("ApiKey", await self._send(_revoke(key_id)))
