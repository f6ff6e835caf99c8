"""One hierarchy for every error the SDK raises. An HTTP error status maps to a class pinned to
it (`RateLimitError.status_code == 429`); each carries the server's error body, its `code`,
`type` and `param`, and the request id the platform gave the answer. Connection failures and
timeouts are apart: no answer arrived."""

from __future__ import annotations

import email.utils
import time
from typing import Any

import httpx

__all__ = [
    "ZerolayerError",
    "APIError",
    "APIStatusError",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "RequestTimeoutError",
    "ConflictError",
    "RequestTooLargeError",
    "UnprocessableEntityError",
    "RateLimitError",
    "InternalServerError",
    "ServiceUnavailableError",
    "APIConnectionError",
    "APITimeoutError",
    "APIResponseValidationError",
    "StreamError",
]


class ZerolayerError(Exception):
    """Base of everything the SDK raises on purpose (a missing API key, too)."""


class APIError(ZerolayerError):
    """An error about a request: the server's error object when it sent one."""

    def __init__(
        self,
        message: str,
        request: httpx.Request | None,
        *,
        body: Any = None,
        request_id: str | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.request = request
        self.body = body  # the whole JSON error body, as sent
        error = body.get("error") if isinstance(body, dict) else None
        error = error if isinstance(error, dict) else {}
        self.code: str | None = error.get("code")
        self.type: str | None = error.get("type")
        self.param: str | None = error.get("param")
        self.request_id = request_id

    def __str__(self) -> str:
        where = f" (request {self.request_id})" if self.request_id else ""
        code = f"{self.code}: " if self.code else ""
        return f"{code}{self.message}{where}"


class APIStatusError(APIError):
    """The server answered with an error status (4xx or 5xx)."""

    status_code: int = 0

    def __init__(self, message: str, response: httpx.Response, *, body: Any = None):
        super().__init__(
            message, response.request, body=body, request_id=response.headers.get("x-request-id")
        )
        self.response = response
        self.status_code = response.status_code

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked to wait before a retry (Retry-After), if it said."""
        return retry_after(self.response.headers)

    def __str__(self) -> str:
        return f"Error {self.status_code}: {super().__str__()}"


class BadRequestError(APIStatusError):
    """400: the request is malformed or asks for something the tier cannot do."""

    status_code = 400


class AuthenticationError(APIStatusError):
    """401: no API key, or an unknown or revoked one."""

    status_code = 401


class PermissionDeniedError(APIStatusError):
    """403: the key's plan does not include the tier (or the admin API is off)."""

    status_code = 403


class NotFoundError(APIStatusError):
    """404: no such model, tier, stored object, key or tenant (for this key's tenant)."""

    status_code = 404


class RequestTimeoutError(APIStatusError):
    """408: the body did not arrive in time."""

    status_code = 408


class ConflictError(APIStatusError):
    """409: the conversation is busy, or the same Idempotency-Key is still running."""

    status_code = 409


class RequestTooLargeError(APIStatusError):
    """413: the body is over the platform's size limit."""

    status_code = 413


class UnprocessableEntityError(APIStatusError):
    """422: the Idempotency-Key was used with another body."""

    status_code = 422


class RateLimitError(APIStatusError):
    """429: a limit of the key's plan is reached; `code` names it (requests_per_minute,
    tokens_per_minute, concurrent_requests, monthly_budget)."""

    status_code = 429


class InternalServerError(APIStatusError):
    """5xx: the platform failed or cannot serve the request now."""

    status_code = 500


class ServiceUnavailableError(InternalServerError):
    """503: the tier is building, starting, overloaded (shed) or the store is down."""

    status_code = 503


_BY_STATUS: dict[int, type[APIStatusError]] = {
    cls.status_code: cls
    for cls in (
        BadRequestError,
        AuthenticationError,
        PermissionDeniedError,
        NotFoundError,
        RequestTimeoutError,
        ConflictError,
        RequestTooLargeError,
        UnprocessableEntityError,
        RateLimitError,
        ServiceUnavailableError,
    )
}


class APIConnectionError(APIError):
    """No answer: the connection failed or broke before the response arrived."""

    def __init__(self, request: httpx.Request, message: str = "Connection error."):
        super().__init__(message, request)


class APITimeoutError(APIConnectionError):
    """No answer within the timeout."""

    def __init__(self, request: httpx.Request):
        super().__init__(request, "Request timed out.")


class APIResponseValidationError(APIError):
    """The answer did not have the shape this SDK expects (a server of another version?)."""

    def __init__(self, response: httpx.Response, body: Any, message: str):
        super().__init__(
            message, response.request, body=body, request_id=response.headers.get("x-request-id")
        )
        self.response = response
        self.status_code = response.status_code


class StreamError(APIError):
    """An error the server sent inside a stream, after its status 200 (the tier failed
    mid-answer, or a replayed stream whose first client left). `partial` is what the stream
    had delivered, as the stream's final object (a Response for the Responses API)."""

    def __init__(self, body: Any, request: httpx.Request | None, request_id: str | None):
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        super().__init__(
            str(message or "the stream failed"), request, body=body, request_id=request_id
        )
        self.partial: Any = None


def status_error(response: httpx.Response, body: Any) -> APIStatusError:
    """The exception for an error status, with the server's message when it sent one."""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not message:
        message = body if isinstance(body, str) and body else response.reason_phrase
    code = response.status_code
    cls = _BY_STATUS.get(code) or (InternalServerError if code >= 500 else APIStatusError)
    return cls(str(message), response, body=body)


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds asked for by retry-after-ms or Retry-After (seconds or an HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
