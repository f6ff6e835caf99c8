"""The request path below the routes has no HTTP in it: the pipeline, its fitting strategies,
the meter, chunking and summaries import nothing of FastAPI or Starlette, so the next endpoints
(and the Responses API beside chat) adapt the same steps instead of copying them."""

from __future__ import annotations

import ast
from pathlib import Path

import zerolayer.gateway

GATEWAY = Path(zerolayer.gateway.__file__).parent
BELOW_THE_ROUTES = ("pipeline", "fit", "meter", "chunks", "summarize", "admission", "limits")
HTTP = ("fastapi", "starlette")


def http_imports(source: str) -> list[str]:
    """The FastAPI and Starlette modules a module's source imports, anywhere in it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        found += [n for n in names if n.split(".")[0] in HTTP]
    return found


def test_the_pipeline_and_what_it_uses_import_no_http() -> None:
    used = {m: http_imports((GATEWAY / f"{m}.py").read_text()) for m in BELOW_THE_ROUTES}
    assert {m: names for m, names in used.items() if names} == {}


def test_a_planted_http_import_is_found() -> None:
    planted = "import asyncio\n\ndef f():\n    from fastapi.responses import JSONResponse\n"
    assert http_imports(planted) == ["fastapi.responses"]
    assert http_imports("from starlette.requests import Request\n") == ["starlette.requests"]
