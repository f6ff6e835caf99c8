"""The batch worker of a gateway replica: it takes a queued batch by its lease (batches.store),
runs its requests through this replica's own request path (the same pipeline, limits, tiers and
answers as the HTTP routes, as the key that made the batch, billed at the plan's batch price),
notes each request's result line once, and at the end writes the output and error files.

Lowest priority: before each request it waits while the request's tier shows a queue (its
measured wait over a quarter of the shedding threshold), so interactive traffic keeps the tier;
up to `batches.concurrency` requests of a batch run at once, which the engines batch together.
A request keeps one id however often it runs (`<batch>-<line>`): a worker that dies after
running it and before noting it leaves it to be run again by the next worker, whose usage event
has the same id and is counted once. A worker never abandons a request it started: when its
replica shuts down, or its lease was lost, it starts no more and lets those running finish (a
request cut off would be billed for what it delivered, and again in full when run anew); a
replica killed outright leaves its running requests unsettled, so they cost nothing (their
reservations are swept) and run again elsewhere. Cancelling stops new requests and ends the
batch `cancelled` with what ran; a batch past its window ends `expired`; the requests that did
not run are in the error file (batch_cancelled, batch_expired). A batch whose input bytes are
gone ends `failed`; one whose run raises (its store failing) is left by this worker for a
while, so the batches behind it in the queue still run."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import itertools
import json
import logging
import secrets
import time
from typing import Any

from pydantic import ValidationError

from zerolayer.batches import ACTIVE, BatchStore
from zerolayer.config import PlatformConfig
from zerolayer.conversations import NotFound
from zerolayer.errors import APIError, InvalidRequest, RetryLater
from zerolayer.files import FileStore
from zerolayer.gateway.bodies import validation_message
from zerolayer.gateway.pipeline import Answered, Pipeline
from zerolayer.gateway.response_bodies import CreateResponseRequest
from zerolayer.gateway.responses import Responder
from zerolayer.gateway.routes.completions import ask_of, http_answer
from zerolayer.gateway.schemas import ChatCompletionRequest, CompletionRequest
from zerolayer.store.keys import ApiKeyRecord, AsyncKeyStore

__all__ = ["BatchWorker", "batch_lines"]

log = logging.getLogger(__name__)

OUTPUT_TTL_S = 30 * 86400
REST_MOST_S = 60.0  # the longest a worker leaves a batch whose run raised


class _Status:
    """Whether a running batch should start no more requests (cancelled, or past its window),
    read from Redis at most every `every_s` (not once per request)."""

    def __init__(self, batches: BatchStore, bid: str, fixed: dict[str, Any], every_s: float = 0.1):
        self.batches, self.bid, self.fixed, self.every_s = batches, bid, fixed, every_s
        self._at = -every_s
        self._stop = False

    async def stopping(self) -> bool:
        if time.time() > self.fixed["expires_at"]:
            return True
        now = time.monotonic()
        if not self._stop and now - self._at >= self.every_s:
            self._at = now
            self._stop = await self.batches.status(self.bid) == "cancelling"
        return self._stop


def batch_lines(data: bytes) -> list[dict[str, Any]]:
    """The requests of a batch file (checked when it was uploaded)."""
    return [json.loads(x) for x in data.splitlines() if x.strip()]


class BatchWorker:
    """Runs queued batches on this gateway replica (module doc)."""

    def __init__(
        self,
        config: PlatformConfig,
        pipeline: Pipeline,
        responder: Responder | None,
        batches: BatchStore,
        files: FileStore,
        keys: AsyncKeyStore,
    ):
        self.config = config
        self.pipeline = pipeline
        self.responder = responder
        self.batches = batches
        self.files = files
        self.keys = keys
        self.id = "w-" + secrets.token_hex(6)
        cfg = config.batches
        self.lease_ms = int(cfg.lease_s * 1000)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.ran = 0  # requests run (tests, stats)
        self._resting: dict[str, tuple[int, float]] = {}  # batch -> (runs raised, left until)

    def start(self) -> None:
        """Start polling on the running loop. Once only: an app's lifespan run again (a second
        test client over the same app) leaves the first worker on its own loop."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def close(self, drain_s: float = 30.0) -> None:
        """Start no more requests; wait (at most drain_s) for those running to finish. Only
        from the loop the worker runs on: another loop's lifespan ending leaves it running."""
        if self._task is None or self._task.get_loop() is not asyncio.get_running_loop():
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), drain_s)
        except asyncio.TimeoutError:
            self._task.cancel()
        except Exception:
            pass
        await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                busy = await self.step()
            except Exception:  # Redis down, a file store error: try again later
                log.exception("batch worker step failed")
                busy = False
            if not busy:
                try:
                    await asyncio.wait_for(self._stop.wait(), self.config.batches.poll_s)
                except asyncio.TimeoutError:
                    pass

    async def step(self) -> bool:
        """Run one queued batch whose lease this worker gets; False if there was none. A batch
        whose run raised (its store failing) is logged and left alone for a while, twice as
        long each time (at most REST_MOST_S), while the batches behind it in the queue run."""
        now = time.monotonic()
        queued = await self.batches.queued()
        self._resting = {b: r for b, r in self._resting.items() if b in queued}
        for bid in queued:
            tries, until = self._resting.get(bid, (0, 0.0))
            if until > now or not await self.batches.take(bid, self.id, self.lease_ms):
                continue
            try:
                await self._with_lease(bid)
            except Exception:
                rest = min(REST_MOST_S, self.config.batches.poll_s * 2**tries)
                self._resting[bid] = (tries + 1, time.monotonic() + rest)
                log.exception("batch %s failed to run; left for %.1f s", bid, rest)
                continue
            finally:
                await self.batches.release(bid, self.id)
            self._resting.pop(bid, None)
            return True
        return False

    async def _with_lease(self, bid: str) -> None:
        lost = asyncio.Event()
        run = asyncio.ensure_future(self.run(bid, lost))
        try:
            while not run.done():
                await asyncio.wait([run], timeout=self.lease_ms / 3000)
                if not run.done() and not await self.batches.renew(bid, self.id, self.lease_ms):
                    lost.set()  # another worker has the batch now: start nothing more
        finally:
            await asyncio.gather(run, return_exceptions=True)
        run.result()  # a run that raised: step() leaves that batch for a while

    async def run(self, bid: str, lost: asyncio.Event | None = None) -> None:
        h = await self.batches.raw(bid)
        if h.get("status") not in ACTIVE:  # ended (or gone): off the queue
            await self.batches.unqueue(bid)
            return
        tenant, fixed = h["tenant"], json.loads(h["fixed"])
        await self.batches.move(bid, "in_progress", "validating")
        try:
            lines = batch_lines(await self.files.read(tenant, fixed["input_file_id"]))
        except NotFound:
            errors = {
                "object": "list",
                "data": [{"code": "missing_file", "message": "the input file was deleted"}],
            }
            await self.batches.finish(bid, "failed", {"errors": json.dumps(errors)})
            return
        record = await self.keys.by_id(h["key_id"])
        noted = await self.batches.noted(bid)
        todo = [(n, line) for n, line in enumerate(lines, 1) if n not in noted]
        gate = asyncio.Semaphore(self._width(record, lines))

        lost = lost or asyncio.Event()
        watch = _Status(self.batches, bid, fixed)
        targets: dict[str, Any] = {}  # model -> its tier, resolved once per batch

        async def one(n: int, line: dict[str, Any]) -> None:
            async with gate:
                if self._stop.is_set() or lost.is_set() or await watch.stopping():
                    return
                await self._yield(record, line, targets)
                result, ok = await self.request(bid, n, line, fixed["endpoint"], record)
                await self.batches.note(bid, n, result, ok)
                self.ran += 1

        await asyncio.gather(*(one(n, line) for n, line in todo))
        if self._stop.is_set() or lost.is_set():
            return  # left for the next worker, which skips what was noted
        await self._finalize(bid, tenant, lines, fixed)

    def _width(self, record: ApiKeyRecord | None, lines: list[dict[str, Any]]) -> int:
        """How many of a batch's requests run at once: batches.concurrency, and at most three
        quarters of the request slots of the tier its first request names (its replicas'
        max_ongoing_requests): Serve queues a replica's requests past those in one line, so a
        batch that filled them would put interactive requests behind its own."""
        width = self.config.batches.concurrency
        if record is None or not lines:
            return width
        try:
            target = self.pipeline.catalog.resolve(lines[0]["body"]["model"], record.plan, None)
        except (APIError, KeyError, TypeError):
            return width
        tier = self.config.models[target.model].tiers[target.tier]
        return max(1, min(width, tier.max_ongoing_requests * 3 // 4))

    async def _yield(
        self, record: ApiKeyRecord | None, line: dict[str, Any], targets: dict[str, Any]
    ) -> None:
        """Wait while the request's tier has a queue of interactive requests."""
        model = line["body"]["model"]
        if record is None or not isinstance(model, str):
            return
        target = targets.get(model)
        if target is None:
            try:
                states = await self.pipeline.states()
                target = targets[model] = self.pipeline.catalog.resolve(model, record.plan, states)
            except APIError:
                return  # the request itself will say what is wrong
        limit = self.pipeline.admission.threshold_s * self.config.batches.yield_wait_share
        while self.pipeline.admission.wait_s(str(target)) > limit and not self._stop.is_set():
            await asyncio.sleep(0.2)

    async def request(
        self,
        bid: str,
        n: int,
        line: dict[str, Any],
        endpoint: str,
        record: ApiKeyRecord | None,
    ) -> tuple[dict[str, Any], bool]:
        """Run one request; its result line, and whether it succeeded. A refusal that clears
        with time (the key's per-minute limits, a tier shedding load, a replica shutting
        down) is waited out and the request sent again (under a new id: the refusal's usage
        event has the first); the month's budget spent is the request's answer."""
        rid = f"{bid}-{n}"
        status, body = 200, None
        try:
            if record is None or record.revoked:
                raise InvalidRequest("the API key that made this batch was revoked")
            for attempt in itertools.count():
                try:
                    body = await self._answer(rid, line["body"], endpoint, record)
                    break
                except RetryLater as exc:
                    if exc.code == "monthly_budget" or self._stop.is_set():
                        raise
                    await asyncio.sleep(min(exc.retry_after, self.config.batches.poll_s * 5))
                    rid = f"{bid}-{n}.{attempt + 1}"
        except ValidationError as exc:
            message, param = validation_message([dict(e) for e in exc.errors()])
            err = InvalidRequest(message, param=param)
            status, body = err.status_code, err.body()
        except APIError as exc:
            status, body = exc.status_code, exc.body()
        result = {
            "id": f"batch_req_{rid}",
            "custom_id": line["custom_id"],
            "response": {"status_code": status, "request_id": rid, "body": body},
            "error": None,
        }
        return result, status == 200

    async def _answer(
        self, rid: str, body: dict[str, Any], endpoint: str, record: ApiKeyRecord
    ) -> dict[str, Any]:
        if endpoint == "/v1/responses":
            if self.responder is None:
                raise InvalidRequest("this gateway keeps no responses")
            req = CreateResponseRequest.model_validate(body)
            reply = await self.responder.create(req, record, rid="resp_" + rid, batch=True)
            answer: dict[str, Any] = json.loads(bytes(reply.body))
            return answer
        chat = endpoint == "/v1/chat/completions"
        parsed: ChatCompletionRequest | CompletionRequest = (
            ChatCompletionRequest.model_validate(body)
            if chat
            else CompletionRequest.model_validate(body)
        )
        ask = dataclasses.replace(
            ask_of(parsed), rid=rid, endpoint="batch." + endpoint.rsplit("/", 2)[-1], batch=True
        )
        if chat:
            ask = dataclasses.replace(ask, endpoint="batch.chat.completions")
        got = await self.pipeline(ask, record)
        assert isinstance(got, Answered)  # a batch's requests never stream (checked)
        reply = http_answer(got, chat, {}, False, ask.logprobs)
        answer = json.loads(bytes(reply.body))
        return answer

    async def _finalize(
        self, bid: str, tenant: str, lines: list[dict[str, Any]], fixed: dict[str, Any]
    ) -> None:
        status = await self.batches.status(bid)
        end = "completed"
        if status == "cancelling":
            end = "cancelled"
        elif time.time() > fixed["expires_at"]:
            end = "expired"
        else:
            await self.batches.move(bid, "finalizing", "in_progress")
        results = await self.batches.results(bid)
        for n, line in enumerate(lines, 1):
            if n not in results:  # not run: cancelled or expired first
                code = "batch_cancelled" if end == "cancelled" else "batch_expired"
                why = "cancelled" if end == "cancelled" else "expired"
                result = {
                    "id": f"batch_req_{bid}-{n}",
                    "custom_id": line["custom_id"],
                    "response": None,
                    "error": {"code": code, "message": f"the batch was {why} before this ran"},
                }
                await self.batches.note(bid, n, result, False)
                results[n] = result
        out, err = io.BytesIO(), io.BytesIO()
        for n in sorted(results):
            r = results[n]
            ok = r.get("response") is not None and r["response"]["status_code"] == 200
            (out if ok else err).write(json.dumps(r).encode() + b"\n")
        fields: dict[str, str] = {}
        for kind, data in (("output", out), ("error", err)):
            size = data.tell()
            if size:
                # one id per batch and kind: a finalize run again writes the same file
                fid = f"file-{bid.removeprefix('batch_')}{kind[0]}"
                name = f"{bid}_{kind}.jsonl"
                await self.files.create(
                    tenant, data, name, "batch_output", size, OUTPUT_TTL_S, fid=fid
                )
                fields[f"{kind}_file_id"] = fid
        await self.batches.finish(bid, end, fields)
