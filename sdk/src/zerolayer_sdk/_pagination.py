"""Pages of list results. Iterating a page goes through every item of the list, fetching the
following pages by cursor (`after` = the page's last id) as it goes; `iter_pages()` gives the
pages themselves. A list the server returns whole is one page without a next one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

from ._exceptions import ZerolayerError
from ._response import APIResponse

__all__ = ["Page", "AsyncPage", "AsyncPaginator"]

T = TypeVar("T")


class _PageBase(Generic[T]):
    def __init__(
        self,
        data: list[T],
        has_more: bool = False,
        first_id: str | None = None,
        last_id: str | None = None,
    ):
        self.data = data
        self.has_more = has_more
        self.first_id = first_id
        self.last_id = last_id

    def _next_cursor(self) -> str | None:
        return self.last_id if self.has_more and self.last_id else None

    def has_next_page(self) -> bool:
        """Whether the list goes on after this page."""
        return self._next_cursor() is not None

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {len(self.data)} items has_more={self.has_more}>"


class Page(_PageBase[T]):
    """One page; iterating it goes on through the following pages."""

    def __init__(
        self,
        data: list[T],
        has_more: bool = False,
        first_id: str | None = None,
        last_id: str | None = None,
        fetch: Callable[[str], Page[T]] | None = None,
    ):
        super().__init__(data, has_more, first_id, last_id)
        self._fetch = fetch

    def get_next_page(self) -> Page[T]:
        """The page after this one (asks the server)."""
        cursor = self._next_cursor()
        if cursor is None or self._fetch is None:
            raise ZerolayerError("this is the last page: check has_next_page() first")
        return self._fetch(cursor)

    def iter_pages(self) -> Iterator[Page[T]]:
        """This page and every following one."""
        page: Page[T] = self
        while True:
            yield page
            if not page.has_next_page() or page._fetch is None:
                return
            page = page.get_next_page()

    def __iter__(self) -> Iterator[T]:
        for page in self.iter_pages():
            yield from page.data


class AsyncPage(_PageBase[T]):
    """The async twin of Page: `async for` goes through every item of the list."""

    def __init__(
        self,
        data: list[T],
        has_more: bool = False,
        first_id: str | None = None,
        last_id: str | None = None,
        fetch: Callable[[str], Awaitable[AsyncPage[T]]] | None = None,
    ):
        super().__init__(data, has_more, first_id, last_id)
        self._fetch = fetch

    async def get_next_page(self) -> AsyncPage[T]:
        """The page after this one (asks the server)."""
        cursor = self._next_cursor()
        if cursor is None or self._fetch is None:
            raise ZerolayerError("this is the last page: check has_next_page() first")
        return await self._fetch(cursor)

    async def iter_pages(self) -> AsyncIterator[AsyncPage[T]]:
        """This page and every following one."""
        page: AsyncPage[T] = self
        while True:
            yield page
            if not page.has_next_page() or page._fetch is None:
                return
            page = await page.get_next_page()

    async def __aiter__(self) -> AsyncIterator[T]:
        async for page in self.iter_pages():
            for item in page.data:
                yield item


class AsyncPaginator(Generic[T]):
    """What an async list method returns: `await` it for the first page, or `async for` over
    it for every item of the list."""

    def __init__(self, first: Callable[[], Awaitable[AsyncPage[T]]]):
        self._first = first

    def __await__(self) -> Generator[Any, None, AsyncPage[T]]:
        return self._first().__await__()

    async def __aiter__(self) -> AsyncIterator[T]:
        page: Any = await self._first()
        if isinstance(page, APIResponse):  # a list of with_raw_response
            page = page.parse()
        async for item in page:
            yield item
