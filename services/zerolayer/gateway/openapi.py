"""The gateway's OpenAPI document: routes that parse their bodies themselves (to answer every bad
body with an OpenAI-format error) still declare their body schemas, so clients and the fuzzing
tests see what each route accepts."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

__all__ = ["body_schema", "install_schema"]

_REF = "#/components/schemas/{model}"


def body_schema(model: type[BaseModel], text_plain: bool = False) -> dict[str, Any]:
    """The openapi_extra of a route whose JSON body is `model` (and, optionally, plain text)."""
    content: dict[str, Any] = {
        "application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}
    }
    if text_plain:
        content["text/plain"] = {"schema": {"type": "string"}}
    return {"requestBody": {"required": True, "content": content}}


def install_schema(app: FastAPI, models: list[type[BaseModel]]) -> None:
    """Add the body models (and the models they use) to the document's components."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                schema = model.model_json_schema(ref_template=_REF)
                schemas.update(schema.pop("$defs", {}))
                schemas[model.__name__] = schema
            app.openapi_schema = doc
        return app.openapi_schema

    # FastAPI documents replacing this method as the way to change its OpenAPI document
    app.openapi = openapi  # type: ignore[method-assign]
