"""The gateway's routes that OpenAI also has, checked against OpenAI's published OpenAPI document
(the shared part of it: tests/data/openai/openapi-subset.json, from openai/openai-openapi, MIT
licence; scripts/openai_subset.py writes it): the same paths, methods and path parameters, no
request body field OpenAI does not define, and no field required that OpenAI leaves optional,
except the deviations named here with their reasons. The gateway's side is its own generated
document (app.openapi())."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.gateway.conftest import Gateway

SUBSET = Path(__file__).resolve().parents[1] / "data" / "openai" / "openapi-subset.json"
OPENAI = json.loads(SUBSET.read_text())["paths"]

# zerolayer's own routes under /v1 (not OpenAI's)
OWN = {
    "/chunks",
    "/usage",
    "/requests",
    "/invoices",
    "/invoices/{month}",
    "/invoices/{month}/events",
    "/account",
    "/keys",
    "/keys/{key_id}",
    "/models/{model}/silence_map",
    "/models/{model}/silence_map/{kind}/{layer}/{channel}",
}
# body fields zerolayer adds, per route, and why
EXTRA_FIELDS = {
    ("post", "/chat/completions"): {"long_prompt"},  # opt-in map-reduce of an over-long prompt
}
# fields zerolayer requires where OpenAI does not, and why
EXTRA_REQUIRED = {
    ("post", "/responses"): {"model"},  # no stored prompt templates to take a model from
}


def _ours(gateway: Gateway) -> dict[str, Any]:
    doc = gateway.app.openapi()
    return {"paths": doc["paths"], "schemas": doc.get("components", {}).get("schemas", {})}


def _body(ours: dict[str, Any], op: dict[str, Any]) -> tuple[set[str], set[str]] | None:
    content = op.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return None
    schema = content["schema"]
    if "$ref" in schema:
        schema = ours["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return set(schema.get("properties", {})), set(schema.get("required", []))


def _shape(path: str) -> str:
    return re.sub(r"\{\w+\}", "{}", path)


def mismatches(ours: dict[str, Any], openai: dict[str, Any]) -> list[str]:
    """Where the gateway's document departs from OpenAI's beyond the named deviations."""
    by_shape = {_shape(p): p for p in openai}
    out = []
    for path, item in sorted(ours["paths"].items()):
        if not path.startswith("/v1/"):
            continue
        rel = path.removeprefix("/v1")
        if rel in OWN:
            continue
        if _shape(rel) not in by_shape:
            out.append(f"{path}: not an OpenAI path (add it to OWN if it is zerolayer's own)")
            continue
        their_path = by_shape[_shape(rel)]
        for method, op in sorted(item.items()):
            theirs = openai[their_path].get(method)
            if theirs is None:
                out.append(f"{method.upper()} {path}: OpenAI has no such method")
                continue
            if sorted(re.findall(r"\{(\w+)\}", rel)) != theirs["path_params"]:
                out.append(f"{method.upper()} {path}: path parameters differ")
            body = _body(ours, op)
            if body is None or "body" not in theirs:
                continue
            props, required = body
            extra = (
                props - set(theirs["body"]["properties"]) - EXTRA_FIELDS.get((method, rel), set())
            )
            if extra:
                out.append(f"{method.upper()} {path}: fields OpenAI lacks: {sorted(extra)}")
            stricter = required - set(theirs["body"]["required"])
            stricter -= EXTRA_REQUIRED.get((method, rel), set())
            if stricter:
                out.append(
                    f"{method.upper()} {path}: required, optional at OpenAI: {sorted(stricter)}"
                )
    return out


def test_shared_routes_match_openais_document(gateway: Gateway) -> None:
    ours = _ours(gateway)
    assert mismatches(ours, OPENAI) == []
    shared = [p for p in ours["paths"] if _shape(p.removeprefix("/v1")) in map(_shape, OPENAI)]
    assert len(shared) >= 9  # completions, chat, models, responses, conversations and items


def test_the_check_finds_a_field_openai_does_not_define(gateway: Gateway) -> None:
    ours = _ours(gateway)
    name = ours["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"][
        "application/json"
    ]["schema"]["$ref"].rsplit("/", 1)[-1]
    ours["schemas"][name] = {
        **ours["schemas"][name],
        "properties": {**ours["schemas"][name]["properties"], "temprature": {}},
        "required": [*ours["schemas"][name].get("required", []), "n"],
    }
    ours["paths"]["/v1/models/{model_id}"] = {"get": {}}
    assert mismatches(ours, OPENAI) == [
        "POST /v1/chat/completions: fields OpenAI lacks: ['temprature']",
        "POST /v1/chat/completions: required, optional at OpenAI: ['n']",
        "GET /v1/models/{model_id}: path parameters differ",
    ]
