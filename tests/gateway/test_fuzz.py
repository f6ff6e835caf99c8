"""Fuzzing the gateway from its own OpenAPI document (schemathesis + Hypothesis): whatever the
body, path or query, no 5xx, and every error is in the OpenAI format. Each operation gets bodies
that follow its declared schema and bodies that break it."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation import GenerationMode

from tests.gateway.conftest import Gateway, GatewayFactory, plan

pytestmark = pytest.mark.slow  # seconds of load or faults per test

EXAMPLES = 15  # per operation and mode
BODIES = {
    "POST /v1/chat/completions",
    "POST /v1/completions",
    "POST /v1/chunks",
    "POST /admin/keys",
    "POST /v1/responses",
    "POST /v1/conversations",
    "POST /v1/conversations/{conversation_id}",
    "POST /v1/conversations/{conversation_id}/items",
    "PATCH /v1/keys/{key_id}",
}


def check(gw: Gateway, case: Any, mode: GenerationMode) -> None:
    auth = gw.admin if case.path.startswith("/admin") else gw.auth
    if mode == GenerationMode.POSITIVE and isinstance(case.body, dict):
        # valid bodies should reach the engine, not stop at an unknown model or plan
        if "model" in case.body:
            case.body["model"] = "smollm2-135m"
        if "plan" in case.body:
            case.body["plan"] = "fuzz"
    # sent through the gateway's own test client: its event loop is the one the app's Redis
    # clients and background tasks (the batch worker's polling) live on
    sent = case.as_transport_kwargs(headers={**(case.headers or {}), **auth})
    body = sent.pop("data", None)
    response = gw.client.request(
        sent["method"],
        sent["url"],
        params=sent.get("params"),
        headers=sent.get("headers"),
        cookies=sent.get("cookies") or None,
        json=sent.get("json"),
        content=body if isinstance(body, (bytes, str)) else None,
        data=body if isinstance(body, dict) else None,
    )
    where = case.as_curl_command()
    assert response.status_code < 500, (response.status_code, response.text, where)
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"error"}, (body, where)
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]
        assert {"type", "param", "code"} <= set(body["error"])


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_5xx_and_only_openai_errors(make_gateway: GatewayFactory, mode: GenerationMode) -> None:
    # no limits (a fuzzer sends hundreds of requests a minute); the fake engine behind
    gw = make_gateway(plans={"fuzz": plan(priority=100)}, key_plan="fuzz")
    schema = schemathesis.openapi.from_asgi("/openapi.json", gw.app)
    operations = [op.ok() for op in schema.get_all_operations()]
    labels = {f"{op.method.upper()} {op.path}" for op in operations}
    assert BODIES <= labels
    unbreakable: set[str] = set()
    for op in operations:

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def run(case: Any) -> None:
            check(gw, case, mode)

        try:
            run()
        except Unsatisfiable:
            # nothing to break (no body, no parameters): e.g. GET /healthz in negative mode
            unbreakable.add(f"{op.method.upper()} {op.path}")
    assert not unbreakable & BODIES, unbreakable
