"""One tier of one model: builds the prompt, runs the engine, reports exact token counts.

Results travel as small dict events so they cross Ray handles cheaply:
  {"event": "start", "prompt_tokens": n}
  {"event": "delta", "text": str, "tokens": k}
  {"event": "end", "finish_reason": str, "prompt_tokens": n, "completion_tokens": m,
   "decode_s": seconds from the first token to the end}
  {"event": "error", "status": int, "body": {...OpenAI error...}}
An error before "start" means nothing was generated; after it, the stream stops there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from zerolayer.engines.base import Engine, SamplingSpec
from zerolayer.errors import APIError, ContextLengthExceeded, EngineError, InvalidRequest
from zerolayer.tokenfix.prompt import PromptBuilder

__all__ = ["TierReplica", "completion_budget"]

log = logging.getLogger(__name__)


def completion_budget(
    max_model_len: int, prompt_tokens: int, asked: int | None, default_max_tokens: int
) -> int:
    """max_tokens of a request: what it asked for, else the default within the context; raises
    ContextLengthExceeded (a 400 that states both numbers) when the prompt leaves no room."""
    room = max_model_len - prompt_tokens
    if room < 1 or (asked is not None and asked > room):
        raise ContextLengthExceeded(
            f"this model's context is {max_model_len} tokens; the prompt has {prompt_tokens} "
            f"tokens and max_tokens asks for {asked if asked is not None else 1} more",
            param="max_tokens" if asked is not None and room >= 1 else "messages",
        )
    return asked if asked is not None else min(default_max_tokens, room)


class TierReplica:
    """Serves one model tier through any engine of the protocol."""

    def __init__(
        self,
        model_id: str,
        engine: Engine,
        prompts: PromptBuilder,
        max_model_len: int,
        default_max_tokens: int,
    ):
        self.model_id = model_id
        self.engine = engine
        self.prompts = prompts
        self.max_model_len = max_model_len
        self.default_max_tokens = default_max_tokens
        self.card: dict[str, Any] = {"tier": model_id.partition(":")[2]}

    async def start(self) -> None:
        """Start the engine."""
        await self.engine.start()

    def _spec(self, req: dict[str, Any]) -> SamplingSpec:
        if req.get("prompt_token_ids") is not None:  # tokenfix already built and counted it
            ids = list(req["prompt_token_ids"])
        elif req.get("messages") is not None:
            ids = self.prompts.chat(req["messages"])
        else:
            ids = self.prompts.completion(req["prompt"])
        if not ids:
            raise InvalidRequest("the prompt is empty", param="prompt")
        max_tokens = completion_budget(
            self.max_model_len, len(ids), req.get("max_tokens"), self.default_max_tokens
        )
        return SamplingSpec(
            request_id=req["request_id"],
            prompt_token_ids=ids,
            max_tokens=max_tokens,
            temperature=req.get("temperature", 1.0),
            top_p=req.get("top_p", 1.0),
            seed=req.get("seed"),
            stop=list(req.get("stop") or []),
        )

    async def stream(self, req: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Events for one request (see the module doc)."""
        try:
            spec = self._spec(req)
        except APIError as exc:
            yield {"event": "error", "status": exc.status_code, "body": exc.body()}
            return
        prompt_tokens = len(spec.prompt_token_ids)
        yield {"event": "start", "prompt_tokens": prompt_tokens}
        completion = 0
        finish = None
        first_at: float | None = None
        try:
            async for delta in self.engine.generate(spec):
                if first_at is None and delta.token_ids:
                    first_at = time.monotonic()
                completion += len(delta.token_ids)
                finish = delta.finish_reason or finish
                if delta.text or delta.token_ids:
                    yield {"event": "delta", "text": delta.text, "tokens": len(delta.token_ids)}
        except Exception as exc:  # the engine broke mid-request: report, with what was delivered
            log.exception("engine failed on %s", spec.request_id)
            err = EngineError(f"the engine failed while generating: {type(exc).__name__}")
            yield {
                "event": "error",
                "status": err.status_code,
                "body": err.body(),
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
            }
            return
        yield {
            "event": "end",
            "finish_reason": finish or "stop",
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            # from the first token on: the gateway subtracts it to measure the queue wait
            "decode_s": time.monotonic() - first_at if first_at is not None else 0.0,
        }

    async def complete(self, req: dict[str, Any]) -> dict[str, Any]:
        """The whole result of one request as a single event ("end" with text, or "error")."""
        parts: list[str] = []
        async for ev in self.stream(req):
            if ev["event"] == "delta":
                parts.append(ev["text"])
            elif ev["event"] in ("end", "error"):
                return {**ev, "text": "".join(parts)}
        raise EngineError("the engine ended a request without a finish")

    async def check_health(self) -> None:
        """Raise if the engine cannot serve."""
        await self.engine.check_health()
