"""JSON schemas drawn at random from the keywords structured outputs honour, for property tests:
objects, arrays, strings (bounded, some with an enum, a pattern or a format), integers and
numbers (some bounded), booleans, nulls, anyOf, const and $defs/$ref. Every string and array
is bounded, so an answer that follows the schema fits in a few hundred tokens."""

from __future__ import annotations

import random
from typing import Any

__all__ = ["draw_schemas"]

_WORDS = ["name", "age", "city", "tags", "score", "ok", "kind", "items", "note", "id", "size"]


def _scalar(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["string", "string", "integer", "number", "boolean", "null", "enum"])
    if kind == "string":
        out: dict[str, Any] = {"type": "string", "maxLength": rng.randint(1, 16)}
        extra = rng.random()
        if extra < 0.15:
            out = {"type": "string", "pattern": "^[a-z]{1,8}$"}
        elif extra < 0.25:
            out = {"type": "string", "format": rng.choice(["date", "uuid", "ipv4"])}
        elif extra < 0.4:
            out["minLength"] = rng.randint(0, out["maxLength"])
        return out
    if kind == "integer":
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 500)}
    if kind == "number":
        return {"type": "number", "minimum": 0, "maximum": 1000}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", "cyan", 3, True], rng.randint(1, 4))}
    return {"type": kind}


def _schema(rng: random.Random, depth: int) -> dict[str, Any]:
    pick = rng.random()
    if depth <= 0 or pick < 0.45:
        return _scalar(rng)
    if pick < 0.75:
        names = rng.sample(_WORDS, rng.randint(1, 4))
        props = {n: _schema(rng, depth - 1) for n in names}
        out: dict[str, Any] = {
            "type": "object",
            "properties": props,
            "required": [n for n in names if rng.random() < 0.8] or names[:1],
            "additionalProperties": False,
        }
        if rng.random() < 0.3:
            out["description"] = "drawn at random"
        return out
    if pick < 0.9:
        lo = rng.randint(0, 2)
        return {
            "type": "array",
            "items": _schema(rng, depth - 1),
            "minItems": lo,
            "maxItems": lo + rng.randint(0, 2),
        }
    if pick < 0.95:
        return {"anyOf": [_scalar(rng), _scalar(rng)]}
    return {"const": rng.choice(["fixed", 7, False])}


def draw_schemas(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """n schemas, each an object at the top (as chat answers are), some with a shared part in
    $defs referred to by $ref."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        top = _schema(rng, 2)
        if top.get("type") != "object":
            top = {
                "type": "object",
                "properties": {"value": top},
                "required": ["value"],
                "additionalProperties": False,
            }
        if rng.random() < 0.15:
            top["$defs"] = {"part": _scalar(rng)}
            top["properties"]["shared"] = {"$ref": "#/$defs/part"}
            top["required"] = [*top["required"], "shared"]
        out.append(top)
    return out
