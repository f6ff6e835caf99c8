"""One completion request through the gateway: tokenfix, context check, length-aware routing,
admission control, per-key limits, the tier replica, and settlement of what was delivered."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi.responses import JSONResponse, Response, StreamingResponse

from zerolayer.config import PlatformConfig
from zerolayer.errors import ContextLengthExceeded, Overloaded, RateLimited, raise_if_error
from zerolayer.gateway.admission import Admission
from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.limits import Limiter, Reservation
from zerolayer.gateway.metrics import Metrics
from zerolayer.gateway.schemas import ChatCompletionRequest, CompletionRequest
from zerolayer.gateway.sse import Shape, sse_stream, usage
from zerolayer.gateway.summarize import SUMMARY_NOTE, SummaryJob, plan_summary
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
            self.metrics.inc("shed", target, record.plan)
            raise
        price = plan.prices[target.partition(":")[2]]
        reservation = await self.limit(
            record, rid, prompt + max_tokens, price.micros(prompt, max_tokens)
        )
        self.metrics.inc("requests", target, record.plan)
        return reservation

    async def limit(self, record: ApiKeyRecord, rid: str, tokens: int, micros: int) -> Reservation:
        """The key's plan limits alone (also /v1/chunks); a refusal is counted in metrics."""
        try:
            return await self.limiter.admit(
                record.key_id, record.plan, self.config.plans[record.plan], rid, tokens, micros
            )
        except RateLimited as exc:
            self.metrics.inc("limited", exc.code or "", record.plan)
            raise

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
        max_len = self.config.models[model].max_model_len
        default = self.config.gateway.default_max_tokens
        job: SummaryJob | None = None
        try:
            max_tokens = completion_budget(max_len, len(ids), req["max_tokens"], default)
        except ContextLengthExceeded as overflow:
            if not (isinstance(body, ChatCompletionRequest) and body.long_prompt == "summarize"):
                raise
            job = await plan_summary(
                self.backend,
                model,
                self.route(target, 0),
                rid,
                req["messages"],
                max_len,
                self.config.chunker.chunk_tokens,
                self.config.chunker.summary_tokens,
                overflow,
            )
        if job is None:
            reservation = await self.admit(record, target, rid, len(ids), max_tokens)
        else:
            # one admission for the whole job: every map call plus the final answer
            prompt, completion = job.reserve()
            asked = req["max_tokens"] or default
            reservation = await self.admit(
                record, target, rid, prompt + max_len, completion + asked
            )
            try:
                ids, max_tokens = await self._summarised(job, model, req, max_len, default)
            except BaseException:
                self.settle(record, target, reservation, job.prompt_used, job.completion_used)
                raise
        req.pop("messages", None)
        req.pop("prompt", None)
        req.update(prompt_token_ids=ids, max_tokens=max_tokens)
        shape = Shape(chat, rid, target)  # the tier that answered, as OpenAI names the version
        dest = self.route(target, len(ids))
        call = _Call(record, target, dest, reservation, job)
        if not body.stream:
            return await self._complete(call, req, shape, headers)
        return await self._stream(call, req, shape, headers, body.include_usage())

    async def _summarised(
        self, job: SummaryJob, model: str, req: dict[str, Any], max_len: int, default: int
    ) -> tuple[list[int], int]:
        """Run the map-reduce; the prompt ids with the summary in place, and max_tokens."""
        summary = await job.run()
        messages = [dict(m) for m in req["messages"]]
        messages[job.index]["content"] = SUMMARY_NOTE + summary
        prep = await self.backend.prepare(model, {**req, "messages": messages})
        raise_if_error(prep)
        ids = prep["prompt_token_ids"]
        return ids, completion_budget(max_len, len(ids), req["max_tokens"], default)

    async def _complete(
        self, call: _Call, req: dict[str, Any], shape: Shape, headers: dict[str, str]
    ) -> Response:
        t0 = time.monotonic()
        res: dict[str, Any] = {}
        try:
            res = await self.backend.complete(call.dest, req)
        finally:
            self.finish(call, res.get("prompt_tokens", 0), res.get("completion_tokens", 0))
        self.admission.record(call.target, time.monotonic() - t0 - res.get("decode_s", 0.0))
        if res["event"] == "error":
            return JSONResponse(res["body"], status_code=res["status"], headers=headers)
        reply = shape.final(
            res["text"],
            res["finish_reason"],
            call.usage(res["prompt_tokens"], res["completion_tokens"]),
        )
        if call.job is not None:
            reply["zerolayer_summary"] = call.job.usage()
        return JSONResponse(reply, headers=headers)

    async def _stream(
        self,
        call: _Call,
        req: dict[str, Any],
        shape: Shape,
        headers: dict[str, str],
        include_usage: bool,
    ) -> Response:
        waiting = self.admission.waiting(call.target)
        events = self.backend.stream(call.dest, req)
        try:
            first = await anext(events)
        except BaseException:
            self.admission.first_token(call.target, waiting)
            self.finish(call, 0, 0)
            raise
        if first["event"] == "error":
            self.admission.first_token(call.target, waiting)
            self.finish(call, 0, 0)
            await events.aclose()  # type: ignore[attr-defined]
            return JSONResponse(first["body"], status_code=first["status"], headers=headers)

        def on_token() -> None:
            self.admission.first_token(call.target, waiting)

        def on_end(prompt: int, completion: int) -> None:
            self.admission.first_token(call.target, waiting)
            self.finish(call, prompt, completion)

        return StreamingResponse(
            sse_stream(shape, events, first, include_usage, on_token, on_end, call.usage),
            media_type="text/event-stream",
            headers={**headers, "cache-control": "no-cache"},
        )

    def finish(self, call: _Call, prompt: int, completion: int) -> None:
        """Settle a request (and its map-reduce calls) to what was used."""
        self.settle(call.record, call.target, call.reservation, *call.billed(prompt, completion))


@dataclass
class _Call:
    """A request on its way to a tier, with what settlement needs."""

    record: ApiKeyRecord
    target: str
    dest: str
    reservation: Reservation
    job: SummaryJob | None

    def billed(self, prompt: int, completion: int) -> tuple[int, int]:
        """The request's tokens plus those of its map-reduce calls, if any."""
        if self.job is None:
            return prompt, completion
        return prompt + self.job.prompt_used, completion + self.job.completion_used

    def usage(self, prompt: int, completion: int) -> dict[str, int]:
        """Usage as the reply reports it: billed tokens, map-reduce calls included."""
        return usage(*self.billed(prompt, completion))
