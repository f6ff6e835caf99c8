"""What crosses a Ray Serve handle between deployments, as types.

The request path is one-way (gateway -> tokenfix -> chunker -> replica -> gateway), and each hop
passes small dataclasses (slots, no dicts tagged by strings; the requests frozen, the answers
plain, which unpickle faster), so they pickle cheaply and a reader sees every field:

  gateway  -> tokenfix   PromptInput                    -> Prompt | Failed
  gateway  -> chunker    text + ChunkOptions            -> Chunks | Failed
  gateway  -> replica    SamplingSpec (the prepared request: token ids, sampling, max_tokens
                         decided once, in the gateway)  -> Start, Delta..., End | Failed
  every hop is addressed by a Target (model, tier, and whether the tier's short-request group).

An error crosses as one value, `Failed(error=ErrorValue)`, never as an exception or a JSON body;
the gateway turns it into an HTTP response in one place (its APIError handler). A `Failed` before
`Start` means nothing was generated; after it, the stream stops there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NoReturn

from zerolayer.errors import APIError, openai_error_body

__all__ = [
    "Target",
    "Constraint",
    "TopLogprob",
    "TokenLogprob",
    "SamplingSpec",
    "PromptInput",
    "Prompt",
    "ChunkOptions",
    "Chunk",
    "Chunks",
    "ErrorValue",
    "Failed",
    "Start",
    "Delta",
    "End",
    "ReplicaEvent",
]


class _Value:
    """Base of the hop values: pickled as their class and their field values in order (the
    dataclass default, a state dict set field by field, measured slower; benchmarks/protocol.py).
    The fields are the slots dataclass(slots=True) makes, in declaration order."""

    __slots__: tuple[str, ...] = ()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return type(self), tuple(getattr(self, name) for name in self.__slots__)


@dataclass(frozen=True, slots=True, order=True)
class Target(_Value):
    """A served tier: '<model>:<tier>', and `short` for its short-request replica group."""

    model: str
    tier: str
    short: bool = False

    def __str__(self) -> str:
        return f"{self.model}:{self.tier}"

    def group(self, short: bool) -> Target:
        """The same tier's short-request group (short) or its main one."""
        return Target(self.model, self.tier, short)


@dataclass(frozen=True, slots=True)
class Constraint(_Value):
    """A grammar every output token must keep to (grammar-constrained decoding): `kind`
    "json_object" (any JSON object; `spec` empty), "json_schema" (`spec`: the schema as JSON
    text), "structural_tag" (`spec`: an xgrammar structural tag as JSON text: free text with
    tagged, schema-checked parts, as tool calls are) or "regex" (`spec`: the pattern)."""

    kind: str
    spec: str = ""


@dataclass(slots=True)
class TopLogprob(_Value):
    """One of the most likely tokens at a position: its text (`bytes:` and escapes where the
    token is not whole UTF-8), UTF-8 bytes and natural-log probability."""

    token: str
    bytes: list[int]
    logprob: float


@dataclass(slots=True)
class TokenLogprob(_Value):
    """The sampled token at a position, with its log-probability under the model (before
    temperature, top_p and any grammar mask) and the `top` most likely tokens there."""

    token: str
    bytes: list[int]
    logprob: float
    top: list[TopLogprob]


@dataclass(frozen=True, slots=True)
class SamplingSpec(_Value):
    """The prepared request a replica runs: prompt token ids and sampling, with max_tokens
    decided once, in the gateway (engine-neutral; every engine takes it as it is).
    `constraint`: a grammar the output keeps to (None: free text); `logprobs`: None for
    none, k (0-20) for every output token's log-probability and its k most likely
    alternatives. `cache_salt`: the prefix cache's namespace (the tenant: prompts share cached
    blocks only within one); `affinity`: the key that sends related requests (one
    conversation, one previous_response_id chain, one prompt_cache_key) to the replica that
    holds their prefix ('' for none); `priority`: 0 for interactive requests, 1 for a batch's
    (an engine starts waiting interactive requests first and keeps room for them)."""

    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    constraint: Constraint | None = None
    logprobs: int | None = None
    cache_salt: str = ""
    affinity: str = ""
    priority: int = 0


