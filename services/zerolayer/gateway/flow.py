"""One completion request through the gateway: tokenfix, context check, length-aware routing,
admission control, per-key limits, the tier replica, and settlement of what was delivered."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from fastapi.responses import JSONResponse, Response, StreamingResponse

from zerolayer.config import PlatformConfig
from zerolayer.errors import Overloaded, RateLimited
from zerolayer.gateway.admission import Admission
from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.limits import Limiter, Reservation
from zerolayer.gateway.metrics import Metrics
from zerolayer.gateway.schemas import ChatCompletionRequest, CompletionRequest
from zerolayer.gateway.sse import Shape, sse_stream, usage
from zerolayer.replicas.core import completion_budget
from zerolayer.store.keys import ApiKeyRecord

if TYPE_CHECKING:
    from zerolayer.gateway.api import Backend

__all__ = ["SHORT", "Flow"]

log = logging.getLogger(__name__)

SHORT = "#short"  # suffix of a tier's short-request replica group in backend targets


class Flow:
    """Runs completion requests; one per gateway replica."""

    def __init__(
        self,
        backend: Backend,
        config: PlatformConfig,
        catalog: Catalog,
        limiter: Limiter,
        metrics: Metrics,
    ):
        self.backend = backend
        self.config = config
        self.catalog = catalog
        self.limiter = limiter
        self.metrics = metrics
        g = config.gateway
        self.admission = Admission(
            g.queue_wait_threshold_ms,
            g.queue_wait_window_s,
            [p.priority for p in config.plans.values()],
        )
        self._background: set[asyncio.Task[Any]] = set()

    def later(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a coroutine to its end even if the request that started it is cancelled."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background step failed", exc_info=task.exception())

    async def drain(self) -> None:
        """Wait for pending settlements (tests, shutdown)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    def route(self, target: str, prompt_tokens: int) -> str:
        """The backend target: the tier's short-request group for short prompts, if it has one."""
        model, _, tier = target.partition(":")
        short = self.config.models[model].tiers[tier].short_requests
        if short is not None and prompt_tokens < short.max_prompt_tokens:
            return target + SHORT
        return target

    async def admit(
        self, record: ApiKeyRecord, target: str, rid: str, prompt: int, max_tokens: int
    ) -> Reservation:
        """Admission control, then the key's limits; refusals are counted in metrics."""
        plan = self.config.plans[record.plan]
        try:
            self.admission.check(target, plan.priority)
        except Overloaded:
            await self.metrics.inc("shed", target, record.plan)
            raise
        price = plan.prices[target.partition(":")[2]]
        try:
            reservation = await self.limiter.admit(
                record.key_id,
                record.plan,
                plan,
                rid,
                prompt + max_tokens,
                price.micros(prompt, max_tokens),
            )
        except RateLimited as exc:
            await self.metrics.inc("limited", exc.code or "", record.plan)
            raise
        await self.metrics.inc("requests", target, record.plan)
        return reservation

    def settle(
        self, record: ApiKeyRecord, target: str, r: Reservation, prompt: int, completion: int
    ) -> None:
        """Correct the reservation to the tokens delivered (in the background: the request may be
        in the middle of being cancelled)."""
        price = self.config.plans[record.plan].prices[target.partition(":")[2]]
        self.later(self.limiter.settle(r, prompt + completion, price.micros(prompt, completion)))

    async def __call__(
        self, body: ChatCompletionRequest | CompletionRequest, record: ApiKeyRecord
    ) -> Response:
        chat = isinstance(body, ChatCompletionRequest)
        target = self.catalog.resolve(body.model, record.plan)
        model = target.partition(":")[0]
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        headers = {"x-request-id": rid}
        req: dict[str, Any] = {"request_id": rid, **body.sampling()}
        if isinstance(body, ChatCompletionRequest):
            req["messages"] = [{"role": m.role, "content": m.text()} for m in body.messages]
        else:
            req["prompt"] = body.prompt
        prep = await self.backend.prepare(model, req)
        if prep["event"] == "error":
            return JSONResponse(prep["body"], status_code=prep["status"], headers=headers)
        ids = prep["prompt_token_ids"]
        max_tokens = completion_budget(
            self.config.models[model].max_model_len,
            len(ids),
            req["max_tokens"],
            self.config.gateway.default_max_tokens,
        )
        req.pop("messages", None)
        req.pop("prompt", None)
        req.update(prompt_token_ids=ids, max_tokens=max_tokens)
        reservation = await self.admit(record, target, rid, len(ids), max_tokens)
        shape = Shape(chat, rid, target)  # the tier that answered, as OpenAI names the version
        dest = self.route(target, len(ids))
        if not body.stream:
            return await self._complete(record, target, dest, req, reservation, shape, headers)
        return await self._stream(
            record, target, dest, req, reservation, shape, headers, body.include_usage()
        )

    async def _complete(
        self,
        record: ApiKeyRecord,
        target: str,
        dest: str,
        req: dict[str, Any],
        reservation: Reservation,
        shape: Shape,
        headers: dict[str, str],
    ) -> Response:
        t0 = time.monotonic()
        res: dict[str, Any] = {}
        try:
            res = await self.backend.complete(dest, req)
        finally:
            self.settle(
                record,
                target,
                reservation,
                res.get("prompt_tokens", 0),
                res.get("completion_tokens", 0),
            )
        self.admission.record(target, time.monotonic() - t0 - res.get("decode_s", 0.0))
        if res["event"] == "error":
            return JSONResponse(res["body"], status_code=res["status"], headers=headers)
        return JSONResponse(
            shape.final(
                res["text"],
                res["finish_reason"],
                usage(res["prompt_tokens"], res["completion_tokens"]),
            ),
            headers=headers,
        )

    async def _stream(
        self,
        record: ApiKeyRecord,
        target: str,
        dest: str,
        req: dict[str, Any],
        reservation: Reservation,
        shape: Shape,
        headers: dict[str, str],
        include_usage: bool,
    ) -> Response:
        waiting = self.admission.waiting(target)
        events = self.backend.stream(dest, req)
        try:
            first = await anext(events)
        except BaseException:
            self.admission.first_token(target, waiting)
            self.settle(record, target, reservation, 0, 0)
            raise
        if first["event"] == "error":
            self.admission.first_token(target, waiting)
            self.settle(record, target, reservation, 0, 0)
            await events.aclose()  # type: ignore[attr-defined]
            return JSONResponse(first["body"], status_code=first["status"], headers=headers)

        def on_token() -> None:
            self.admission.first_token(target, waiting)

        def on_end(prompt: int, completion: int) -> None:
            self.admission.first_token(target, waiting)
            self.settle(record, target, reservation, prompt, completion)

        return StreamingResponse(
            sse_stream(shape, events, first, include_usage, on_token, on_end),
            media_type="text/event-stream",
            headers={**headers, "cache-control": "no-cache"},
        )
