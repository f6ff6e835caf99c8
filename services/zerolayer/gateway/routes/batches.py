"""The Batch API under /v1/batches, as OpenAI's: create (from an uploaded batch file, for one of
the batch endpoints, window 24h), retrieve, list by cursor, cancel. The batch's file is checked
again when the batch is made: every line must name the batch's endpoint (a 400 naming the first
that does not); nothing is queued otherwise. The gateways' batch workers run it
(gateway/batches.py). Another tenant's batch or file is a 404."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from zerolayer.batches import BatchStore, NotCancellable
from zerolayer.config import PlanConfig, usd_text
from zerolayer.errors import InvalidRequest, RateLimited
from zerolayer.files import check_batch_lines
from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.deps import CurrentKey, parts_of
from zerolayer.gateway.http import found
from zerolayer.gateway.limits import Limiter, month_of
from zerolayer.gateway.replies import BatchList, BatchObject, json_reply
from zerolayer.gateway.routes.files import FilesDep
from zerolayer.store.keys import ApiKeyRecord

__all__ = ["router"]

router = APIRouter(prefix="/v1/batches", route_class=BodyRoute)


class CreateBatchRequest(BaseModel):
    """POST /v1/batches."""

    model_config = ConfigDict(extra="forbid")

    input_file_id: str = Field(description="An uploaded file of purpose batch")
    endpoint: Literal["/v1/chat/completions", "/v1/completions", "/v1/responses"] = Field(
        description="The endpoint every request of the file is sent to"
    )
    completion_window: Literal["24h"] = Field(description="The batch's window: 24h")
    metadata: dict[str, str] | None = Field(
        default=None, max_length=16, description="Up to 16 key-value pairs"
    )
    output_expires_after: dict[str, Any] | None = Field(
        default=None, description="Accepted; output files expire after 30 days"
    )


async def batches_of(request: Request) -> BatchStore:
    store = parts_of(request).batches
    if store is None:
        raise InvalidRequest("this gateway runs no batches")
    return store


BatchesDep = Annotated[BatchStore, Depends(batches_of)]


@router.post("", responses=json_reply(BatchObject))
async def create(
    request: Request,
    body: CreateBatchRequest,
    record: CurrentKey,
    store: BatchesDep,
    files: FilesDep,
) -> dict[str, Any]:
    """Make a batch of an uploaded file's requests; it starts `validating`."""
    parts = parts_of(request)
    cfg = parts.config
    owner = record.owner
    await _within_budget(parts.limiter, record, cfg.plans[record.plan])
    file = await found(files.get(owner, body.input_file_id))
    if file["purpose"] != "batch":
        raise InvalidRequest(
            f"the file {body.input_file_id} has purpose {file['purpose']!r}; a batch reads a "
            "file uploaded with purpose 'batch'",
            param="input_file_id",
        )
    data = await found(files.read(owner, body.input_file_id))
    lines = check_batch_lines(
        data.splitlines(), cfg.files.max_batch_lines, body.endpoint, "input_file_id"
    )
    return await store.create(
        owner,
        record.key_id,
        body.endpoint,
        body.input_file_id,
        body.metadata or {},
        lines.count,
        cfg.batches.window_s,
    )


async def _within_budget(limiter: Limiter, record: ApiKeyRecord, plan: PlanConfig) -> None:
    """429 when the key's month is spent already: none of the batch could run."""
    budget = plan.limits.budget_nanos
    if budget is None:
        return
    month = month_of(limiter.now())[0]
    spent = await limiter.spent(record.key_id, month)
    if spent >= budget:
        raise RateLimited(
            f"rate limit reached: monthly budget of plan {record.plan!r} (spent "
            f"${usd_text(spent)} of ${plan.limits.monthly_budget_usd}); no request of a batch "
            "could run this month",
            month_of(limiter.now())[1],
            code="monthly_budget",
        )


@router.get("", responses=json_reply(BatchList))
async def list_batches(
    record: CurrentKey,
    store: BatchesDep,
    limit: int = Query(default=20, ge=1, le=100),
    after: str | None = None,
) -> dict[str, Any]:
    """A page of the tenant's batches, newest first (by cursor: `after`)."""
    return await found(store.page(record.owner, limit, after))


@router.get("/{batch_id}", responses=json_reply(BatchObject))
async def retrieve(record: CurrentKey, store: BatchesDep, batch_id: str) -> dict[str, Any]:
    """A batch, with its status and request counts."""
    return await found(store.get(record.owner, batch_id))


@router.post("/{batch_id}/cancel", responses=json_reply(BatchObject))
async def cancel(record: CurrentKey, store: BatchesDep, batch_id: str) -> dict[str, Any]:
    """Stop a batch: `cancelling`, then `cancelled` with what ran (409 once it has ended or
    is being cancelled)."""
    try:
        return await found(store.cancel(record.owner, batch_id))
    except NotCancellable:
        got = await found(store.get(record.owner, batch_id))
        raise BatchNotCancellable(
            f"the batch {batch_id} is {got['status']}; only a validating or in-progress batch "
            "can be cancelled",
            param="batch_id",
        ) from None


class BatchNotCancellable(InvalidRequest):
    status_code = 409
    code = "batch_not_cancellable"
