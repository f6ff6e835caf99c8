"""One small exception hierarchy. At the HTTP edge each maps to an OpenAI-format error body."""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "ZerolayerError",
    "ConfigError",
    "ArtifactError",
    "ClusterError",
    "APIError",
    "InvalidRequest",
    "AuthenticationFailed",
    "PermissionDenied",
    "ModelNotFound",
    "ContextLengthExceeded",
    "ObjectNotFound",
    "ConversationBusy",
    "PayloadTooLarge",
    "RequestTimeout",
    "RetryLater",
    "RateLimited",
    "Overloaded",
    "StoreFull",
    "StoreUnavailable",
    "ShuttingDown",
    "TierUnavailable",
    "TierBuilding",
    "TierFailed",
    "EngineError",
    "openai_error_body",
]


class ZerolayerError(Exception):
    """Base of every error zerolayer raises on purpose."""


class ConfigError(ZerolayerError):
    """The platform config or a CLI argument is wrong; the message says how."""


class ArtifactError(ZerolayerError):
    """A model or tier artifact is missing or broken."""


class ClusterError(ZerolayerError):
    """The Kubernetes API could not be reached, or refused what `zerolayer cluster` asked
    (`status`: the API server's HTTP status, when it answered)."""

    status: int | None = None


class APIError(ZerolayerError):
    """An error that becomes an HTTP response in the OpenAI error format."""

    status_code = 500
    error_type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.request_id: str | None = None  # set by the gateway once the request has one

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI clients understand."""
        return openai_error_body(self.message, self.error_type, self.param, self.code)

    def headers(self) -> dict[str, str]:
        """HTTP headers that go with the error (x-request-id; Retry-After on 429 and 503)."""
        return {"x-request-id": self.request_id} if self.request_id else {}


class InvalidRequest(APIError):
    """The request body is malformed or asks for something impossible."""

    status_code = 400
    error_type = "invalid_request_error"


class AuthenticationFailed(APIError):
    """No API key, or one that is unknown or revoked."""

    status_code = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(APIError):
    """The key's plan does not include the requested tier."""

    status_code = 403
    error_type = "permission_error"
    code = "tier_not_in_plan"


class StorageQuotaExceeded(APIError):
    """The write would take the key's tenant past its plan's storage quota (bytes or stored
    objects): nothing was written; deleting stored objects makes room."""

    status_code = 403
    error_type = "insufficient_quota"
    code = "storage_quota_exceeded"


class ModelNotFound(APIError):
    """The model id names no served model or tier."""

    status_code = 404
    error_type = "invalid_request_error"
    code = "model_not_found"


class ObjectNotFound(APIError):
    """No stored response, conversation or item of that id for this key's tenant (another
    tenant's objects are reported exactly like missing ones)."""

    status_code = 404
    error_type = "invalid_request_error"
    code = "not_found"


class ContextLengthExceeded(InvalidRequest):
    """Prompt plus max_tokens exceed what the tier serves."""

    code = "context_length_exceeded"


class ClientGone(APIError):
    """The client closed its connection before its whole answer was ready (nobody reads this
    error: it ends the request's handling)."""

    status_code = 499
    error_type = "invalid_request_error"
    code = "client_disconnected"


class PayloadTooLarge(InvalidRequest):
    """The request body is over the configured size."""

    status_code = 413
    code = "request_too_large"


class RequestTimeout(InvalidRequest):
    """The client sent its body too slowly."""

    status_code = 408
    code = "request_timeout"


class RetryLater(APIError):
    """A refusal that clears with time: the response carries Retry-After (seconds)."""

    def __init__(self, message: str, retry_after: float, *, code: str | None = None):
        super().__init__(message, code=code)
        self.retry_after = max(1, math.ceil(retry_after))

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "retry-after": str(self.retry_after)}


class RateLimited(RetryLater):
    """A per-key limit of the plan is reached; `code` names it."""

    status_code = 429
    error_type = "rate_limit_error"


class Overloaded(RetryLater):
    """Admission control shed the request: the tier's queue wait is over its threshold."""

    status_code = 503
    error_type = "server_error"
    code = "tier_overloaded"


class ConversationBusy(RetryLater):
    """Another response is being generated on the conversation: its items would interleave."""

    status_code = 409
    error_type = "invalid_request_error"
    code = "conversation_busy"


class StoreUnavailable(RetryLater):
    """The platform's Redis does not answer: nothing was taken or changed, retry."""

    status_code = 503
    error_type = "server_error"
    code = "store_unavailable"


class StoreFull(RetryLater):
    """The platform's Redis is at its memory limit and refuses writes (nothing stored is
    dropped to make room): nothing was taken or changed; an operator must make room."""

    status_code = 503
    error_type = "server_error"
    code = "store_full"


class ShuttingDown(RetryLater):
    """The gateway is draining before it stops: it takes no new request."""

    status_code = 503
    error_type = "server_error"
    code = "shutting_down"


class TierUnavailable(RetryLater):
    """No replica of the tier took the request in time (it is starting or restarting)."""

    status_code = 503
    error_type = "server_error"
    code = "tier_unavailable"


class TierBuilding(RetryLater):
    """The tier's artifact is still being built; it joins the platform when ready."""

    status_code = 503
    error_type = "server_error"
    code = "tier_building"


class TierFailed(APIError):
    """The tier's artifact failed to build; the next start of the platform tries again."""

    status_code = 503
    error_type = "server_error"
    code = "tier_failed"


class EngineError(APIError):
    """The engine failed while serving a request."""

    status_code = 503
    error_type = "server_error"
    code = "engine_error"


def openai_error_body(
    message: str, error_type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """{"error": {...}} as the OpenAI API returns it."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
