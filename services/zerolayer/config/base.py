"""The base of every config model: unknown keys are errors, not silently ignored."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Strict"]


class Strict(BaseModel):
    """A config section that rejects keys it does not know."""

    model_config = ConfigDict(extra="forbid")
