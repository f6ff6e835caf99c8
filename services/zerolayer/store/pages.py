"""OpenAI's cursor-paged lists (files, batches): the ids after a cursor, and the list object of
a page read one past its limit (so that the page knows whether more follow)."""

from __future__ import annotations

from typing import Any

__all__ = ["ids_after", "list_page"]


def ids_after(ids: list[str], after: str | None) -> list[str] | None:
    """The ids that follow `after` in `ids` (all without a cursor); None when `after` is not
    one of them."""
    if after is None:
        return ids
    if after not in ids:
        return None
    return ids[ids.index(after) + 1 :]


def list_page(read: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """The list object of the first `limit` objects of `read` (up to limit + 1 read: one more
    means has_more)."""
    data = read[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(read) > limit,
    }
