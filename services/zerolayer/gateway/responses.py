"""The Responses API: POST /v1/responses (continued by previous_response_id or on a
conversation, whole or streamed), GET and DELETE /v1/responses/{id}, and its input items.

A response runs through the same Pipeline as a chat completion (tier from the model id and
plan, admission control, limits, settlement of what was delivered), its history truncated to
the context by the Truncate strategy (zerolayer.gateway.fit). What it depends on is written
before its id reaches the client: the stored response (and the conversation's new items)
before the JSON reply, or before the stream's last event. A response on a conversation holds
the conversation while it is generated; a second one meanwhile is a 409 conversation_busy (its
items could otherwise interleave). A response that fails or whose client leaves mid-stream is
stored as failed or incomplete with what was delivered, and adds nothing to its conversation."""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse, Response
from redis.exceptions import RedisError

from zerolayer.conversations import (
    Busy,
    ConversationStore,
    Lineage,
    NotFound,
    Quota,
    QuotaExceeded,
    check_outputs,
    compactions,
    input_items,
    messages_of,
    new_id,
)
from zerolayer.errors import (
    APIError,
    ConversationBusy,
    EngineError,
    InvalidRequest,
    ObjectNotFound,
    StorageQuotaExceeded,
)
from zerolayer.gateway.fit import TokenCounts, Truncate
from zerolayer.gateway.http import ClosingStream
from zerolayer.gateway.limits import retried
from zerolayer.gateway.meter import Call, status_of
from zerolayer.gateway.pipeline import Answered, Ask, Opened, Pipeline
from zerolayer.gateway.response_bodies import CompactRequest, CreateResponseRequest
from zerolayer.gateway.response_objects import (
    ResponseShape,
    outcome,
    response_usage,
    without_logprobs,
)
from zerolayer.gateway.sse import DONE
from zerolayer.gateway.structured import instruction, json_constraint
from zerolayer.gateway.tools import chosen, functions_of, tool_constraint, tool_prompt
from zerolayer.protocol import Constraint, Delta, End, Failed, PromptInput
from zerolayer.store.keys import ApiKeyRecord
from zerolayer.store.signing import Signer

__all__ = ["LocalChain", "Responder"]

log = logging.getLogger(__name__)


@dataclass
class LocalChain:
    """A WebSocket connection's most recent unstored response (store: false): its id and its
    whole context (history, input, output), so that the next turn on the same connection may
    continue it by previous_response_id although nothing of it was written."""

    rid: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    first: str = ""  # the chain's first response (its replica holds the chain's prefix)


@dataclass
class _Turn:
    """What one response continues from and adds."""

    tenant: str
    rid: str
    # the items it continues: a previous response's context, or a conversation's items
    history: list[dict[str, Any]]
    new: list[dict[str, Any]]  # its input items
    lineage: Lineage = Lineage()  # where its history lies (stored with it, not the history)
    conversation: str | None = None  # the conversation it holds, if any
    done: bool = False  # stored (or given up): nothing left to write or release
    admitted_ms: int = 0  # Redis's time of its admission (a tenant purge after it wins)
    keeper: asyncio.Task[None] | None = None  # renews the conversation's lease meanwhile
    local: LocalChain | None = None  # the connection's unstored chain (WebSocket mode)
    summaries: dict[str, str] = field(default_factory=dict)  # its compaction items, opened
    from_local: bool = False  # its history is that chain's (stored nowhere)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Mark a side task's outcome as seen (it was given up on)."""
    if not task.cancelled():
        task.exception()


