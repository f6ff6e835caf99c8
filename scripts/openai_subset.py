"""Write the part of OpenAI's published OpenAPI document that zerolayer's gateway shares with
it (tests/data/openai/openapi-subset.json): for each path and method of the endpoint families
both serve, its path parameters, query parameters, and its request body's properties and
required ones (references and allOf resolved). tests/gateway/test_openai_compat.py checks the
gateway's own generated document against it.

Source: https://github.com/openai/openai-openapi (openapi.json), MIT licence, Copyright (c)
OpenAI. Refresh with the document of a newer commit:

    .venv/bin/python scripts/openai_subset.py OPENAPI_JSON COMMIT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "openai" / "openapi-subset.json"
FAMILIES = (
    "/chat/completions",
    "/completions",
    "/models",
    "/responses",
    "/conversations",
    "/files",
    "/batches",
)
METHODS = ("get", "post", "delete", "patch")


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = doc["components"]["schemas"][name]
    return schema


def _object(doc: dict[str, Any], schema: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(properties, required) of an object schema, allOf parts merged."""
    schema = _resolve(doc, schema)
    props, required = set(schema.get("properties", {})), set(schema.get("required", []))
    for part in schema.get("allOf", []):
        p, r = _object(doc, part)
        props |= p
        required |= r
    return props, required


def subset(doc: dict[str, Any], commit: str) -> dict[str, Any]:
    """The shared part of the document."""
    paths: dict[str, Any] = {}
    for path, item in sorted(doc["paths"].items()):
        if "?" in path or not path.startswith(FAMILIES):
            continue
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            params = [
                _resolve(doc, p) for p in [*item.get("parameters", []), *op.get("parameters", [])]
            ]
            row: dict[str, Any] = {
                "operation": op.get("operationId"),
                "path_params": sorted(p["name"] for p in params if p.get("in") == "path"),
                "query_params": sorted(p["name"] for p in params if p.get("in") == "query"),
            }
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None:
                props, required = _object(doc, body["schema"])
                row["body"] = {"properties": sorted(props), "required": sorted(required)}
            paths.setdefault(path, {})[method] = row
    return {
        "source": "https://github.com/openai/openai-openapi (openapi.json)",
        "commit": commit,
        "licence": "MIT, Copyright (c) OpenAI",
        "version": doc["info"].get("version"),
        "paths": paths,
    }


def main() -> None:
    doc = json.loads(Path(sys.argv[1]).read_text())
    OUT.write_text(json.dumps(subset(doc, sys.argv[2]), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