@dataclass(frozen=True, slots=True)
class PromptInput(_Value):
    """What tokenfix turns into token ids: chat messages ({"role", "content"}) or a completion
    prompt (text, or token ids to check)."""

    messages: list[dict[str, str]] | None = None
    prompt: str | list[int] | None = None


@dataclass(slots=True)
class Prompt(_Value):
    """tokenfix's answer: the cleaned, templated and tokenized prompt."""

    token_ids: list[int]


@dataclass(frozen=True, slots=True)
class ChunkOptions(_Value):
    """How the chunker cuts: chunk size and overlap in tokens (None: its configured ones), and
    whether the text is complete (`final`) or more of it will follow."""

    chunk_tokens: int | None = None
    overlap_tokens: int | None = None
    final: bool = True


@dataclass(slots=True)
class Chunk(_Value):
    """text[start:end] of the chunked text, `tokens` tokens long."""

    text: str
    start: int
    end: int
    tokens: int


@dataclass(slots=True)
class Chunks(_Value):
    """The chunker's answer: complete chunks, and where the unconsumed rest of the text starts."""

    chunks: list[Chunk]
    rest: int


@dataclass(frozen=True, slots=True)
class ErrorValue(_Value):
    """An OpenAI-format error as a value: what an APIError raised on another hop becomes."""

    status: int
    type: str
    message: str
    param: str | None = None
    code: str | None = None

    @classmethod
    def of(cls, exc: APIError) -> ErrorValue:
        """The value of an APIError."""
        return cls(exc.status_code, exc.error_type, exc.message, exc.param, exc.code)

    def exception(self) -> APIError:
        """The APIError this value describes (for the gateway to raise)."""
        exc = APIError(self.message, param=self.param, code=self.code)
        exc.status_code = self.status
        exc.error_type = self.type
        return exc

    def body(self) -> dict[str, Any]:
        """{"error": {...}} as the OpenAI API returns it (in-band, mid-stream)."""
        return openai_error_body(self.message, self.type, self.param, self.code)


@dataclass(slots=True)
class Failed(_Value):
    """A hop failed; a replica also says how many tokens were used before it did."""

    error: ErrorValue
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @classmethod
    def of(cls, exc: APIError, prompt_tokens: int = 0, completion_tokens: int = 0) -> Failed:
        """A failure from an APIError."""
        return cls(ErrorValue.of(exc), prompt_tokens, completion_tokens)

    def raise_(self) -> NoReturn:
        """Raise the error as an APIError."""
        raise self.error.exception()


@dataclass(slots=True)
class Start(_Value):
    """A replica accepted the request: the prompt it reads."""

    prompt_tokens: int


@dataclass(slots=True)
class Delta(_Value):
    """New output text and how many tokens it took; with `logprobs` asked for, one entry per
    token; `index`: the choice it belongs to (0 but for a request of several choices)."""

    text: str
    tokens: int
    logprobs: list[TokenLogprob] | None = None
    index: int = 0  # the choice it belongs to (a request of several choices)


@dataclass(slots=True)
class End(_Value):
    """The request finished: why, the tokens used, and the seconds it waited before the engine
    started it (admission control's measure; None if it never started). `text` is the whole
    output when the request was run whole (complete), empty when it was streamed. `ttft_s`:
    seconds from the replica taking the request to its first token; `tpot_s`: seconds per
    output token after the first (None with fewer than two). `cached_tokens`: prompt tokens the
    engine served from its prefix cache (0 when it has none or cannot tell). `logprobs`: a
    whole request's per-token log-probabilities, when it asked for them."""

    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    queue_s: float | None = None
    text: str = ""
    ttft_s: float | None = None
    tpot_s: float | None = None
    cached_tokens: int = 0
    logprobs: list[TokenLogprob] | None = None
    index: int = 0  # the choice it ends (a request of several choices)


ReplicaEvent = Start | Delta | End | Failed
