"""One completion request through the gateway: tokenfix, context check, length-aware routing,
admission control, per-key limits, the tier replica, and settlement of what was delivered."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse

from zerolayer.config import PlatformConfig
from zerolayer.errors import APIError, ContextLengthExceeded, Overloaded, RateLimited
from zerolayer.gateway.admission import Admission
from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.limits import Limiter, Reservation
from zerolayer.gateway.metrics import Metrics
from zerolayer.gateway.parts import Backend, prompt_ids
from zerolayer.gateway.schemas import ChatCompletionRequest, CompletionRequest
from zerolayer.gateway.sse import Shape, sse_stream, usage
from zerolayer.gateway.summarize import SUMMARY_NOTE, SummaryJob, plan_summary
from zerolayer.protocol import Failed, PromptInput, SamplingSpec, Target
from zerolayer.store.keys import ApiKeyRecord

__all__ = ["Flow", "completion_budget"]

log = logging.getLogger(__name__)


def completion_budget(
    max_model_len: int, prompt_tokens: int, asked: int | None, default_max_tokens: int
) -> int:
    """max_tokens of a request, decided once, here: what it asked for, else the default within
    the context; raises ContextLengthExceeded (a 400 that states both numbers) when the prompt
    leaves no room."""
    room = max_model_len - prompt_tokens
    if room < 1 or (asked is not None and asked > room):
        raise ContextLengthExceeded(
            f"this model's context is {max_model_len} tokens; the prompt has {prompt_tokens} "
            f"tokens and max_tokens asks for {asked if asked is not None else 1} more",
            param="max_tokens" if asked is not None and room >= 1 else "messages",
        )
    return asked if asked is not None else min(default_max_tokens, room)


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

    def route(self, target: Target, prompt_tokens: int) -> Target:
        """The backend target: the tier's short-request group for short prompts, if it has one."""
        short = self.config.models[target.model].tiers[target.tier].short_requests
        return target.group(short is not None and prompt_tokens < short.max_prompt_tokens)

    async def admit(
        self, record: ApiKeyRecord, target: Target, rid: str, prompt: int, max_tokens: int
    ) -> Reservation:
        """Admission control, then the key's limits; refusals are counted in metrics."""
        plan = self.config.plans[record.plan]
        try:
            self.admission.check(str(target), plan.priority)
        except Overloaded:
            self.metrics.inc("shed", str(target), record.plan)
            raise
        price = plan.prices[target.tier]
        reservation = await self.limit(
            record, rid, prompt + max_tokens, price.micros(prompt, max_tokens)
        )
        self.metrics.inc("requests", str(target), record.plan)
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
        self, record: ApiKeyRecord, target: Target, r: Reservation, prompt: int, completion: int
    ) -> None:
        """Correct the reservation to the tokens delivered (in the background: the request may be
        in the middle of being cancelled)."""
        price = self.config.plans[record.plan].prices[target.tier]
        self.later(self.limiter.settle(r, prompt + completion, price.micros(prompt, completion)))

    async def __call__(
        self, body: ChatCompletionRequest | CompletionRequest, record: ApiKeyRecord
    ) -> Response:
        chat = isinstance(body, ChatCompletionRequest)
        target = self.catalog.resolve(body.model, record.plan)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        try:
            return await self._run(body, record, target, rid)
        except APIError as exc:  # the app's handler answers it, with the request's id
            exc.request_id = rid
            raise

    async def _run(
        self,
        body: ChatCompletionRequest | CompletionRequest,
        record: ApiKeyRecord,
        target: Target,
        rid: str,
    ) -> Response:
        chat = isinstance(body, ChatCompletionRequest)
        headers = {"x-request-id": rid}
        sampling = body.sampling()
        if isinstance(body, ChatCompletionRequest):
            messages = [{"role": m.role, "content": m.text()} for m in body.messages]
            prompt = PromptInput(messages=messages)
        else:
            prompt = PromptInput(prompt=body.prompt)
        ids = await prompt_ids(self.backend, target.model, prompt)
        max_len = self.config.models[target.model].max_model_len
        default = self.config.gateway.default_max_tokens
        asked = sampling["max_tokens"]
        job: SummaryJob | None = None
        try:
            max_tokens = completion_budget(max_len, len(ids), asked, default)
        except ContextLengthExceeded as overflow:
            if not (isinstance(body, ChatCompletionRequest) and body.long_prompt == "summarize"):
                raise
            job = await plan_summary(
                self.backend,
                target.model,
                self.route(target, 0),
                rid,
                prompt.messages or [],
                max_len,
                self.config.chunker.chunk_tokens,
                self.config.chunker.summary_tokens,
                overflow,
            )
        if job is None:
            reservation = await self.admit(record, target, rid, len(ids), max_tokens)
        else:
            # one admission for the whole job: every map call plus the final answer
            reserve_prompt, reserve_completion = job.reserve()
            reservation = await self.admit(
                record,
                target,
                rid,
                reserve_prompt + max_len,
                reserve_completion + (asked or default),
            )
            try:
                ids = await self._summarised(job, target.model, prompt)
                max_tokens = completion_budget(max_len, len(ids), asked, default)
            except BaseException:
                self.settle(record, target, reservation, job.prompt_used, job.completion_used)
                raise
        spec = SamplingSpec(
            request_id=rid,
            prompt_token_ids=ids,
            max_tokens=max_tokens,
            temperature=sampling["temperature"],
            top_p=sampling["top_p"],
            seed=sampling["seed"],
            stop=list(sampling["stop"] or []),
        )
        shape = Shape(chat, rid, str(target))  # the tier that answered, as OpenAI names it
        call = _Call(record, target, self.route(target, len(ids)), reservation, job)
        if not body.stream:
            return await self._complete(call, spec, shape, headers)
        return await self._stream(call, spec, shape, headers, body.include_usage())

    async def _summarised(self, job: SummaryJob, model: str, prompt: PromptInput) -> list[int]:
        """Run the map-reduce; the prompt ids with the summary in place."""
        summary = await job.run()
        messages = [dict(m) for m in prompt.messages or []]
        messages[job.index]["content"] = SUMMARY_NOTE + summary
        return await prompt_ids(self.backend, model, PromptInput(messages=messages))

    async def _complete(
        self, call: _Call, spec: SamplingSpec, shape: Shape, headers: dict[str, str]
    ) -> Response:
        t0 = time.monotonic()
        res = None
        try:
            res = await self.backend.complete(call.dest, spec)
        finally:
            used = (res.prompt_tokens, res.completion_tokens) if res is not None else (0, 0)
            self.finish(call, *used)
        if isinstance(res, Failed):
            self.admission.record(str(call.target), time.monotonic() - t0)
            res.raise_()
        self.admission.record(str(call.target), time.monotonic() - t0 - res.decode_s)
        reply = shape.final(
            res.text, res.finish_reason, call.usage(res.prompt_tokens, res.completion_tokens)
        )
        if call.job is not None:
            reply["zerolayer_summary"] = call.job.usage()
        return JSONResponse(reply, headers=headers)

    async def _stream(
        self,
        call: _Call,
        spec: SamplingSpec,
        shape: Shape,
        headers: dict[str, str],
        include_usage: bool,
    ) -> Response:
        tier = str(call.target)
        waiting = self.admission.waiting(tier)
        events = self.backend.stream(call.dest, spec)
        try:
            first = await anext(events)
        except BaseException:
            self.admission.first_token(tier, waiting)
            self.finish(call, 0, 0)
            raise
        if isinstance(first, Failed):
            self.admission.first_token(tier, waiting)
            self.finish(call, 0, 0)
            await events.aclose()  # type: ignore[attr-defined]
            first.raise_()

        def on_token() -> None:
            self.admission.first_token(tier, waiting)

        def on_end(prompt: int, completion: int) -> None:
            self.admission.first_token(tier, waiting)
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
    target: Target
    dest: Target
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
