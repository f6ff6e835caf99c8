"""How a call goes over HTTP: URL and headers, retries with backoff, the Idempotency-Key, the
error of a failed answer, and the parsed (or raw, or streamed) result. The sync and async
clients share everything here but the sending itself."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import logging
import os
import platform
import random
import time
import uuid
from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pydantic

from ._exceptions import (
    APIConnectionError,
    APIResponseValidationError,
    APITimeoutError,
    ZerolayerError,
    retry_after,
    status_error,
)
from ._response import APIResponse
from ._streaming import AsyncStream, Stream, StreamKind
from ._version import __version__

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_TIMEOUT",
    "DEFAULT_MAX_RETRIES",
    "MAX_RETRY_AFTER",
    "RETRY_COUNT_HEADER",
    "Call",
    "SyncAPIClient",
    "AsyncAPIClient",
    "json_as",
]

log = logging.getLogger("zerolayer_sdk")

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"  # what `./zl up` serves
DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=5.0)
DEFAULT_MAX_RETRIES = 2
INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0
MAX_RETRY_AFTER = 60.0  # a Retry-After longer than this is not waited for: the error is raised
RETRY_COUNT_HEADER = "x-zerolayer-retry-count"
IDEMPOTENCY_HEADER = "Idempotency-Key"

M = TypeVar("M", bound=pydantic.BaseModel)


def json_as(model: type[M]) -> Callable[[httpx.Response], M]:
    """A parser of a JSON answer into `model`."""

    def parse(response: httpx.Response) -> M:
        body = _json(response)
        try:
            return model.model_validate(body)
        except pydantic.ValidationError as exc:
            raise APIResponseValidationError(
                response, body, f"the answer is not a valid {model.__name__}: {exc}"
            ) from exc

    return parse


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIResponseValidationError(response, response.text, "the answer is not JSON") from exc


def _read(response: httpx.Response) -> None:
    try:
        response.read()
    finally:
        response.close()


async def _aread(response: httpx.Response) -> None:
    try:
        await response.aread()
    finally:
        await response.aclose()


def _error_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return response.text


@dataclass(frozen=True)
class Call:
    """One API call as a resource method describes it."""

    method: str
    path: str  # under the base URL ("/chat/completions"); from the server's root if root
    parse: Callable[[httpx.Response], Any] | None = None  # the result of a whole answer
    stream: Callable[[], StreamKind[Any, Any]] | None = None  # the result is a stream
    json: Any = None
    params: Mapping[str, Any] | None = None
    # a body sent as it is made (text/plain): made anew for each attempt
    content: Callable[[], bytes | Iterable[bytes] | AsyncIterable[bytes]] | None = None
    content_type: str | None = None
    accept: str | None = None  # default: JSON, or server-sent events for a stream
    replayable: bool = True  # False: the content can be sent once only (no retries)
    idempotent_key: bool = True  # a POST carries an Idempotency-Key
    admin: bool = False  # authorised with the admin key
    root: bool = False  # path from the server's root (/admin/...), not under /v1


def _loopback(url: httpx.URL) -> bool:
    host = url.host
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _local_secret(name: str) -> str | None:
    """A key `./zl up` keeps in its cache folder (dev-key, admin-key), for a local platform."""
    cache = os.environ.get("ZEROLAYER_CACHE_DIR") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "zerolayer"
    )
    try:
        return (Path(cache) / name).read_text().strip() or None
    except OSError:
        return None


def _timeout(value: float | httpx.Timeout | None) -> httpx.Timeout:
    if value is None:
        return DEFAULT_TIMEOUT
    if isinstance(value, httpx.Timeout):
        return value
    return httpx.Timeout(float(value), connect=min(5.0, float(value)))


class _ClientBase:
    """Configuration and everything about a call that is not I/O."""

    _stream_cls: type[Stream[Any, Any]] | type[AsyncStream[Any, Any]] = Stream

    def __init__(
        self,
        *,
        api_key: str | None = None,
        admin_key: str | None = None,
        base_url: str | httpx.URL | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int | None = None,
        default_headers: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        _raw: bool = False,
    ):
        url = base_url or os.environ.get("ZEROLAYER_BASE_URL") or DEFAULT_BASE_URL
        self.base_url = httpx.URL(str(url).rstrip("/"))
        local = _loopback(self.base_url)
        # keys given (arguments, environment) go to any address; those `./zl up` keeps on
        # this machine only to a platform on it, and never into a copy for another address
        self._given = (
            api_key or os.environ.get("ZEROLAYER_API_KEY"),
            admin_key or os.environ.get("ZEROLAYER_ADMIN_KEY"),
        )
        self.api_key = self._given[0] or (_local_secret("dev-key") if local else None)
        self.admin_key = self._given[1] or (_local_secret("admin-key") if local else None)
        self.timeout = _timeout(timeout)
        self.max_retries = DEFAULT_MAX_RETRIES if max_retries is None else int(max_retries)
        if self.max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        self.default_headers = dict(default_headers or {})
        self.idempotency_key = idempotency_key
        self._raw = _raw

    def _options(self) -> dict[str, Any]:
        """The arguments that make a copy of this client."""
        return {
            "api_key": self._given[0],
            "admin_key": self._given[1],
            "base_url": self.base_url,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "default_headers": self.default_headers,
            "idempotency_key": self.idempotency_key,
            "_raw": self._raw,
        }

    def _url(self, call: Call) -> httpx.URL:
        if not call.root:
            return self.base_url.copy_with(path=self.base_url.path.rstrip("/") + call.path)
        base = self.base_url.path.rstrip("/")
        base = base[: -len("/v1")] if base.endswith("/v1") else base
        return self.base_url.copy_with(path=base + call.path)

    def _headers(self, call: Call, retries: int, key: str | None) -> dict[str, str]:
        secret = self.admin_key if call.admin else self.api_key
        if call.admin and secret is None:
            secret = self.api_key
        if secret is None:
            which = (
                "an admin key (admin_key= or ZEROLAYER_ADMIN_KEY)"
                if call.admin
                else ("an API key (api_key= or ZEROLAYER_API_KEY)")
            )
            raise ZerolayerError(f"no key to call {call.path} with: give {which}")
        headers = {
            "Authorization": f"Bearer {secret}",
            "Accept": call.accept
            or ("text/event-stream" if call.stream is not None else "application/json"),
            "User-Agent": f"zerolayer-sdk/{__version__} python/{platform.python_version()}",
            RETRY_COUNT_HEADER: str(retries),
            **self.default_headers,
        }
        if key is not None:
            headers[IDEMPOTENCY_HEADER] = key
        if call.content_type is not None:
            headers["Content-Type"] = call.content_type
        return headers

    def _idempotency_key(self, call: Call) -> str | None:
        """One key per call, made before its first attempt and sent on every retry, so the
        platform runs (and bills) a retried POST once."""
        if call.method != "POST" or not call.idempotent_key:
            return None
        return self.idempotency_key or f"zlsdk-{uuid.uuid4().hex}"

    def _build(
        self, http: httpx.Client | httpx.AsyncClient, call: Call, retries: int, key: str | None
    ) -> httpx.Request:
        return http.build_request(
            call.method,
            self._url(call),
            params={k: v for k, v in (call.params or {}).items() if v is not None},
            json=call.json,
            content=call.content() if call.content is not None else None,
            headers=self._headers(call, retries, key),
            timeout=self.timeout,
        )

    def _max_retries(self, call: Call) -> int:
        return self.max_retries if call.replayable else 0

    def _wait(self, call: Call, retries: int, response: httpx.Response | None) -> float | None:
        """Seconds to wait before the next attempt, or None when the call ends here: no
        retries left, a status that a retry cannot mend, or a Retry-After over MAX_RETRY_AFTER
        (a monthly budget, say)."""
        if retries >= self._max_retries(call):
            return None
        if response is not None:
            code = response.status_code
            if code not in (408, 409, 429) and code < 500:
                return None
            asked = retry_after(response.headers)
            if asked is not None:
                return asked if asked <= MAX_RETRY_AFTER else None
        backoff = min(INITIAL_RETRY_DELAY * 2.0**retries, MAX_RETRY_DELAY)
        return backoff * (1 - 0.25 * random.random())

    def _failed(self, request: httpx.Request, exc: httpx.TransportError) -> APIConnectionError:
        if isinstance(exc, httpx.TimeoutException):
            return APITimeoutError(request)
        return APIConnectionError(request, f"Connection error: {exc or type(exc).__name__}")

    def _logged(self, call: Call, retries: int, wait: float, why: str) -> None:
        log.info("%s %s: %s; retry %d in %.2f s", call.method, call.path, why, retries + 1, wait)

    def _answer(self, call: Call, response: httpx.Response, retries: int, raw: bool) -> Any:
        """The result of a successful answer: parsed, a stream, or raw."""
        if call.stream is not None:
            stream = self._stream_cls(response, call.stream())
            parse: Callable[[], Any] = lambda: stream  # noqa: E731
        else:
            parser = call.parse
            assert parser is not None
            parse = functools.partial(parser, response)
        return APIResponse(response, parse, retries) if raw else parse()


class SyncAPIClient(_ClientBase):
    """Sends calls with httpx.Client."""

    def __init__(self, *, http_client: httpx.Client | None = None, **options: Any):
        super().__init__(**options)
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(follow_redirects=True)
        self._sleep: Callable[[float], None] = time.sleep

    def _send(self, call: Call, raw: bool | None = None) -> Any:
        """Make the call (retried as _wait says); its result, raw if the client is."""
        key = self._idempotency_key(call)
        retries = 0
        while True:
            request = self._build(self._http, call, retries, key)
            try:
                response = self._http.send(request, stream=True)
                if response.status_code >= 400 or call.stream is None:
                    _read(response)  # a whole answer: a break while reading it is retried too
            except httpx.TransportError as exc:
                wait = self._wait(call, retries, None)
                if wait is None:
                    raise self._failed(request, exc) from exc
                self._logged(call, retries, wait, type(exc).__name__)
            else:
                if response.status_code < 400:
                    return self._answer(call, response, retries, self._raw if raw is None else raw)
                wait = self._wait(call, retries, response)
                if wait is None:
                    raise status_error(response, _error_body(response))
                self._logged(call, retries, wait, f"status {response.status_code}")
            self._sleep(wait)
            retries += 1

    def close(self) -> None:
        """Close the connection pool (a copy made by with_options shares it: close the
        original)."""
        if self._owns_http:
            self._http.close()


class AsyncAPIClient(_ClientBase):
    """Sends calls with httpx.AsyncClient."""

    _stream_cls = AsyncStream

    def __init__(self, *, http_client: httpx.AsyncClient | None = None, **options: Any):
        super().__init__(**options)
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(follow_redirects=True)
        self._sleep: Callable[[float], Any] = asyncio.sleep

    async def _send(self, call: Call, raw: bool | None = None) -> Any:
        """Make the call (retried as _wait says); its result, raw if the client is."""
        key = self._idempotency_key(call)
        retries = 0
        while True:
            request = self._build(self._http, call, retries, key)
            try:
                response = await self._http.send(request, stream=True)
                if response.status_code >= 400 or call.stream is None:
                    await _aread(response)
            except httpx.TransportError as exc:
                wait = self._wait(call, retries, None)
                if wait is None:
                    raise self._failed(request, exc) from exc
                self._logged(call, retries, wait, type(exc).__name__)
            else:
                if response.status_code < 400:
                    return self._answer(call, response, retries, self._raw if raw is None else raw)
                wait = self._wait(call, retries, response)
                if wait is None:
                    raise status_error(response, _error_body(response))
                self._logged(call, retries, wait, f"status {response.status_code}")
            await self._sleep(wait)
            retries += 1

    async def close(self) -> None:
        """Close the connection pool (a copy made by with_options shares it: close the
        original)."""
        if self._owns_http:
            await self._http.aclose()
