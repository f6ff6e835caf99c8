"""client.admin: the admin API (with the admin key): API keys and tenants, and any tenant's
usage and invoices."""

from __future__ import annotations

from datetime import date
from typing import Any, Literal, cast

from .._base_client import Call, json_as
from .._models import NOT_GIVEN, NotGiven, body_of
from .._pagination import AsyncPaginator, Page
from .._resource import AsyncAPIResource, SyncAPIResource
from ..types.admin import (
    ApiKey,
    CreatedKey,
    KeyCreateParams,
    KeyUpdateParams,
    Tenant,
    TenantObjectsDeleted,
    TenantSummary,
)
from ..types.admin import Operations as OperationsReport
from ..types.invoices import Invoice, InvoiceSummary
from ..types.usage import UsageReport
from .billing import GroupBy, export_call, invoice_call, invoices_path, usage_call

__all__ = [
    "Admin",
    "AsyncAdmin",
    "Keys",
    "AsyncKeys",
    "Tenants",
    "AsyncTenants",
    "Operations",
    "AsyncOperations",
]

ADMIN: dict[str, Any] = {"admin": True, "root": True}


def _admin(method: str, path: str, parse: Any, body: Any = None) -> Call:
    return Call(method, "/admin" + path, parse=json_as(parse), json=body, **ADMIN)


def _create(plan: str, name: str | None, tenant: str | None) -> Call:
    body = body_of(KeyCreateParams, plan=plan, name=name, tenant=tenant)
    return _admin("POST", "/keys", CreatedKey, body)


def _update(
    key_id: str, plan: str | None, name: str | None, sample_traffic: bool | None | NotGiven
) -> Call:
    body = body_of(KeyUpdateParams, plan=plan, name=name)
    if sample_traffic is not NOT_GIVEN:
        body["sample_traffic"] = sample_traffic  # None is sent: follow the plan's setting
    return _admin("PATCH", f"/keys/{key_id}", ApiKey, body)


class Keys(SyncAPIResource):
    """client.admin.keys"""

    def create(
        self, *, plan: str, name: str | None = None, tenant: str | None = None
    ) -> CreatedKey:
        """A new API key on a plan, of a new tenant or of `tenant`; `.key` is shown once."""
        return cast("CreatedKey", self._send(_create(plan, name, tenant)))

    def list(self) -> Page[ApiKey]:
        """Every key's record (ids, plans, states; never the keys)."""
        return self._list("/admin/keys", ApiKey, **ADMIN)

    def retrieve(self, key_id: str) -> ApiKey:
        """One key's record."""
        return cast("ApiKey", self._send(_admin("GET", f"/keys/{key_id}", ApiKey)))

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key (refused at once everywhere; the prompts kept of it are deleted)."""
        return cast("ApiKey", self._send(_admin("DELETE", f"/keys/{key_id}", ApiKey)))

    def update(
        self,
        key_id: str,
        *,
        plan: str | None = None,
        name: str | None = None,
        sample_traffic: bool | None | NotGiven = NOT_GIVEN,
    ) -> ApiKey:
        """Move a key to another plan, give it a new label, and/or opt it in (True) or out
        (False, deleting what was kept) of traffic sampling, or back to its plan's setting
        (None)."""
        return cast("ApiKey", self._send(_update(key_id, plan, name, sample_traffic)))

    def set_plan(self, key_id: str, plan: str) -> ApiKey:
        """Move a key to another plan."""
        return self.update(key_id, plan=plan)


class AsyncKeys(AsyncAPIResource):
    """client.admin.keys (async)"""

    async def create(
        self, *, plan: str, name: str | None = None, tenant: str | None = None
    ) -> CreatedKey:
        """A new API key (see Keys.create)."""
        return cast("CreatedKey", await self._send(_create(plan, name, tenant)))

    def list(self) -> AsyncPaginator[ApiKey]:
        """Every key's record."""
        return self._list("/admin/keys", ApiKey, **ADMIN)

    async def retrieve(self, key_id: str) -> ApiKey:
        """One key's record."""
        return cast("ApiKey", await self._send(_admin("GET", f"/keys/{key_id}", ApiKey)))

    async def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key."""
        return cast("ApiKey", await self._send(_admin("DELETE", f"/keys/{key_id}", ApiKey)))

    async def update(
        self,
        key_id: str,
        *,
        plan: str | None = None,
        name: str | None = None,
        sample_traffic: bool | None | NotGiven = NOT_GIVEN,
    ) -> ApiKey:
        """A new plan, label and/or traffic sampling (see Keys.update)."""
        return cast("ApiKey", await self._send(_update(key_id, plan, name, sample_traffic)))

    async def set_plan(self, key_id: str, plan: str) -> ApiKey:
        """Move a key to another plan."""
        return await self.update(key_id, plan=plan)


class Tenants(SyncAPIResource):
    """client.admin.tenants"""

    def list(self) -> Page[TenantSummary]:
        """Every tenant: its keys, active keys, plans and this month's invoice total so far."""
        return self._list("/admin/tenants", TenantSummary, **ADMIN)

    def retrieve(self, tenant: str) -> Tenant:
        """A tenant's keys and stored objects (ids, never content)."""
        return cast("Tenant", self._send(_admin("GET", f"/tenants/{tenant}", Tenant)))

    def delete_objects(self, tenant: str) -> TenantObjectsDeleted:
        """Delete every stored response and conversation of a tenant (its keys stay)."""
        call = _admin("DELETE", f"/tenants/{tenant}/objects", TenantObjectsDeleted)
        return cast("TenantObjectsDeleted", self._send(call))

    def usage(
        self,
        tenant: str,
        *,
        start: date | str | None = None,
        end: date | str | None = None,
        group_by: GroupBy | None = None,
        key_id: str | None = None,
    ) -> UsageReport:
        """A tenant's usage (as client.usage.retrieve for one's own)."""
        return cast("UsageReport", self._send(usage_call(tenant, start, end, group_by, key_id)))

    def invoices(self, tenant: str) -> Page[InvoiceSummary]:
        """A tenant's months with usage."""
        path, flags = invoices_path(tenant)
        return self._list(path, InvoiceSummary, **flags)

    def invoice(self, tenant: str, month: str) -> Invoice:
        """A tenant's invoice of a month."""
        return cast("Invoice", self._send(invoice_call(tenant, month)))

    def export(self, tenant: str, month: str, *, format: Literal["jsonl", "csv"] = "jsonl") -> str:
        """A tenant's usage events of a month."""
        return cast("str", self._send(export_call(tenant, month, format)))