class Responder:
    """Creates responses (one per gateway replica, over its Pipeline) and stores them."""

    def __init__(self, pipeline: Pipeline, store: ConversationStore):
        self.pipeline = pipeline
        self.store = store
        # a conversation's lease: renewed every third while its response runs, so one whose
        # gateway died is free again this long after
        self.lease_ms = int(pipeline.config.gateway.concurrency_lease_s * 1000)
        self.counts = TokenCounts()  # a long history's items, counted once
        self.signer = Signer(store.client)  # seals and opens compaction items

    async def create(
        self,
        body: CreateResponseRequest,
        record: ApiKeyRecord,
        rid: str | None = None,
        local: LocalChain | None = None,
        batch: bool = False,
    ) -> Response:
        """POST /v1/responses (as response `rid`, a new id when None); `local`: the unstored
        chain of the WebSocket connection it came on, which it may continue and then becomes;
        `batch`: a request of a batch (billed at the batch price)."""
        rid = rid or new_id("resp")
        try:
            # the stored history is read while the limits are checked (one round trip less)
            loading = asyncio.ensure_future(self.read_turn(body, record, rid, local))
            try:
                endpoint = "batch.responses" if batch else "responses"
                call = await self.pipeline.begin(record, body.model, rid, endpoint, batch)
            except BaseException:
                loading.add_done_callback(self._abandon)
                raise
            try:
                turn = await loading
            except BaseException as exc:
                self.pipeline.meter.finish(call, 0, 0, status_of(exc))
                raise
            turn.admitted_ms = call.reservation.at_ms
            try:
                return await self._run(body, turn, call)
            except BaseException as exc:
                self.pipeline.meter.finish(
                    call, 0, 0, status_of(exc)
                )  # no-op when it was settled already
                if not turn.done:
                    turn.done = True
                    self._release(turn)
                raise
        except APIError as exc:
            exc.request_id = rid
            raise

    def _abandon(self, loading: asyncio.Future[_Turn]) -> None:
        """A turn read for a request refused meanwhile: release what it took."""
        if not loading.cancelled() and loading.exception() is None:
            turn = loading.result()
            turn.done = True
            self._release(turn)

    async def read_turn(
        self,
        body: CreateResponseRequest | CompactRequest,
        record: ApiKeyRecord,
        rid: str,
        local: LocalChain | None = None,
    ) -> _Turn:
        """What a request continues and adds (its conversation held, when it is on one), its
        compaction items opened; a 4xx for what cannot be continued or added."""
        cid = body.conversation_id()
        if cid is not None and body.previous_response_id is not None:
            raise InvalidRequest(
                "give previous_response_id or conversation, not both", param="conversation"
            )
        if cid is not None and not body.store:
            raise InvalidRequest(
                "a response with store: false keeps nothing, so it cannot be added to a "
                "conversation; drop store or conversation",
                param="store",
            )
        new = input_items(body.input) if body.input is not None else []
        # at its quota: refused before it runs (once run, it is kept); read meanwhile (with a
        # previous response's history, in the same call)
        checking = None
        if body.store and body.previous_response_id is None:
            checking = asyncio.ensure_future(self._check_quota(record))
        try:
            if (
                local is not None
                and local.rid is not None
                and body.previous_response_id == local.rid
            ):
                turn = _Turn(record.owner, rid, list(local.items), new, from_local=True)
            else:
                turn = await self._load(body, record, rid, new, cid)
            turn.local = local
        except BaseException:
            if checking is not None:
                checking.cancel()
                checking.add_done_callback(_retrieved)
            raise
        try:
            if checking is not None:
                await checking
            if not turn.history and not turn.new:
                raise InvalidRequest(
                    "input is missing: give a text or a list of items", param="input"
                )
            check_outputs(turn.history, turn.new, "input")
            turn.summaries = await self._opened(turn, body)
        except BaseException:
            self._release(turn)
            raise
        return turn

    async def _opened(
        self, turn: _Turn, body: CreateResponseRequest | CompactRequest
    ) -> dict[str, str]:
        """The summaries of a turn's compaction items (item id -> text); a 400 naming where
        one came from when it does not open for the turn's tenant."""
        came = "conversation" if turn.conversation is not None else "previous_response_id"
        out = {}
        for items, where in ((turn.history, lambda _: came), (turn.new, _sealed_at)):
            for i in compactions(items):
                item = items[i]
                out[item["id"]] = await self.signer.unseal(
                    turn.tenant, item["encrypted_content"], where(i), "a compaction item"
                )
        return out

    def _quota(self, record: ApiKeyRecord) -> Quota:
        """The storage quota of the key's tenant, from the key's plan."""
        plan = self.pipeline.config.plans.get(record.plan)
        return Quota.of(plan.limits if plan is not None else None)

    async def _check_quota(self, record: ApiKeyRecord) -> None:
        """403 storage_quota_exceeded when the key's tenant is at its plan's storage quota."""
        try:
            await self.store.check_quota(record.owner, self._quota(record))
        except QuotaExceeded as exc:
            raise StorageQuotaExceeded(str(exc)) from exc

    async def _load(
        self,
        body: CreateResponseRequest | CompactRequest,
        record: ApiKeyRecord,
        rid: str,
        new: list[dict[str, Any]],
        cid: str | None,
    ) -> _Turn:
        """What the response continues: a stored response's history (and, when it is to be
        stored, the quota checked in the same call), or a conversation's items (held for it),
        or nothing."""
        tenant = record.owner
        if body.previous_response_id is not None:
            quota = self._quota(record) if body.store else None
            try:
                history, lineage = await self.store.context(
                    tenant, body.previous_response_id, quota
                )
            except QuotaExceeded as exc:
                raise StorageQuotaExceeded(str(exc)) from exc
            except NotFound as exc:
                raise ObjectNotFound(
                    str(exc),
                    param="previous_response_id",
                    code="previous_response_not_found",
                ) from exc
            return _Turn(tenant, rid, history, new, lineage)
        if cid is None:
            return _Turn(tenant, rid, [], new)
        try:
            await self.store.lock(tenant, cid, rid, self.lease_ms)
        except NotFound as exc:
            raise ObjectNotFound(f"no conversation with id {cid!r}", param="conversation") from exc
        except Busy as exc:
            raise ConversationBusy(
                f"another response is being generated on conversation {cid}; retry when "
                "it has finished",
                1.0,
            ) from exc
        turn = _Turn(tenant, rid, [], new, conversation=cid)
        turn.keeper = asyncio.ensure_future(self._renew(cid, rid))
        try:
            turn.history, upto = await self.store.history(tenant, cid)
            turn.lineage = Lineage(conv=cid, upto=upto)
        except BaseException:
            self._release(turn)
            raise
        return turn

    async def _renew(self, cid: str, rid: str) -> None:
        """Keep a conversation's lease while its response runs."""
        while True:
            await asyncio.sleep(self.lease_ms / 3000 * random.uniform(0.8, 1.0))
            try:
                if not await self.store.renew(cid, rid, self.lease_ms):
                    return
            except RedisError as exc:
                log.warning("lease of conversation %s not renewed: %s", cid, type(exc).__name__)

    def _stop_keeper(self, turn: _Turn) -> None:
        if turn.keeper is not None:
            turn.keeper.cancel()
            turn.keeper = None

    def _release(self, turn: _Turn) -> None:
        """Free the conversation a response held (in the background: it may be cancelled)."""
        self._stop_keeper(turn)
        if turn.conversation is not None:
            self.pipeline.meter.later(self._unlock(turn.conversation, turn.rid))

    async def _unlock(self, cid: str, rid: str) -> None:
        """Release a conversation, retried until Redis answers (else its lease runs out)."""
        step = functools.partial(self.store.unlock, cid, rid)
        await retried(step, f"releasing conversation {cid}", self.pipeline.meter.stopping)

    async def _run(self, body: CreateResponseRequest, turn: _Turn, call: Call) -> Response:
        """The request through the pipeline's remaining steps, its history truncated as the
        body says (the caller settles it if this raises)."""
        head = [{"role": "system", "content": body.instructions}] if body.instructions else []
        constraint, told = _constraint(body)
        if told is not None:
            head.append({"role": "system", "content": told})
        ask = Ask(
            body.model,
            turn.rid,
            "responses",
            # one message per item
            PromptInput(messages=head + messages_of(turn.history + turn.new, turn.summaries)),
            max_tokens=body.max_output_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            stream=bool(body.stream),
            fit=Truncate(keep=len(head), auto=body.truncation == "auto", counts=self.counts),
            constraint=constraint,
            logprobs=body.logprobs_k(),
            affinity=_affinity(body, turn),
        )
        answer = await self.pipeline.run(call, ask)
        tools = constraint is not None and constraint.kind == "structural_tag"
        shape = ResponseShape(
            turn.rid, str(call.target), body, turn.conversation, new_id("msg"), tools
        )
        headers = self.pipeline.meter.headers(call)
        if isinstance(answer, Answered):
            end = answer.end
            status, incomplete = outcome(end.finish_reason)
            items = shape.outputs(end.text, status, end.logprobs)
            usage = response_usage(end.prompt_tokens, end.completion_tokens, end.cached_tokens)
            obj = shape.resource(status, items, usage, incomplete=incomplete)
            await self._keep(turn, obj, items, finished=True)
            return JSONResponse(obj, headers=headers)
        opened = answer

        def on_close() -> None:
            opened.on_close()
            if not turn.done:  # the stream never started: nothing was delivered
                turn.done = True
                self._release(turn)

        return ClosingStream(
            self._events(shape, opened, turn),
            on_close=on_close,
            media_type="text/event-stream",
            headers={**headers, "cache-control": "no-cache"},
        )

    async def _keep(
        self, turn: _Turn, obj: dict[str, Any], items: list[dict[str, Any]], finished: bool
    ) -> None:
        """Store a response (and, when the model finished it, add its input and output to its
        conversation, in one write that also frees the conversation). Raises RedisError when
        Redis does not answer (the reply is then an error: nothing was acknowledged)."""
        turn.done = True
        self._stop_keeper(turn)
        if turn.local is not None and finished and not obj["store"]:
            # kept nowhere else: the connection's chain goes on from here
            turn.local.rid = turn.rid
            turn.local.first = turn.local.first if turn.from_local else turn.rid
            turn.local.items = turn.history + turn.new + [without_logprobs(i) for i in items]
        added = False
        try:
            if turn.conversation is not None and finished:
                await self.store.add_items(
                    turn.tenant,
                    turn.conversation,
                    turn.new + [without_logprobs(item) for item in items],
                    lock=turn.rid,
                )
                added = True  # the same write released the conversation
            if obj["store"]:
                # continued from an unstored response: its history is stored with its input
                given = turn.history + turn.new if turn.from_local else turn.new
                if not await self.store.save_response(
                    turn.tenant, obj, given, turn.lineage, turn.admitted_ms
                ):
                    obj["store"] = False  # its tenant's objects were purged while it ran
        except Busy as exc:
            raise ConversationBusy(
                f"the conversation {turn.conversation} was taken over while this response ran "
                "(its lease ran out); its items were not added",
                1.0,
            ) from exc
        except NotFound as exc:  # gone meanwhile (its tenant purged, or it expired)
            raise ObjectNotFound(
                f"the conversation {turn.conversation} was deleted while this response ran; "
                "its items were not added",
                param="conversation",
            ) from exc
        finally:
            if turn.conversation is not None and not added:
                self.pipeline.meter.later(self._unlock(turn.conversation, turn.rid))

    async def _events(self, shape: ResponseShape, o: Opened, turn: _Turn) -> AsyncIterator[bytes]:
        """The stream's events. on_end is called once however it ends; the response is stored
        before its last event (finished, failed) or, when the client left, after (in the
        background, with what was delivered)."""
        prompt = o.first.prompt_tokens
        completion = 0
        ended: End | None = None
        error: APIError | None = None
        started = False
        try:
            for frame in shape.opening():
                yield frame
            try:
                async for ev in o.events:
                    if isinstance(ev, Delta):
                        if not started:
                            started = True
                            o.on_token()
                        if ev.text or ev.logprobs:
                            for frame in shape.piece(ev.text, ev.logprobs):
                                yield frame
                        completion += ev.tokens  # billed once its frame was handed on
                    elif isinstance(ev, End):
                        completion, ended = ev.completion_tokens, ev
                        break
                    elif isinstance(ev, Failed):
                        error = ev.error.exception()
                        break
            except Exception as exc:  # the replica's process died or the handle broke off
                log.warning("response %s broke off: %s", turn.rid, type(exc).__name__)
                error = EngineError(
                    f"the tier's replica stopped while answering ({type(exc).__name__})"
                )
            o.on_end(prompt, completion, ended, error is not None)
            usage = response_usage(prompt, completion, ended.cached_tokens if ended else 0)
            if ended is not None:
                status, incomplete = outcome(ended.finish_reason)
                closing = shape.ending(status)
                obj = shape.resource(status, shape.items, usage, incomplete=incomplete)
            else:
                closing = shape.ending("incomplete")
                err = {
                    "code": (error.code if error else None) or "server_error",
                    "message": error.message if error else "failed",
                }
                obj = shape.resource("failed", shape.items, usage, error=err)
            for frame in closing:
                yield frame
            try:
                await self._keep(turn, obj, shape.items, finished=ended is not None)
            except (RedisError, ConversationBusy, ObjectNotFound) as exc:
                # status 200 is sent: the response could not be kept, so it fails in-band
                code = exc.code if isinstance(exc, APIError) else "store_unavailable"
                obj = {**obj, "status": "failed", "error": {"code": code, "message": str(exc)}}
            yield shape.final(obj)
            yield DONE  # the terminal frame of Open Responses (OpenAI's clients stop at it too)
        finally:
            if not turn.done:  # the client left: keep what was delivered, in the background
                o.on_end(prompt, completion, ended)
                items = shape.so_far("incomplete")
                obj = shape.resource(
                    "incomplete",
                    items,
                    response_usage(prompt, completion),
                    incomplete={"reason": "client_disconnected"},
                )
                turn.done = True
                self.pipeline.meter.later(self._keep_late(turn, obj, items))
            await o.events.aclose()

    async def _keep_late(
        self, turn: _Turn, obj: dict[str, Any], items: list[dict[str, Any]]
    ) -> None:
        try:
            await self._keep(turn, obj, items, finished=False)
        except (RedisError, APIError) as exc:
            log.warning("response %s not kept: %s", turn.rid, type(exc).__name__)


