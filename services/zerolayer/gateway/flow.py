"""The request path of a completion, with no HTTP in it: the tier (model id and plan),
admission control, tokens and the completion budget (or a map-reduce summary of a long prompt),
length-aware routing and dispatch to the tier replica, answering with protocol values (the
whole End, or the opened stream). Its Meter (zerolayer.gateway.meter) counts the request
against the key's limits and settles what was delivered; the routes turn the answer into HTTP
(zerolayer.gateway.routes.completions), and the Responses API adapts the same steps."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from redis.exceptions import RedisError

from zerolayer.config import PlatformConfig
from zerolayer.errors import (
    APIError,
    ContextLengthExceeded,
    EngineError,
    Overloaded,
    RateLimited,
    ShuttingDown,
    TierUnavailable,
)
from zerolayer.gateway.admission import Admission
from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.meter import Call, Meter, status_of
from zerolayer.gateway.parts import Backend, prompt_ids
from zerolayer.gateway.schemas import ChatCompletionRequest, CompletionRequest
from zerolayer.gateway.summarize import SUMMARY_NOTE, SummaryJob, plan_summary
from zerolayer.protocol import End, Failed, PromptInput, ReplicaEvent, SamplingSpec, Start, Target
from zerolayer.store.keys import ApiKeyRecord
from zerolayer.store.tiers import AsyncTierBoard, TierState
from zerolayer.store.traffic import AsyncTrafficStore, prompt_text

__all__ = ["Answered", "Flow", "Opened", "completion_budget"]

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
    """Runs completion requests; one per gateway replica: the tier (model id and plan), admission
    control, tokens and the completion budget, dispatch to the tier; its Meter counts each
    request against the key's limits and settles it with its usage event."""

    def __init__(
        self,
        backend: Backend,
        config: PlatformConfig,
        catalog: Catalog,
        meter: Meter,
        tiers: AsyncTierBoard | None = None,
        traffic: AsyncTrafficStore | None = None,
    ):
        self.backend = backend
        self.traffic = traffic
        self.tiers = tiers
        self.config = config
        self.catalog = catalog
        self.meter = meter
        g = config.gateway
        self.admission = Admission(
            g.queue_wait_threshold_ms,
            g.queue_wait_window_s,
            [p.priority for p in config.plans.values()],
            min_samples=g.queue_wait_min_samples,
        )

    async def states(self) -> dict[str, TierState] | None:
        """The tier board (None when this gateway serves every tier as ready)."""
        return None if self.tiers is None else await self.tiers.states()

    def route(self, target: Target, prompt_tokens: int) -> Target:
        """The backend target: the tier's short-request group for short prompts, if it has one."""
        short = self.config.models[target.model].tiers[target.tier].short_requests
        return target.group(short is not None and prompt_tokens < short.max_prompt_tokens)

    def shed(self, record: ApiKeyRecord, target: Target) -> None:
        """Admission control for one call to a tier (a request, or a map call of one)."""
        try:
            self.admission.check(str(target), self.config.plans[record.plan].priority)
        except Overloaded:
            self.meter.metrics.inc("shed", str(target), record.plan)
            raise

    async def begin(self, record: ApiKeyRecord, model: str, rid: str, endpoint: str) -> Call:
        """A request's first steps: its tier (the model id and plan rules), admission control,
        the cheap limits. A refusal by the last two is recorded as a usage event."""
        started = time.time()
        target = self.catalog.resolve(model, record.plan, await self.states())
        try:
            self.shed(record, target)
            reservation = await self.meter.request(record, rid)
        except (Overloaded, ShuttingDown, RateLimited) as exc:
            self.meter.refused(record, target, rid, endpoint, exc, started)
            raise
        return Call(record, target, target, reservation, endpoint=endpoint, started=started)

    async def sized(self, call: Call, prompt_tokens: int, max_tokens: int) -> None:
        """The limits that need the request's size, then counted as a request of its tier."""
        price = self.config.plans[call.record.plan].prices[call.target.tier]
        call.tokens_counted = await self.meter.reserve(
            call.record,
            call.reservation,
            prompt_tokens + max_tokens,
            price.nanos(prompt_tokens, max_tokens),
        )
        self.meter.metrics.inc("requests", str(call.target), call.record.plan)

    async def __call__(
        self, body: ChatCompletionRequest | CompletionRequest, record: ApiKeyRecord
    ) -> Answered | Opened:
        """A chat or text completion through every step: its whole answer (Answered), or its
        stream opened on a replica (Opened). Protocol values only: the route makes the HTTP
        answer of either."""
        chat = isinstance(body, ChatCompletionRequest)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        endpoint = "chat.completions" if chat else "completions"
        try:
            call = await self.begin(record, body.model, rid, endpoint)
            try:
                return await self._run(body, call)
            except BaseException as exc:
                self.meter.finish(call, 0, 0, status_of(exc))  # a no-op once it was settled
                raise
        except APIError as exc:  # the app's handler answers it, with the request's id
            exc.request_id = rid
            raise

    async def _run(
        self, body: ChatCompletionRequest | CompletionRequest, call: Call
    ) -> Answered | Opened:
        target, rid = call.target, call.reservation.request_id
        sampling = body.sampling()
        if isinstance(body, ChatCompletionRequest):
            messages = [{"role": m.role, "content": m.text()} for m in body.messages]
            prompt = PromptInput(messages=messages)
        else:
            prompt = PromptInput(prompt=body.one_prompt())
        ids = await prompt_ids(self.backend, target.model, prompt)
        max_len = self.config.models[target.model].max_model_len
        default = self.config.gateway.default_max_tokens
        asked = sampling["max_tokens"]
        price = self.config.plans[call.record.plan].prices[target.tier]
        try:
            max_tokens = completion_budget(max_len, len(ids), asked, default)
        except ContextLengthExceeded as overflow:
            if not (isinstance(body, ChatCompletionRequest) and body.long_prompt == "summarize"):
                # the tokens were read: they count against the key's tokens per minute
                await self.meter.reserve(call.record, call.reservation, len(ids), 0)
                call.tokenized = len(ids)
                raise
            call.job = await plan_summary(
                self.backend,
                target.model,
                self.route(target, 0),
                rid,
                prompt.messages or [],
                max_len,
                self.config.chunker.chunk_tokens,
                self.config.chunker.summary_tokens,
                overflow,
                self.config.chunker.max_summary_chunks,
                lambda: self.shed(call.record, target),
            )
        if call.job is None:
            call.tokens_counted = await self.meter.reserve(
                call.record,
                call.reservation,
                len(ids) + max_tokens,
                price.nanos(len(ids), max_tokens),
            )
        else:
            # one reservation for the whole job: every map call plus the final answer, and
            # each map call counted as a request of the minute
            job = call.job
            reserve_prompt, reserve_completion = job.reserve()
            reserve_prompt, reserve_completion = (
                reserve_prompt + max_len,
                reserve_completion + (asked or default),
            )
            call.tokens_counted = await self.meter.reserve(
                call.record,
                call.reservation,
                reserve_prompt + reserve_completion,
                price.nanos(reserve_prompt, reserve_completion),
                extra=job.most_calls(),
            )
            ids = await self._summarised(job, target.model, prompt)
            max_tokens = completion_budget(max_len, len(ids), asked, default)
        self.meter.metrics.inc("requests", str(target), call.record.plan)
        self.sample(call, prompt)
        spec = SamplingSpec(
            request_id=rid,
            prompt_token_ids=ids,
            max_tokens=max_tokens,
            temperature=sampling["temperature"],
            top_p=sampling["top_p"],
            seed=sampling["seed"],
            stop=list(sampling["stop"] or []),
        )
        call.dest = self.route(target, len(ids))
        if not body.stream:
            return Answered(call, await self.completed(call, spec))
        return await self.opened(call, spec)

    def sample(self, call: Call, prompt: PromptInput) -> None:
        """Keep the prompt for recalibration, at the configured rate, if the key (else its plan)
        opted in; in the background, and a failure to keep it never fails the request."""
        record, target = call.record, call.target
        plan_default = self.config.plans[record.plan].sample_traffic
        ts = self.config.traffic_sampling
        if self.traffic is None or not record.samples(plan_default) or random.random() >= ts.rate:
            return
        if prompt.messages is None and not isinstance(prompt.prompt, str):
            return  # a prompt of token ids: no text to calibrate on
        kind = "text" if prompt.messages is None else "chat"
        text = prompt_text(prompt.messages, prompt.prompt, ts.max_chars)
        store = self.traffic

        async def keep() -> None:
            try:
                await store.keep(record.key_id, plan_default, target.model, target.tier, kind, text)
            except RedisError as exc:
                log.warning("a sampled prompt was not kept: %s", type(exc).__name__)

        self.meter.later(keep())

    async def _summarised(self, job: SummaryJob, model: str, prompt: PromptInput) -> list[int]:
        """Run the map-reduce; the prompt ids with the summary in place."""
        summary = await job.run()
        messages = [dict(m) for m in prompt.messages or []]
        messages[job.index]["content"] = SUMMARY_NOTE + summary
        return await prompt_ids(self.backend, model, PromptInput(messages=messages))

    async def completed(self, call: Call, spec: SamplingSpec) -> End:
        """Run a request whole on its tier; settled and measured when it returns (a failure
        raised as its APIError)."""
        res = None
        status = "client_disconnect"  # unless it returns or fails
        g = self.config.gateway
        limit_s = g.tier_wait_s + g.request_timeout_s
        try:
            res = await asyncio.wait_for(self.backend.complete(call.dest, spec), limit_s)
            status = "ok" if isinstance(res, End) else "engine_error"
        except Exception as exc:
            err = _replica_failure(call.target, exc, limit_s, g.tier_wait_s)
            status = status_of(err)
            if err is exc:
                raise
            raise err from exc
        finally:
            # a whole reply that failed or was abandoned delivered nothing: it costs nothing
            if isinstance(res, End):
                end = res
                self.meter.finish(
                    call, end.prompt_tokens, end.completion_tokens, status, end.cached_tokens
                )
            else:
                self.meter.finish(call, 0, 0, status)
        if isinstance(res, Failed):
            res.raise_()
        self.ended(call, res)
        return res

    async def opened(self, call: Call, spec: SamplingSpec) -> Opened:
        """Start a streamed request on its tier: its first event (Start) once a replica took
        it, the rest of its events, and the hooks its stream must call (first token, end)."""
        tier = str(call.target)
        waiting = self.admission.waiting(tier)
        events = self.backend.stream(call.dest, spec)
        wait_s = self.config.gateway.tier_wait_s
        try:
            # a replica answers Start as soon as it has the request: waiting longer means the
            # tier has no replica that can take it (starting, restarting, or all busy)
            first = await asyncio.wait_for(anext(events), wait_s)
        except BaseException as exc:
            self.admission.forget(tier, waiting)
            await events.aclose()
            err = _replica_failure(call.target, exc, wait_s, wait_s)
            if err is exc:
                raise
            raise err from exc
        if not isinstance(first, Start):  # a replica answers Start first, or Failed
            self.admission.forget(tier, waiting)
            await events.aclose()
            if isinstance(first, Failed):
                first.raise_()
            raise EngineError(f"the tier {call.target} began its answer without a Start")

        def on_token() -> None:
            self.admission.forget(tier, waiting)

        def on_end(prompt: int, completion: int, end: End | None, failed: bool = False) -> None:
            self.admission.forget(tier, waiting)
            if end is not None:
                self.ended(call, end)
                self.meter.finish(call, prompt, completion, "ok", end.cached_tokens)
            else:
                status = "engine_error" if failed else "client_disconnect"
                self.meter.finish(call, prompt, completion, status)

        def on_close() -> None:  # the response closed before its stream started
            self.meter.finish(call, 0, 0, "client_disconnect")

        return Opened(call, first, events, on_token, on_end, on_close)

    def ended(self, call: Call, end: End) -> None:
        """What a finished request tells admission control and the metrics: its queue wait,
        latencies and tokens, per tier and plan."""
        if end.queue_s is not None:
            self.admission.record(str(call.target), end.queue_s)
        self.meter.observed(call, end)


