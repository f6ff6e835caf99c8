"""One tier of one model: runs the prepared request on the engine and reports exact token
counts, as the typed events of zerolayer.protocol (Start, Delta..., End, or Failed)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from zerolayer.engines.base import Engine
from zerolayer.errors import ContextLengthExceeded, EngineError, InvalidRequest
from zerolayer.protocol import (
    Delta,
    End,
    Failed,
    ReplicaEvent,
    SamplingSpec,
    Start,
    TokenLogprob,
)
from zerolayer.tokenfix.prompt import check_token_ids

__all__ = ["TierReplica"]

log = logging.getLogger(__name__)


class TierReplica:
    """Serves one model tier through any engine of the protocol."""

    def __init__(self, model_id: str, engine: Engine, vocab_size: int, max_model_len: int):
        self.model_id = model_id
        self.engine = engine
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.card: dict[str, Any] = {"tier": model_id.partition(":")[2]}
        self._users: dict[int, int] = {}  # id(engine) -> its requests in flight
        # told (request id, prompt, completion tokens) when a whole request's call is
        # cancelled (its caller left): what ran, for the caller to bill
        self.on_abandoned: Callable[[str, int, int], None] | None = None

    async def start(self) -> None:
        """Start the engine."""
        await self.engine.start()

    async def swap(self, engine: Engine, card: dict[str, Any], drain_s: float) -> None:
        """Serve from a new, started engine (another artifact) from the next request on; the
        old one finishes its requests in flight (at most drain_s), then shuts down."""
        old, self.engine, self.card = self.engine, engine, card
        deadline = time.monotonic() + drain_s
        while self._users.get(id(old)) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await old.shutdown()

    def _check(self, spec: SamplingSpec) -> None:
        """The gateway prepared the request; a replica still refuses one that cannot run."""
        ids = spec.prompt_token_ids
        if not ids:
            raise InvalidRequest("the prompt is empty", param="prompt")
        check_token_ids(ids, self.vocab_size)
        if spec.max_tokens < 1 or len(ids) + spec.max_tokens > self.max_model_len:
            raise ContextLengthExceeded(
                f"this model's context is {self.max_model_len} tokens; the prompt has "
                f"{len(ids)} tokens and max_tokens asks for {spec.max_tokens} more",
                param="max_tokens",
            )

    async def stream(self, spec: SamplingSpec) -> AsyncGenerator[ReplicaEvent, None]:
        """Events for one request (see zerolayer.protocol)."""
        try:
            self._check(spec)
        except InvalidRequest as exc:
            yield Failed.of(exc)
            return
        prompt_tokens = len(spec.prompt_token_ids)
        yield Start(prompt_tokens)
        completion = 0
        finish = None
        queue_s: float | None = None
        cached = 0
        sent = time.monotonic()
        first = last = sent
        engine = self.engine  # a swap lets this request finish on the engine it started on
        self._users[id(engine)] = self._users.get(id(engine), 0) + 1
        try:
            async for delta in engine.generate(spec):
                last = time.monotonic()
                if queue_s is None:  # the engine's own measure, else the time to this delta
                    first = last
                    queue_s = delta.queue_s
                    if queue_s is None:
                        queue_s = last - sent
                    cached = delta.cached_tokens or 0
                completion += len(delta.token_ids)
                finish = delta.finish_reason or finish
                if delta.text or delta.token_ids:
                    yield Delta(delta.text, len(delta.token_ids), delta.logprobs)
        except InvalidRequest as exc:  # the engine refused what it was asked (a grammar)
            yield Failed.of(exc, prompt_tokens, completion)
            return
        except Exception as exc:  # the engine broke mid-request: report, with what was delivered
            log.exception("engine failed on %s", spec.request_id)
            err = EngineError(f"the engine failed while generating: {type(exc).__name__}")
            yield Failed.of(err, prompt_tokens, completion)
            return
        finally:
            self._users[id(engine)] -= 1
            if not self._users[id(engine)]:
                del self._users[id(engine)]
        ttft = first - sent if completion else None
        tpot = (last - first) / (completion - 1) if completion > 1 else None
        yield End(finish or "stop", prompt_tokens, completion, queue_s, "", ttft, tpot, cached)

    async def complete(self, spec: SamplingSpec) -> End | Failed:
        """The whole result of one request as a single event: End with the text, or Failed.
        Cancelled (its caller left), the engine stops and on_abandoned is told what ran."""
        parts: list[str] = []
        logprobs: list[TokenLogprob] | None = None if spec.logprobs is None else []
        prompt = completion = 0
        try:
            async for ev in self.stream(spec):
                if isinstance(ev, Start):
                    prompt = ev.prompt_tokens
                elif isinstance(ev, Delta):
                    parts.append(ev.text)
                    completion += ev.tokens
                    if logprobs is not None and ev.logprobs:
                        logprobs.extend(ev.logprobs)
                elif isinstance(ev, End | Failed):
                    return self._whole(ev, parts, logprobs)
        except asyncio.CancelledError:
            if self.on_abandoned is not None:
                self.on_abandoned(spec.request_id, prompt, completion)
            raise
        raise EngineError("the engine ended a request without a finish")

    async def complete_each(
        self, specs: list[SamplingSpec], gather_s: float = 0.002
    ) -> AsyncGenerator[list[tuple[int, End | Failed]], None]:
        """complete() of each request, all at once: (its index, its result) as each ends (one
        that broke is its Failed), those that end within gather_s of each other in one list
        (each item a caller streams costs about what a call does). Closed early, those still
        running are cancelled (and reported as complete() does)."""
        tasks = [asyncio.ensure_future(self.complete(s)) for s in specs]
        index = {t: j for j, t in enumerate(tasks)}
        pending = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if pending and gather_s > 0:
                    more, pending = await asyncio.wait(pending, timeout=gather_s)
                    done |= more
                yield [(index[t], self._result(specs[index[t]], t)) for t in done]
        finally:
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    @staticmethod
    def _result(spec: SamplingSpec, task: asyncio.Task[End | Failed]) -> End | Failed:
        exc = task.exception()
        if exc is None:
            return task.result()
        log.error("request %s failed", spec.request_id, exc_info=exc)
        return Failed.of(EngineError(f"the replica failed: {type(exc).__name__}"))

    @staticmethod
    def _whole(
        ev: End | Failed, parts: list[str], logprobs: list[TokenLogprob] | None
    ) -> End | Failed:
        """A whole request's last event, with the text (and logprobs) of its deltas."""
        if isinstance(ev, Failed):
            return ev
        return End(
            ev.finish_reason,
            ev.prompt_tokens,
            ev.completion_tokens,
            ev.queue_s,
            "".join(parts),
            ev.ttft_s,
            ev.tpot_s,
            ev.cached_tokens,
            logprobs,
        )

    async def check_health(self) -> None:
        """Raise if the engine cannot serve."""
        await self.engine.check_health()
