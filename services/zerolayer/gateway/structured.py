"""Structured outputs: a request's `response_format` (chat) as the Constraint a tier decodes
under, checked before anything is spent.

A JSON schema is walked once: every keyword must be one the grammar compiler honours (the
keywords of OpenAI's strict structured outputs, plus a few more it enforces exactly); any other
is a 400 whose `param` is the path of the keyword in the request body, so a client can find it.
A schema that still cannot be compiled (a `$ref` to nothing) is a 400 naming the schema.
The schema is also described to the model in a system turn (a model writes better JSON when it
is told what is wanted); that turn is part of the prompt and billed as prompt tokens.
"""

from __future__ import annotations

import json
from typing import Any

from zerolayer.engines.grammar import check_constraint, dumps
from zerolayer.errors import InvalidRequest
from zerolayer.protocol import Constraint

__all__ = ["SCHEMA_KEYWORDS", "check_schema", "json_constraint", "instruction"]

# what a schema may say: structure, the values allowed, and annotations the grammar ignores
SCHEMA_KEYWORDS = frozenset(
    {
        # structure
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "$defs",
        "definitions",
        # values
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minItems",
        "maxItems",
        # annotations
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "nullable",
    }
)
_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_MAPS = ("properties", "$defs", "definitions")  # keyword -> {name: schema}
_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")  # keyword -> [schema]
_MAX_DEPTH = 32


def check_schema(schema: Any, path: str, depth: int = 0) -> None:
    """Raise InvalidRequest naming the first keyword (by its path in the body) the grammar
    cannot honour, or a value of the wrong kind."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise InvalidRequest(f"a JSON schema must be an object, at '{path}'", param=path)
    if depth > _MAX_DEPTH:
        raise InvalidRequest(f"the schema nests deeper than {_MAX_DEPTH} levels", param=path)
    for key, value in schema.items():
        where = f"{path}.{key}"
        if key not in SCHEMA_KEYWORDS:
            raise InvalidRequest(
                f"the schema keyword '{key}' is not supported in structured outputs (at '{where}')",
                param=where,
            )
        if key in _MAPS:
            if not isinstance(value, dict):
                raise InvalidRequest(f"'{where}' must be an object of schemas", param=where)
            for name, sub in value.items():
                check_schema(sub, f"{where}.{name}", depth + 1)
        elif key in _LISTS:
            if not isinstance(value, list) or not value:
                raise InvalidRequest(f"'{where}' must be a non-empty list of schemas", param=where)
            for n, sub in enumerate(value):
                check_schema(sub, f"{where}[{n}]", depth + 1)
        elif key in ("items", "additionalProperties"):
            check_schema(value, where, depth + 1)
        elif key == "type":
            kinds = value if isinstance(value, list) else [value]
            bad = [k for k in kinds if k not in _TYPES]
            if bad or not kinds:
                raise InvalidRequest(f"'{where}' names an unknown type {bad[:1]}", param=where)
        elif key == "required" and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            raise InvalidRequest(f"'{where}' must be a list of property names", param=where)


def json_constraint(response_format: Any, where: str) -> Constraint | None:
    """The constraint of a chat `response_format` (its validated model), or None for text;
    `where`: the schema's path in the request body (errors name what lies under it)."""
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return Constraint("json_object")
    spec = response_format.json_schema
    schema = spec.schema_ if spec.schema_ is not None else {"type": "object"}
    check_schema(schema, where)
    constraint = Constraint("json_schema", dumps(schema))
    try:
        check_constraint(constraint)
    except InvalidRequest as exc:
        raise InvalidRequest(exc.message, param=where) from None
    return constraint


def instruction(constraint: Constraint | None) -> str | None:
    """The system turn that tells the model what JSON is wanted (None: free text)."""
    if constraint is None:
        return None
    if constraint.kind == "json_object":
        return "Answer with one JSON object and nothing else."
    schema = json.loads(constraint.spec)
    return (
        "Answer with one JSON object and nothing else, following this JSON schema:\n"
        + json.dumps(schema, separators=(", ", ": "))
    )
