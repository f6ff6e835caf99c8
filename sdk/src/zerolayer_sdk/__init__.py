"""zerolayer's Python SDK: `Client` and `AsyncClient` for the platform's OpenAI-compatible API
(chat and text completions, the Responses and Conversations APIs, models with their tier cards,
usage, invoices, chunking) and its admin API. Every POST carries one Idempotency-Key, reused by
its retries, so a retried request runs and is billed once."""

from . import types
from ._base_client import DEFAULT_BASE_URL, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT
from ._client import AsyncClient, Client
from ._exceptions import (
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RequestTimeoutError,
    RequestTooLargeError,
    ServiceUnavailableError,
    StreamError,
    UnprocessableEntityError,
    ZerolayerError,
)
from ._models import NOT_GIVEN, BaseModel, NotGiven
from ._pagination import AsyncPage, AsyncPaginator, Page
from ._response import APIResponse, RateLimit
from ._streaming import AsyncStream, Stream
from ._version import __version__

__all__ = [
    "__version__",
    "types",
    "Client",
    "AsyncClient",
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_TIMEOUT",
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
    "APIResponse",
    "RateLimit",
    "Stream",
    "AsyncStream",
    "Page",
    "AsyncPage",
    "AsyncPaginator",
    "BaseModel",
    "NOT_GIVEN",
    "NotGiven",
]