class AsyncTenants(AsyncAPIResource):
    """client.admin.tenants (async)"""

    def list(self) -> AsyncPaginator[TenantSummary]:
        """Every tenant (see Tenants.list)."""
        return self._list("/admin/tenants", TenantSummary, **ADMIN)

    async def retrieve(self, tenant: str) -> Tenant:
        """A tenant's keys and stored objects."""
        return cast("Tenant", await self._send(_admin("GET", f"/tenants/{tenant}", Tenant)))

    async def delete_objects(self, tenant: str) -> TenantObjectsDeleted:
        """Delete every stored response and conversation of a tenant."""
        call = _admin("DELETE", f"/tenants/{tenant}/objects", TenantObjectsDeleted)
        return cast("TenantObjectsDeleted", await self._send(call))

    async def usage(
        self,
        tenant: str,
        *,
        start: date | str | None = None,
        end: date | str | None = None,
        group_by: GroupBy | None = None,
        key_id: str | None = None,
    ) -> UsageReport:
        """A tenant's usage."""
        return cast(
            "UsageReport", await self._send(usage_call(tenant, start, end, group_by, key_id))
        )

    def invoices(self, tenant: str) -> AsyncPaginator[InvoiceSummary]:
        """A tenant's months with usage."""
        path, flags = invoices_path(tenant)
        return self._list(path, InvoiceSummary, **flags)

    async def invoice(self, tenant: str, month: str) -> Invoice:
        """A tenant's invoice of a month."""
        return cast("Invoice", await self._send(invoice_call(tenant, month)))

    async def export(
        self, tenant: str, month: str, *, format: Literal["jsonl", "csv"] = "jsonl"
    ) -> str:
        """A tenant's usage events of a month."""
        return cast("str", await self._send(export_call(tenant, month, format)))


class Operations(SyncAPIResource):
    """client.admin.operations"""

    def retrieve(self) -> OperationsReport:
        """Per served tier, live: state, requests, sheds, endings, time to first token and per
        output token, queue wait, tokens; and the collapse alerts."""
        return cast("OperationsReport", self._send(_admin("GET", "/operations", OperationsReport)))


class AsyncOperations(AsyncAPIResource):
    """client.admin.operations (async)"""

    async def retrieve(self) -> OperationsReport:
        """Per served tier, live figures, and the collapse alerts (see Operations.retrieve)."""
        return cast(
            "OperationsReport", await self._send(_admin("GET", "/operations", OperationsReport))
        )


class Admin(SyncAPIResource):
    """client.admin: calls made with the admin key."""

    def __init__(self, client: Any):
        super().__init__(client)
        self.keys = Keys(client)
        self.tenants = Tenants(client)
        self.operations = Operations(client)


class AsyncAdmin(AsyncAPIResource):
    """client.admin (async)"""

    def __init__(self, client: Any):
        super().__init__(client)
        self.keys = AsyncKeys(client)
        self.tenants = AsyncTenants(client)
        self.operations = AsyncOperations(client)
