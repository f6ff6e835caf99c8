"""What `client.with_raw_response` returns: the HTTP answer's status and headers (the request id,
the key's rate limits, whether an Idempotency-Key replayed it) with the parsed object one
`parse()` away."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import httpx

__all__ = ["APIResponse", "RateLimit", "parse_duration"]

T = TypeVar("T")

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str | None) -> float | None:
    """Seconds of an x-ratelimit-reset-* value: "37s", "1m30s", "250ms" or a bare number."""
    if text is None:
        return None
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT[u] for n, u in parts)


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class RateLimit:
    """The key's per-minute limits as one answer reported them (x-ratelimit-* headers); None
    where the plan has no such limit."""

    limit_requests: int | None
    remaining_requests: int | None
    reset_requests_s: float | None
    limit_tokens: int | None
    remaining_tokens: int | None
    reset_tokens_s: float | None

    @classmethod
    def from_headers(cls, headers: httpx.Headers) -> RateLimit:
        def h(name: str) -> str | None:
            value: str | None = headers.get(f"x-ratelimit-{name}")
            return value

        return cls(
            _int(h("limit-requests")),
            _int(h("remaining-requests")),
            parse_duration(h("reset-requests")),
            _int(h("limit-tokens")),
            _int(h("remaining-tokens")),
            parse_duration(h("reset-tokens")),
        )


class APIResponse(Generic[T]):
    """A raw answer: `headers`, `status_code`, `request_id`, `ratelimit`, `retries_taken`,
    and `parse()` for the object the method returns otherwise (for a stream: the stream, whose
    HTTP response stays open until it is read or closed)."""

    def __init__(self, response: httpx.Response, parse: Callable[[], T], retries_taken: int):
        self.http_response = response
        self.retries_taken = retries_taken
        self._parse = parse
        self._parsed: list[T] = []

    @property
    def headers(self) -> httpx.Headers:
        return self.http_response.headers

    @property
    def status_code(self) -> int:
        return self.http_response.status_code

    @property
    def request_id(self) -> str | None:
        """The platform's id of this answer (x-request-id), for support and its logs."""
        value: str | None = self.headers.get("x-request-id")
        return value

    @property
    def replayed(self) -> bool:
        """Whether the platform answered from an earlier request with the same
        Idempotency-Key (it ran once, and was billed once)."""
        return bool(self.headers.get("idempotent-replayed") == "true")

    @property
    def ratelimit(self) -> RateLimit:
        return RateLimit.from_headers(self.headers)

    def parse(self) -> T:
        """The typed object (parsed once)."""
        if not self._parsed:
            self._parsed.append(self._parse())
        return self._parsed[0]

    def __repr__(self) -> str:
        return f"<APIResponse {self.status_code} request_id={self.request_id}>"
