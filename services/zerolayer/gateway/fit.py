"""Fitting a prompt into its tier's context: the pipeline's tokenize-and-budget step
(zerolayer.gateway.pipeline), with what to do about a prompt too long for the context as a
strategy the endpoint chooses:

- `Refuse` (chat and text completions by default; the Responses API with truncation
  'disabled'): a 400 that states both numbers; the tokens read count against the key's tokens
  per minute.
- `Summarize` (a chat request with "long_prompt": "summarize"): the longest message is
  summarised by the same tier (zerolayer.gateway.summarize), the whole job admitted and
  reserved once before any model call.
- `Truncate` (the Responses API; truncation 'auto'): the fewest oldest items are dropped,
  never the instructions, and at least the newest item stays; with truncation 'disabled', a
  400 as Refuse's. A stored history can be far longer than the context: its items are counted
  newest first (a lower bound of each one's tokens, cached per item: `TokenCounts`) and the
  items older than the context holds are never tokenized.

A strategy answers a `Fitted`: the prompt's token ids, max_tokens, and the prompt as sent.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn, Protocol

from zerolayer.config import PlatformConfig
from zerolayer.errors import APIError, ContextLengthExceeded
from zerolayer.gateway.meter import Call, Meter
from zerolayer.gateway.parts import Backend, prompt_ids
from zerolayer.gateway.summarize import SUMMARY_NOTE, plan_summary
from zerolayer.protocol import PromptInput, Target

__all__ = [
    "Fit",
    "Fitted",
    "Fitting",
    "Refuse",
    "Summarize",
    "TokenCounts",
    "Truncate",
    "completion_budget",
]


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


@dataclass(frozen=True)
class Fitted:
    """A prompt that fits: its token ids, max_tokens, and the prompt as it is sent (for
    traffic sampling). reserved: the strategy reserved the request's tokens itself."""

    ids: list[int]
    max_tokens: int
    text: PromptInput
    reserved: bool = False


@dataclass
class Fitting:
    """What a strategy works with: one call on its tier, the tokenizer, the meter."""

    backend: Backend
    config: PlatformConfig
    meter: Meter
    call: Call
    asked: int | None  # max_tokens the request asked for
    shed: Callable[[], None]  # admission control, for a further call to the tier
    route: Callable[[int], Target]  # the backend target of a prompt of n tokens

    @property
    def max_len(self) -> int:
        return self.config.models[self.call.target.model].max_model_len

    async def ids(self, text: PromptInput) -> list[int]:
        """tokenfix's token ids of a prompt."""
        return await prompt_ids(self.backend, self.call.target.model, text)

    def budget(self, prompt_tokens: int) -> int:
        """max_tokens for a prompt of this many tokens (ContextLengthExceeded if none)."""
        default = self.config.gateway.default_max_tokens
        return completion_budget(self.max_len, prompt_tokens, self.asked, default)

    async def refused(self, prompt_tokens: int, overflow: ContextLengthExceeded) -> NoReturn:
        """Refuse a prompt that does not fit: the tokens read count against the key's tokens
        per minute."""
        await self.meter.reserve(self.call.record, self.call.reservation, prompt_tokens, 0)
        self.call.tokenized = prompt_tokens
        raise overflow


class Fit(Protocol):
    """A strategy of the tokenize-and-budget step."""

    async def __call__(self, f: Fitting, text: PromptInput) -> Fitted: ...


class Refuse:
    """A prompt over the context is a 400 that states both numbers."""

    async def __call__(self, f: Fitting, text: PromptInput) -> Fitted:
        ids = await f.ids(text)
        try:
            return Fitted(ids, f.budget(len(ids)), text)
        except ContextLengthExceeded as overflow:
            await f.refused(len(ids), overflow)


class Summarize:
    """The longest message of a chat prompt over the context is summarised by map-reduce on
    the same tier; one reservation covers every map call and the final answer, and each map
    call counts as a request of the key's minute."""

    async def __call__(self, f: Fitting, text: PromptInput) -> Fitted:
        ids = await f.ids(text)
        try:
            return Fitted(ids, f.budget(len(ids)), text)
        except ContextLengthExceeded as overflow:
            if text.messages is None:
                await f.refused(len(ids), overflow)
            chunker, call = f.config.chunker, f.call
            call.job = job = await plan_summary(
                f.backend,
                call.target.model,
                f.route(0),
                call.reservation.request_id,
                text.messages or [],
                f.max_len,
                chunker.chunk_tokens,
                chunker.summary_tokens,
                overflow,
                chunker.max_summary_chunks,
                f.shed,
            )
        prompt, completion = job.reserve()
        prompt += f.max_len
        completion += f.asked or f.config.gateway.default_max_tokens
        await f.meter.priced(call, prompt, completion, extra=job.most_calls())
        summary = await job.run()
        messages = [dict(m) for m in text.messages or []]
        messages[job.index]["content"] = SUMMARY_NOTE + summary
        summarised = PromptInput(messages=messages)
        ids = await f.ids(summarised)
        return Fitted(ids, f.budget(len(ids)), text, reserved=True)