def _replica_failure(
    target: Target, exc: BaseException, limit_s: float, retry_s: float
) -> BaseException:
    """What a failed call to a tier becomes for the client: a timeout, 503 tier_unavailable (no
    replica took or finished it: the tier is starting or restarting); a replica that broke (its
    process died, its handle failed), 503 engine_error; an APIError or a cancellation stays as
    it is."""
    if isinstance(exc, APIError) or not isinstance(exc, Exception):
        return exc
    if isinstance(exc, asyncio.TimeoutError):
        return TierUnavailable(
            f"the tier {target} did not take or answer the request within {limit_s:g} s "
            "(it is starting or restarting); retry",
            retry_s,
        )
    return EngineError(f"the tier's replica failed ({type(exc).__name__})")


@dataclass
class Answered:
    """A request answered whole: its call (the reservation, the map-reduce job if any) and the
    tier's End."""

    call: Call
    end: End


@dataclass
class Opened:
    """A streamed request a replica took: its Start, the rest of its events, and the hooks the
    stream calls: on_token() at the first token, on_end(prompt, completion, end) once however
    it ends (failed: the tier failed, else without an End the client left), on_close() when
    the HTTP response closes (a no-op after on_end)."""

    call: Call
    first: Start
    events: AsyncGenerator[ReplicaEvent, None]
    on_token: Callable[[], None]
    on_end: Callable[..., None]
    on_close: Callable[[], None]
