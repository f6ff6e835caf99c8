"""The one request path to a tier, with no HTTP in it. Every endpoint that asks a tier for text
(chat and text completions, the Responses API) hands it an `Ask` and gets protocol values back;
its steps, in order:

1. resolve the tier (the model id and the plan's rules, the tier board),
2. admit it (admission control: shedding by plan priority) and check the cheap limits,
3. tokenize and budget it, with the endpoint's strategy for a prompt too long for the context
   (zerolayer.gateway.fit: refuse, summarize, truncate),
4. reserve its tokens and price against the key's limits,
5. dispatch it to the tier (length-aware routing): the whole End (`Answered`), or the stream
   opened on a replica (`Opened`) with the hooks that settle it.

Chunking (POST /v1/chunks) asks no tier: chunk() and chunk_stream() resolve the model, count
the call against the key's limits as a free one, and hand the text to the chunker.

Its Meter (zerolayer.gateway.meter) counts the request against the key's limits and settles
what was delivered; the routes turn the answer into HTTP (zerolayer.gateway.routes)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from zerolayer.config import PlatformConfig
from zerolayer.errors import (
    APIError,
    AuthenticationFailed,
    ClientGone,
    EngineError,
    Overloaded,
    RateLimited,
    ShuttingDown,
    TierUnavailable,
)
from zerolayer.gateway.admission import Admission
from zerolayer.gateway.bodies import client_gone
from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.chunks import Cut, CutDone, once, request_id, streamed
from zerolayer.gateway.fit import Fit, Fitting, Refuse
from zerolayer.gateway.meter import Call, Meter, status_of
from zerolayer.gateway.parts import Backend
from zerolayer.protocol import (
    ChunkOptions,
    Chunks,
    Constraint,
    End,
    Failed,
    PromptInput,
    ReplicaEvent,
    SamplingSpec,
    Start,
    Target,
)
from zerolayer.store.abandoned import ran
from zerolayer.store.keys import ApiKeyRecord
from zerolayer.store.tiers import AsyncTierBoard, TierState
from zerolayer.store.traffic import AsyncTrafficStore, prompt_text

__all__ = ["Answered", "Ask", "Cutting", "Opened", "Pipeline"]

log = logging.getLogger(__name__)

ABANDONED_REPORT_S = 5.0  # how long a whole request whose client left waits for what ran


@dataclass(frozen=True)
class Ask:
    """What an endpoint asks of a tier, in protocol terms: the model id, the request's id and
    endpoint (its usage event says), the prompt, its sampling, whether it streams, the
    strategy for a prompt too long for the context, the grammar its output keeps to and the
    log-probabilities it wants (SamplingSpec's constraint and logprobs)."""

    model: str
    rid: str
    endpoint: str
    text: PromptInput
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    fit: Fit = field(default_factory=Refuse)
    constraint: Constraint | None = None
    logprobs: int | None = None
    n: int = 1  # choices: n engine requests of one prompt, billed as one request
    # what keeps related requests on the replica that holds their prefix (a conversation, a
    # response chain, a prompt_cache_key), within the key's tenant; '' for none
    affinity: str = ""
    batch: bool = False  # a request of a batch: billed at the plan's batch price


class Pipeline:
    """Runs the requests of one gateway replica through the steps of the module doc; its Meter
    counts each against the key's limits and settles it with its usage event."""

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

    async def begin(
        self, record: ApiKeyRecord, model: str, rid: str, endpoint: str, batch: bool = False
    ) -> Call:
        """A request's first steps: its tier (the model id and plan rules), admission control,
        the cheap limits. A refusal by the last two is recorded as a usage event. `batch`: a
        request of a batch (billed at the batch price)."""
        started = time.time()
        target = self.catalog.resolve(model, record.plan, await self.states())
        try:
            self.shed(record, target)
            reservation = await self.meter.request(record, rid)
        except (Overloaded, ShuttingDown, RateLimited) as exc:
            self.meter.refused(record, target, rid, endpoint, exc, started)
            raise
        return Call(
            record, target, target, reservation, endpoint=endpoint, started=started, batch=batch
        )

    async def sized(self, call: Call, prompt_tokens: int, max_tokens: int) -> None:
        """The limits that need the request's size, then counted as a request of its tier."""
        await self.meter.priced(call, prompt_tokens, max_tokens)
        self.meter.metrics.inc("requests", str(call.target), call.record.plan)

    async def __call__(self, ask: Ask, record: ApiKeyRecord) -> Answered | Opened:
        """A request through every step: its whole answer (Answered), or its stream opened on
        a replica (Opened). A failure is settled here and raised with the request's id."""
        try:
            call = await self.begin(record, ask.model, ask.rid, ask.endpoint, ask.batch)
            try:
                return await self.run(call, ask)
            except BaseException as exc:
                self.meter.finish(call, 0, 0, status_of(exc))  # a no-op once it was settled
                raise
        except APIError as exc:  # the app's handler answers it, with the request's id
            exc.request_id = ask.rid
            raise

    async def run(self, call: Call, ask: Ask) -> Answered | Opened:
        """The steps after begin(): fit, reserve, dispatch (the caller settles the call if
        this raises)."""
        target = call.target

        def shed() -> None:
            self.shed(call.record, target)

        fitting = Fitting(
            self.backend,
            self.config,
            self.meter,
            call,
            ask.max_tokens,
            shed,
            lambda n: self.route(target, n),
        )
        fitted = await ask.fit(fitting, ask.text)
        if fitted.reserved:
            self.meter.metrics.inc("requests", str(target), call.record.plan)
        else:  # every choice may run to max_tokens
            await self.sized(call, len(fitted.ids), fitted.max_tokens * ask.n)
        self.sample(call, fitted.text)
        spec = SamplingSpec(
            request_id=ask.rid,
            prompt_token_ids=fitted.ids,
            max_tokens=fitted.max_tokens,
            temperature=ask.temperature,
            top_p=ask.top_p,
            seed=ask.seed,
            stop=list(ask.stop),
            constraint=ask.constraint,
            logprobs=ask.logprobs,
            # the prefix cache is shared within a tenant only
            cache_salt=call.record.owner,
            affinity=f"{call.record.owner}\0{ask.affinity}" if ask.affinity else "",
            priority=1 if call.batch else 0,
        )
        call.dest = self.route(target, len(fitted.ids))
        specs = [spec] if ask.n == 1 else [_choice(spec, i) for i in range(ask.n)]
        if not ask.stream:
            ends = await self.completed(call, specs)
            return Answered(call, ends[0] if len(ends) == 1 else _total(ends), ends)
        if ask.n == 1:
            return await self.opened(call, spec)
        return await self.opened(call, specs[0], specs[1:])

    async def chunk(
        self, record: ApiKeyRecord, model_id: str, texts: list[str], cut: ChunkOptions
    ) -> tuple[Call, list[Chunks]]:
        """Token-exact chunks of whole texts (zerolayer.gateway.chunks): the model, as a tier's
        is resolved; both limit steps at once (chunking is free but counted; the texts' UTF-8
        size, an upper bound of their tokens, is reserved); the chunker, in one call; settled
        to the tokens cut."""
        model = self.catalog.resolve(model_id, record.plan).model
        most = sum(len(t.encode("utf-8")) for t in texts)  # a token is at least one byte
        call = await self.meter.free(record, request_id(), model, most)
        total, status = 0, "client_disconnect"
        try:
            got = await self.backend.chunk_all(model, texts, cut)
            if isinstance(got, Failed):
                got.raise_()
            total = sum(c.tokens for ev in got for c in ev.chunks)
            status = "ok"
            return call, got
        except BaseException as exc:
            status = status_of(exc)
            raise
        finally:
            self.meter.finish(call, total, 0, status)

    async def chunk_stream(
        self,
        record: ApiKeyRecord,
        model_id: str,
        pieces: AsyncIterator[bytes],
        options: dict[str, int],
    ) -> Cutting:
        """The chunks of a text that arrives in pieces, each once it is complete; counted as
        chunk() is, and settled once however the stream ends."""
        model = self.catalog.resolve(model_id, record.plan).model
        call = await self.meter.free(record, request_id(), model, 0)
        settle = once(lambda tokens, status: self.meter.finish(call, tokens, 0, status))
        cuts = streamed(self.backend, self.config.chunker, model, pieces, options, settle)
        # closed before the stream started: nothing was cut
        return Cutting(call, cuts, lambda: settle(0, "client_disconnect"))

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

    async def completed(self, call: Call, specs: list[SamplingSpec]) -> list[End]:
        """Run a request whole on its tier (its choices at once, one engine request each);
        settled and measured when it returns (a failure raised as its APIError; the prompt is
        billed once, every choice's tokens). When its client leaves meanwhile (its server
        cancels the request, or BodyLimits sees the connection close), the tier's calls are
        cancelled, which stops the engine, and the request is settled in the background to
        what ran, as the replicas report it (the prompt alone if no report comes)."""
        res: End | Failed | None = None
        ends: list[End] = []
        status = "client_disconnect"  # unless it returns or fails
        g = self.config.gateway
        limit_s = g.tier_wait_s + g.request_timeout_s
        gone, task, left = client_gone(), asyncio.current_task(), False

        def leave(_: object) -> None:
            nonlocal left
            left = True
            if task is not None:
                task.cancel()

        if gone is not None:
            if gone.done():
                raise ClientGone("the client closed its connection before its answer")
            gone.add_done_callback(leave)
        try:
            got = await asyncio.wait_for(self._all(call, specs), limit_s)
            ends = [r for r in got if isinstance(r, End)]
            failed = [r for r in got if isinstance(r, Failed)]
            res = failed[0] if failed else ends[0] if len(ends) == 1 else _total(ends)
            status = "ok" if isinstance(res, End) else "engine_error"
        except asyncio.CancelledError:
            call.deferred = True
            self.meter.later(self._abandoned(call, specs))
            if left and task is not None and task.uncancel() == 0:
                raise ClientGone("the client closed its connection before its answer") from None
            raise
        except Exception as exc:
            err = _replica_failure(call.target, exc, limit_s, g.tier_wait_s)
            status = status_of(err)
            if err is exc:
                raise
            raise err from exc
        finally:
            if gone is not None:
                gone.remove_done_callback(leave)
            # a whole reply that failed delivered nothing: it costs nothing (one abandoned is
            # settled by _abandoned)
            if isinstance(res, End):
                end = res
                self.meter.finish(
                    call, end.prompt_tokens, end.completion_tokens, status, end.cached_tokens
                )
            else:
                self.meter.finish(call, 0, 0, status)
        if isinstance(res, Failed):
            res.raise_()
        for end in ends:
            self.ended(call, end)
        return ends

    async def _all(self, call: Call, specs: list[SamplingSpec]) -> list[End | Failed]:
        """Every choice's whole answer (one call, or several at once)."""
        if len(specs) == 1:
            return [await self.backend.complete(call.dest, specs[0])]
        return list(await asyncio.gather(*(self.backend.complete(call.dest, s) for s in specs)))

    async def _abandoned(self, call: Call, specs: list[SamplingSpec]) -> None:
        """Settle a whole request whose client left, to the tokens its replicas say ran (the
        prompt once)."""
        client = self.meter.limiter.client
        got = await asyncio.gather(*(ran(client, s.request_id, ABANDONED_REPORT_S) for s in specs))
        prompt = max((g[0] for g in got if g is not None), default=len(specs[0].prompt_token_ids))
        completion = sum(g[1] for g in got if g is not None)
        self.meter.finish(call, prompt, completion, "client_disconnect", deferred=True)

    async def opened(
        self, call: Call, spec: SamplingSpec, more: list[SamplingSpec] | None = None
    ) -> Opened:
        """Start a streamed request on its tier: its first event (Start) once a replica took
        it, the rest of its events, and the hooks its stream must call (first token, end).
        With `more` choices, their streams are opened at once and their events interleaved
        (each Delta and End tagged with its choice's index)."""
        tier = str(call.target)
        waiting = self.admission.waiting(tier)
        if more:
            events = _interleaved([self.backend.stream(call.dest, s) for s in [spec, *more]])
        else:
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

        events = self._revocable(call, events)

        def on_end(prompt: int, completion: int, end: End | None, failed: bool = False) -> None:
            self.admission.forget(tier, waiting)
            if end is not None:
                self.ended(call, end)  # (the last choice's, with several)
                self.meter.finish(call, prompt, completion, "ok", end.cached_tokens)
            else:
                status = "engine_error" if failed else "client_disconnect"
                self.meter.finish(call, prompt, completion, status)

        def on_close() -> None:  # the response closed before its stream started
            self.meter.finish(call, 0, 0, "client_disconnect")

        return Opened(call, first, events, on_token, on_end, on_close, 1 + len(more or []))

    async def _revocable(
        self, call: Call, events: AsyncGenerator[ReplicaEvent, None]
    ) -> AsyncGenerator[ReplicaEvent, None]:
        """A stream's events, ended with a `key_revoked` failure at the first event after its
        key was revoked (the watch asks Redis twice a second while streams are open)."""
        watch, key_id = self.meter.revocations, call.record.key_id
        watch.opened(key_id)
        try:
            async for ev in events:
                if key_id in watch.revoked:
                    yield Failed.of(
                        AuthenticationFailed(
                            "the API key was revoked while this response was streamed",
                            code="key_revoked",
                        )
                    )
                    return
                yield ev
        finally:
            watch.closed(key_id)
            with contextlib.suppress(Exception):
                await events.aclose()

    def ended(self, call: Call, end: End) -> None:
        """What a finished request tells admission control and the metrics: its queue wait,
        latencies and tokens, per tier and plan. A batch's request says nothing of the tier's
        queue: the engines start interactive requests first, so its wait is not theirs (and a
        batch worker that counted its own waits would stall itself)."""
        if end.queue_s is not None and not call.batch:
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


def _choice(spec: SamplingSpec, i: int) -> SamplingSpec:
    """The i-th choice's engine request: its own id, and its own seed when seeded (so the
    choices differ and each is reproducible)."""
    seed = spec.seed
    if seed is not None:
        seed = seed + i if seed + i < 2**63 else seed - i
    return dataclasses.replace(spec, request_id=f"{spec.request_id}-{i}", seed=seed)


def _total(ends: list[End]) -> End:
    """Several choices' Ends as one, for billing: the prompt once, every choice's tokens."""
    first = ends[0]
    return dataclasses.replace(
        first,
        completion_tokens=sum(e.completion_tokens for e in ends),
        text="",
        logprobs=None,
    )


async def _interleaved(
    streams: list[AsyncGenerator[ReplicaEvent, None]],
) -> AsyncGenerator[ReplicaEvent, None]:
    """Several choices' event streams as one: one Start (each stream's first event, the
    prompt's tokens), then every Delta and End as it comes, tagged with its choice's index;
    the first Failed ends it. Closing it closes them all."""
    queue: asyncio.Queue[tuple[int, ReplicaEvent | BaseException | None]] = asyncio.Queue()

    async def pump(i: int, events: AsyncGenerator[ReplicaEvent, None]) -> None:
        try:
            async for ev in events:
                await queue.put((i, ev))
        except Exception as exc:  # handed to the reader, as a stream's own failure is
            await queue.put((i, exc))
        finally:
            await queue.put((i, None))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    started: list[Start] = []
    early: list[ReplicaEvent] = []  # a choice's events before every choice has started
    running = len(streams)
    try:
        while running:
            i, ev = await queue.get()
            if ev is None:
                running -= 1
            elif isinstance(ev, BaseException):
                raise ev
            elif isinstance(ev, Failed):
                yield ev
                return
            elif isinstance(ev, Start):
                started.append(ev)
                if len(started) == len(streams):
                    yield started[0]
                    for held in early:
                        yield held
                    early.clear()
            elif len(started) < len(streams):
                early.append(dataclasses.replace(ev, index=i))
            else:
                yield dataclasses.replace(ev, index=i)
    finally:
        for t in tasks:
            t.cancel()
        for s in streams:
            with contextlib.suppress(Exception):
                await s.aclose()


@dataclass
class Answered:
    """A request answered whole: its call (the reservation, the map-reduce job if any) and the
    tier's End (with several choices: their total, and each choice's End)."""

    call: Call
    end: End
    choices: list[End] = field(default_factory=list)


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
    n: int = 1  # its choices (their events tagged with their index)


@dataclass
class Cutting:
    """A streamed text being chunked: its call, its Cut values (then CutDone), and the hook
    for the HTTP response closing before the stream started."""

    call: Call
    cuts: AsyncGenerator[Cut | CutDone, None]
    on_close: Callable[[], None]
