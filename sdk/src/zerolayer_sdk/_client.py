"""Client and AsyncClient: the same methods, one sync and one async.

    client = Client()  # api_key: ZEROLAYER_API_KEY; base_url: ZEROLAYER_BASE_URL or ./zl up's
    client.chat.completions.create(model="smollm2-135m", messages=[...])

Configuration comes from the arguments, then the environment (ZEROLAYER_API_KEY,
ZEROLAYER_ADMIN_KEY, ZEROLAYER_BASE_URL), then, for a platform on this machine, the keys `./zl up`
keeps in its cache folder. `with_options(...)` gives a copy with other settings sharing the
connection pool; `with_raw_response` a copy whose methods return the HTTP answer with its headers.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx

from ._base_client import AsyncAPIClient, SyncAPIClient
from .resources.account import (
    Accounts,
    AsyncAccounts,
    AsyncOwnKeys,
    AsyncRequests,
    OwnKeys,
    Requests,
)
from .resources.admin import Admin, AsyncAdmin
from .resources.billing import AsyncInvoices, AsyncUsage, Invoices, Usage
from .resources.chat import AsyncChat, Chat
from .resources.chunks import AsyncChunks, Chunks
from .resources.completions import AsyncCompletions, Completions
from .resources.conversations import AsyncConversations, Conversations
from .resources.files import AsyncBatches, AsyncFiles, Batches, Files
from .resources.models import AsyncModels, Models
from .resources.responses import AsyncResponses, Responses

__all__ = ["Client", "AsyncClient"]


class Client(SyncAPIClient):
    """The zerolayer API. Arguments left out come from the environment: api_key
    (ZEROLAYER_API_KEY), admin_key (ZEROLAYER_ADMIN_KEY, for client.admin), base_url
    (ZEROLAYER_BASE_URL, default http://127.0.0.1:8000/v1); timeout 10 minutes (5 s to
    connect), max_retries 2."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        admin_key: str | None = None,
        base_url: str | httpx.URL | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int | None = None,
        default_headers: Mapping[str, str] | None = None,
        http_client: httpx.Client | None = None,
        idempotency_key: str | None = None,
        _raw: bool = False,
    ):
        super().__init__(
            api_key=api_key,
            admin_key=admin_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
            http_client=http_client,
            idempotency_key=idempotency_key,
            _raw=_raw,
        )
        self.chat = Chat(self)
        self.completions = Completions(self)
        self.responses = Responses(self)
        self.conversations = Conversations(self)
        self.files = Files(self)
        self.batches = Batches(self)
        self.models = Models(self)
        self.usage = Usage(self)
        self.invoices = Invoices(self)
        self.chunks = Chunks(self)
        self.account = Accounts(self)
        self.requests = Requests(self)
        self.keys = OwnKeys(self)
        self.admin = Admin(self)

    def with_options(self, **options: Any) -> Client:
        """A copy with other settings (api_key, admin_key, base_url, timeout, max_retries,
        default_headers, idempotency_key: the key of the next POST, for a retry of your own),
        sharing this client's connections."""
        return Client(**{**self._options(), **options}, http_client=self._http)

    @property
    def with_raw_response(self) -> Client:
        """A copy whose methods return APIResponse (headers, request id, rate limits; the
        object by .parse())."""
        return self.with_options(_raw=True)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncClient(AsyncAPIClient):
    """The zerolayer API, async: the same methods as Client, awaited."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        admin_key: str | None = None,
        base_url: str | httpx.URL | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int | None = None,
        default_headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
        idempotency_key: str | None = None,
        _raw: bool = False,
    ):
        super().__init__(
            api_key=api_key,
            admin_key=admin_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=default_headers,
            http_client=http_client,
            idempotency_key=idempotency_key,
            _raw=_raw,
        )
        self.chat = AsyncChat(self)
        self.completions = AsyncCompletions(self)
        self.responses = AsyncResponses(self)
        self.conversations = AsyncConversations(self)
        self.files = AsyncFiles(self)
        self.batches = AsyncBatches(self)
        self.models = AsyncModels(self)
        self.usage = AsyncUsage(self)
        self.invoices = AsyncInvoices(self)
        self.chunks = AsyncChunks(self)
        self.account = AsyncAccounts(self)
        self.requests = AsyncRequests(self)
        self.keys = AsyncOwnKeys(self)
        self.admin = AsyncAdmin(self)

    def with_options(self, **options: Any) -> AsyncClient:
        """A copy with other settings (see Client.with_options)."""
        return AsyncClient(**{**self._options(), **options}, http_client=self._http)

    @property
    def with_raw_response(self) -> AsyncClient:
        """A copy whose methods return APIResponse."""
        return self.with_options(_raw=True)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