def _affinity(body: CreateResponseRequest, turn: _Turn) -> str:
    """What keeps a response on the replica that holds its history: its prompt_cache_key, else
    its conversation, else the first response of its previous_response_id chain (a chain's
    first response is keyed by its own id, so its successors find its prefix)."""
    if body.prompt_cache_key:
        return "key:" + body.prompt_cache_key
    if turn.conversation is not None or turn.lineage.conv is not None:
        return "conv:" + str(turn.conversation or turn.lineage.conv)
    if turn.lineage.chain:
        return "resp:" + turn.lineage.chain[0]
    if turn.from_local and turn.local is not None and turn.local.first:
        return "resp:" + turn.local.first
    return "resp:" + (body.previous_response_id or turn.rid)


def _sealed_at(i: int) -> str:
    return f"input[{i}].encrypted_content"


def _constraint(body: CreateResponseRequest) -> tuple[Constraint | None, str | None]:
    """The grammar a response's answer keeps to and the system turn that tells the model of
    it: its tools as tool_choice says (zerolayer.gateway.tools), or its text.format's JSON."""
    defs = [(t.name, t.description, t.parameters) for t in body.tools or []]
    functions = functions_of(defs, "tools[{i}].{field}")
    choice = chosen(body.tool_choice, functions, "tool_choice")
    form = body.format()
    constraint = None
    if form is not None:
        constraint = json_constraint(form.response_format(), "text.format.schema")
    if choice == "none":
        return constraint, instruction(constraint)
    if constraint is not None:
        raise InvalidRequest(
            "text.format JSON and tools are not served together: give tool_choice 'none' or "
            "drop one of them",
            param="text.format",
        )
    parallel = body.parallel_tool_calls and body.max_tool_calls != 1
    return tool_constraint(functions, choice, parallel), tool_prompt(functions, choice)