# a prompt of up to this many characters per token of room is tokenized whole at once (no
# more work than any request's own prompt); a longer one is counted item by item first
SHORT_CHARS_PER_TOKEN = 8


class TokenCounts:
    """Lower bounds of the tokens of chat messages, per model, remembered for the most recent
    `size` messages (a replica's; a stored history's items are counted once, not at every
    turn that continues it). A message's bound is its text's tokens alone, less one (the
    template's tokens around it, and a merge across its edge, only add to it)."""

    def __init__(self, size: int = 65536):
        self.size = size
        self._known: OrderedDict[tuple[str, bytes], int] = OrderedDict()

    async def of(self, f: Fitting, message: dict[str, str]) -> int:
        text = message.get("content") or ""
        key = (f.call.target.model, hashlib.blake2b(text.encode(), digest_size=16).digest())
        known = self._known.get(key)
        if known is not None:
            self._known.move_to_end(key)
            return known
        try:
            n = max(0, len(await f.ids(PromptInput(prompt=text))) - 1)
        except APIError:  # nothing left of it once cleaned
            n = 0
        self._known[key] = n
        if len(self._known) > self.size:
            self._known.popitem(last=False)
        return n


@dataclass(frozen=True)
class Truncate:
    """A chat prompt of `keep` leading messages (instructions) and then items, oldest first:
    when it does not fit, the fewest oldest items are dropped (at least the newest stays).
    auto=False refuses instead, naming the parts of a Responses request. Items are counted
    newest first (`counts`, lower bounds) until they alone pass the context: what is older is
    dropped (or refused) without being tokenized, and the refusal counts the tokens read
    against the key's tokens per minute."""

    keep: int = 0
    auto: bool = True
    counts: TokenCounts = field(default_factory=TokenCounts)

    async def __call__(self, f: Fitting, text: PromptInput) -> Fitted:
        messages = text.messages or []
        head, items = messages[: self.keep], messages[self.keep :]

        asked = f.asked if f.asked is not None else 1  # the least a fitting prompt leaves
        room = f.max_len - asked

        def fits(n: int) -> bool:
            return n <= room

        first = 0  # the oldest item that may fit
        if sum(len(m.get("content") or "") for m in messages) > SHORT_CHARS_PER_TOKEN * room:
            # a long history: newest first, until the items counted alone pass the room (what
            # is older cannot fit and is not tokenized)
            least = sum([await self.counts.of(f, m) for m in head])
            first = len(items)
            while first > 0 and fits(least):
                least += await self.counts.of(f, items[first - 1])
                first -= 1
            if not fits(least):  # items[first] and older are certainly out
                if not self.auto or first >= len(items) - 1:
                    over = self._over(f, asked, least, newest=self.auto, exact=False)
                    await f.refused(least, over)
                first += 1
        kept = PromptInput(messages=head + items[first:]) if first else text
        ids = await f.ids(kept)
        if fits(len(ids)):
            return Fitted(ids, f.budget(len(ids)), kept)
        if not self.auto:
            await f.refused(len(ids), self._over(f, asked, len(ids), newest=False, exact=True))
        rest = items[first:]
        lo, hi = 1, len(rest) - 1  # drop at least one more, keep at least the newest
        best: tuple[list[int], PromptInput] | None = None
        while lo <= hi:  # the fewest items dropped that fit
            mid = (lo + hi) // 2
            cand_text = PromptInput(messages=head + rest[mid:])
            cand = await f.ids(cand_text)
            if fits(len(cand)):
                best, hi = (cand, cand_text), mid - 1
            else:
                lo = mid + 1
        if best is None:
            await f.refused(len(ids), self._over(f, asked, len(ids), newest=True, exact=True))
        return Fitted(best[0], f.budget(len(best[0])), best[1])

    @staticmethod
    def _over(
        f: Fitting, asked: int, tokens: int, newest: bool, exact: bool
    ) -> ContextLengthExceeded:
        if newest:
            return ContextLengthExceeded(
                f"this model's context is {f.max_len} tokens; the instructions and the "
                f"newest item alone have more than {f.max_len - asked} tokens",
                param="input",
            )
        return ContextLengthExceeded(
            f"this model's context is {f.max_len} tokens; the instructions, history and input "
            f"have {'' if exact else 'at least '}{tokens} tokens and max_output_tokens asks for "
            f"{asked} more "
            "(truncation 'auto' drops the oldest items)",
            param="input",
        )
