"""The base of the resource classes (client.chat.completions, client.conversations.items, ...):
each method describes its call (a Call) and hands it to its client; lists come back as pages."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, cast

import httpx
import pydantic

from ._base_client import AsyncAPIClient, Call, SyncAPIClient, json_as
from ._pagination import AsyncPage, AsyncPaginator, Page

__all__ = ["SyncAPIResource", "AsyncAPIResource", "args", "ListBody"]

M = TypeVar("M", bound=pydantic.BaseModel)


def args(scope: Mapping[str, Any]) -> dict[str, Any]:
    """A method's keyword arguments, from its locals() (everything but self)."""
    return {k: v for k, v in scope.items() if k not in ("self", "__class__")}


class ListBody(pydantic.BaseModel):
    """A list answer: OpenAI's list object, with cursors when it is paged (the ids of its
    first and last items, or an opaque next_cursor, as the request log pages)."""

    data: list[Any]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None
    next_cursor: str | None = None


def _page_call(
    path: str,
    params: Mapping[str, Any],
    cursor: str | None,
    model: type[M],
    page: Callable[..., Any],
    fetch: Callable[[str], Any],
    flags: Mapping[str, Any],
) -> Call:
    """GET of one page of a list (after `cursor`), parsed into `page` (Page or AsyncPage) with
    `fetch` for the next ones. The cursor goes as `after` (an item's id), or as the parameter
    flags' cursor_param names (an opaque cursor the answer's next_cursor gave)."""
    read = json_as(ListBody)
    flags = dict(flags)
    name = flags.pop("cursor_param", "after")

    def parse(response: httpx.Response) -> Any:
        body = read(response)
        items = [model.model_validate(item) for item in body.data]
        last = body.next_cursor if name != "after" else body.last_id
        return page(items, body.has_more, body.first_id, last, fetch)

    at = {**params, **({name: cursor} if cursor else {})}
    return Call("GET", path, parse=parse, params=at, **flags)


class SyncAPIResource:
    """A group of methods of the sync client."""

    def __init__(self, client: SyncAPIClient):
        self._client = client

    def _send(self, call: Call) -> Any:
        return self._client._send(call)

    def _list(
        self, path: str, model: type[M], params: Mapping[str, Any] | None = None, **flags: Any
    ) -> Page[M]:
        """A list: one page, whose iteration fetches the next ones by cursor."""
        at = dict(params or {})

        def fetch(cursor: str) -> Page[M]:
            call = _page_call(path, at, cursor, model, Page, fetch, flags)
            return cast("Page[M]", self._client._send(call, raw=False))

        return cast(
            "Page[M]", self._send(_page_call(path, at, at.get("after"), model, Page, fetch, flags))
        )


class AsyncAPIResource:
    """A group of methods of the async client."""

    def __init__(self, client: AsyncAPIClient):
        self._client = client

    def _send(self, call: Call) -> Awaitable[Any]:
        return self._client._send(call)

    def _list(
        self, path: str, model: type[M], params: Mapping[str, Any] | None = None, **flags: Any
    ) -> AsyncPaginator[M]:
        """A list: `await` it for the first page, or `async for` over all of its items."""
        at = dict(params or {})

        async def fetch(cursor: str) -> AsyncPage[M]:
            call = _page_call(path, at, cursor, model, AsyncPage, fetch, flags)
            return cast("AsyncPage[M]", await self._client._send(call, raw=False))

        async def first() -> AsyncPage[M]:
            call = _page_call(path, at, at.get("after"), model, AsyncPage, fetch, flags)
            return cast("AsyncPage[M]", await self._send(call))

        return AsyncPaginator(first)
