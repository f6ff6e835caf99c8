"""POST /v1/responses/compact: a long conversation made short. The items to compact are the
request's input after the history of its previous_response_id (either may be missing, not
both). The tier named by `model` writes a summary of all of them (greedy, at most
SUMMARY_TOKENS tokens; the oldest items are dropped first when they do not fit its context);
the reply's output is every user message among them, in order, followed by one compaction item
whose encrypted_content is the summary sealed for the key's tenant (AES-GCM, store.signing).

The client sends that output back as the input of its next response (or of another compaction);
the gateway opens each compaction item there and the model reads it as a system message with the
summary. A compaction item that was altered, or made for another tenant, is a 400 naming it.
Nothing is stored: the compaction is billed as a request of its own (prompt and summary tokens,
endpoint `responses.compact`)."""

from __future__ import annotations

import time
from typing import Any

from zerolayer.conversations import COMPACTION, messages_of, new_id
from zerolayer.errors import APIError, InvalidRequest
from zerolayer.gateway.fit import Truncate
from zerolayer.gateway.meter import status_of
from zerolayer.gateway.pipeline import Answered, Ask
from zerolayer.gateway.response_bodies import CompactRequest
from zerolayer.gateway.response_objects import response_usage
from zerolayer.gateway.responses import Responder
from zerolayer.protocol import PromptInput
from zerolayer.store.keys import ApiKeyRecord

__all__ = ["SUMMARY_TOKENS", "compact"]

SUMMARY_TOKENS = 256
INSTRUCTION = (
    "Summarise the conversation above so that an assistant can continue it without reading "
    "it: the user's goals, the facts and names given, what was decided, the tools called and "
    "what they returned, and what is still open. Write plain sentences, without a preamble."
)


def _kept(item: dict[str, Any]) -> bool:
    """Whether an item stays as it is in a compacted output (the user's own messages)."""
    return item.get("type", "message") == "message" and item.get("role") == "user"


async def compact(responder: Responder, body: CompactRequest, record: ApiKeyRecord) -> dict:
    """The compacted output of a request's items, as the response.compaction object."""
    if body.input is None and body.previous_response_id is None:
        raise InvalidRequest(
            "nothing to compact: give input, previous_response_id or both", param="input"
        )
    pipeline = responder.pipeline
    rid = new_id("resp")
    try:
        call = await pipeline.begin(record, body.model, rid, "responses.compact")
        try:
            turn = await responder.read_turn(body, record, rid)
            items = turn.history + turn.new
            head = [{"role": "system", "content": body.instructions}] if body.instructions else []
            said = messages_of(items, turn.summaries)
            ask = Ask(
                body.model,
                rid,
                "responses.compact",
                PromptInput(messages=head + said + [{"role": "user", "content": INSTRUCTION}]),
                max_tokens=SUMMARY_TOKENS,
                temperature=0.0,
                fit=Truncate(keep=len(head), auto=True, counts=responder.counts),
            )
            answer = await pipeline.run(call, ask)
        except BaseException as exc:
            pipeline.meter.finish(call, 0, 0, status_of(exc))  # a no-op once it was settled
            raise
    except APIError as exc:
        exc.request_id = rid
        raise
    assert isinstance(answer, Answered), "a compaction is answered whole"
    end = answer.end
    sealed = await responder.signer.seal(record.owner, end.text.strip())
    item = {"type": COMPACTION, "id": new_id("cmp"), "encrypted_content": sealed}
    return {
        "id": rid,
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [it for it in items if _kept(it)] + [item],
        "usage": response_usage(end.prompt_tokens, end.completion_tokens, end.cached_tokens),
    }
