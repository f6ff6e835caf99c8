"""The base of every typed object: a pydantic model that keeps fields it does not know (a newer
server's) instead of rejecting them, and request bodies built from keyword arguments."""

from __future__ import annotations

from typing import Any

import pydantic

__all__ = ["BaseModel", "RequestModel", "NOT_GIVEN", "NotGiven", "body_of"]


class BaseModel(pydantic.BaseModel):
    """An object the server sends. Unknown fields are kept (`model.model_extra`, and as
    attributes); `to_dict()` gives the JSON object back."""

    model_config = pydantic.ConfigDict(extra="allow", populate_by_name=True)

    def to_dict(self) -> dict[str, Any]:
        """The object as JSON-compatible data (unknown fields included)."""
        return self.model_dump(mode="json")


class RequestModel(pydantic.BaseModel):
    """A request body. Types are checked before anything is sent; fields this SDK does not
    know are sent as given (a newer server may take them); the values of fields are checked by
    the server (its 400 names the field)."""

    model_config = pydantic.ConfigDict(extra="allow")

    def body(self) -> dict[str, Any]:
        """The JSON body: only the fields that were given."""
        return self.model_dump(mode="json", exclude_unset=True)


class NotGiven:
    """The default of an argument whose `None` means something (send null)."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN = NotGiven()


def body_of(params: type[RequestModel], /, **fields: Any) -> dict[str, Any]:
    """The body of `model` from keyword arguments: None and NOT_GIVEN are left out,
    `extra_body` (a dict of fields this SDK does not know yet) is merged in."""
    extra = fields.pop("extra_body", None) or {}
    given = {k: v for k, v in fields.items() if v is not None and v is not NOT_GIVEN}
    return params(**given, **extra).body()
