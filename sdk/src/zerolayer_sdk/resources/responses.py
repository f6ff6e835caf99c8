"""client.responses: the Responses API (conversation state kept by the platform)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from .._base_client import Call, json_as
from .._kinds import ResponseKind
from .._models import body_of
from .._pagination import AsyncPaginator, Page
from .._resource import AsyncAPIResource, SyncAPIResource, args
from .._streaming import AsyncStream, Stream
from ..types.responses import (
    Message,
    Response,
    ResponseCreateParams,
    ResponseDeleted,
    ResponseStreamEvent,
)

__all__ = [
    "ResponseStream",
    "AsyncResponseStream",
    "Responses",
    "AsyncResponses",
    "InputItems",
    "AsyncInputItems",
]

ResponseStream = Stream[ResponseStreamEvent, Response]
AsyncResponseStream = AsyncStream[ResponseStreamEvent, Response]


def _create(**kw: Any) -> Call:
    stream = bool(kw.get("stream"))
    return Call(
        "POST",
        "/responses",
        parse=json_as(Response),
        stream=ResponseKind if stream else None,
        json=body_of(ResponseCreateParams, **kw),
    )


def _retrieve(response_id: str) -> Call:
    return Call("GET", f"/responses/{response_id}", parse=json_as(Response))


def _delete(response_id: str) -> Call:
    return Call("DELETE", f"/responses/{response_id}", parse=json_as(ResponseDeleted))


def _order(limit: int | None, order: str | None, after: str | None) -> dict[str, Any]:
    return {"limit": limit, "order": order, "after": after}


class InputItems(SyncAPIResource):
    """client.responses.input_items"""

    def list(
        self,
        response_id: str,
        *,
        limit: int | None = None,
        order: Literal["asc", "desc"] | None = None,
        after: str | None = None,
    ) -> Page[Message]:
        """The items a response was given (newest first unless order="asc"); iterating the
        page goes through all of them."""
        return self._list(
            f"/responses/{response_id}/input_items", Message, _order(limit, order, after)
        )


class AsyncInputItems(AsyncAPIResource):
    """client.responses.input_items (async)"""

    def list(
        self,
        response_id: str,
        *,
        limit: int | None = None,
        order: Literal["asc", "desc"] | None = None,
        after: str | None = None,
    ) -> AsyncPaginator[Message]:
        """The items a response was given (see InputItems.list)."""
        return self._list(
            f"/responses/{response_id}/input_items", Message, _order(limit, order, after)
        )


class Responses(SyncAPIResource):
    """The Responses API."""

    def __init__(self, client: Any):
        super().__init__(client)
        self.input_items = InputItems(client)

    def create(
        self,
        *,
        model: str,
        input: str | Sequence[Mapping[str, Any]] | None = None,
        instructions: str | None = None,
        previous_response_id: str | None = None,
        conversation: str | Mapping[str, str] | None = None,
        store: bool | None = None,
        truncation: Literal["auto", "disabled"] | None = None,
        max_output_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        metadata: Mapping[str, str] | None = None,
        stream: bool = False,
        user: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> Response | ResponseStream:
        """A response to `input`, continuing `previous_response_id` or `conversation` (the
        platform reads the history; send only the new turn). stream=True: a ResponseStream of
        typed events."""
        return cast("Response | ResponseStream", self._send(_create(**args(locals()))))

    def retrieve(self, response_id: str) -> Response:
        """A stored response."""
        return cast("Response", self._send(_retrieve(response_id)))

    def delete(self, response_id: str) -> ResponseDeleted:
        """Delete a stored response."""
        return cast("ResponseDeleted", self._send(_delete(response_id)))


class AsyncResponses(AsyncAPIResource):
    """The Responses API (async)."""

    def __init__(self, client: Any):
        super().__init__(client)
        self.input_items = AsyncInputItems(client)

    async def create(
        self,
        *,
        model: str,
        input: str | Sequence[Mapping[str, Any]] | None = None,
        instructions: str | None = None,
        previous_response_id: str | None = None,
        conversation: str | Mapping[str, str] | None = None,
        store: bool | None = None,
        truncation: Literal["auto", "disabled"] | None = None,
        max_output_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        metadata: Mapping[str, str] | None = None,
        stream: bool = False,
        user: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> Response | AsyncResponseStream:
        """A response (see Responses.create)."""
        return cast("Response | AsyncResponseStream", await self._send(_create(**args(locals()))))

    async def retrieve(self, response_id: str) -> Response:
        """A stored response."""
        return cast("Response", await self._send(_retrieve(response_id)))

    async def delete(self, response_id: str) -> ResponseDeleted:
        """Delete a stored response."""
        return cast("ResponseDeleted", await self._send(_delete(response_id)))
