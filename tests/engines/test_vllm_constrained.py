"""vLLM behind the engine protocol with what customers' applications send: a JSON schema and a
required tool call decoded under their grammars (vLLM's structured outputs), and each output
token's log-probability with its alternatives, as a transformers forward of the same model
computes them; and its prefix cache's hits, per tenant."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from zerolayer.collapse.model import load_model
from zerolayer.engines.grammar import dumps
from zerolayer.engines.vllm_engine import VLLMEngine
from zerolayer.gateway.tools import Function, tool_constraint
from zerolayer.protocol import Constraint, SamplingSpec
from zerolayer.toolcalls import split_calls

from tests.engines.test_constrained import CAT, _collect, _reference

pytestmark = pytest.mark.integration  # runs vLLM

WEATHER = Function(
    "get_weather",
    "The weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def test_vllm_grammars_and_logprobs(model_dir: Path, prompts: Any) -> None:
    cat = prompts.chat([{"role": "user", "content": "Describe a cat as JSON."}])
    weather = prompts.chat([{"role": "user", "content": "What is the weather in Paris?"}])
    specs = [
        SamplingSpec("schema", cat, 80, 0.0, constraint=Constraint("json_schema", dumps(CAT))),
        SamplingSpec(
            "tool", weather, 80, 0.0, constraint=tool_constraint([WEATHER], "required", False)
        ),
        SamplingSpec("lp", weather, 12, 0.0, logprobs=3),
    ]

    # a long prompt three times: its prefix-cache hits are vLLM's own count, and another
    # tenant's salt shares none of the first tenant's blocks
    long = prompts.chat([{"role": "user", "content": "Tell me about rivers and lakes. " * 50}])
    hits: list[int | None] = []

    async def go() -> list[dict[str, Any]]:
        engine = VLLMEngine(str(model_dir), max_model_len=512, kv_cache_gib=1, max_num_seqs=4)
        await engine.start()
        try:
            out = list(await asyncio.gather(*(_collect(engine, s) for s in specs)))
            for salt in ("t1", "t1", "t2"):
                spec = SamplingSpec("long", long, 4, 0.0, cache_salt=salt)
                hits.append([d async for d in engine.generate(spec)][0].cached_tokens)
            return out
        finally:
            await engine.shutdown()

    schema, tool, lp = asyncio.run(go())
    assert 300 < len(long) < 500
    assert hits[0] == 0 and hits[2] == 0, hits
    assert hits[1] is not None and hits[1] >= len(long) // 2, hits  # whole blocks of it
    assert schema["finish"] == "stop", schema
    jsonschema.validate(json.loads(schema["text"]), CAT)
    content, calls = split_calls(tool["text"])
    assert [c.name for c in calls] == ["get_weather"], tool["text"]
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER.parameters)
    out = [t for t in lp["tokens"] if t != 2]
    assert len(lp["logprobs"]) == len(out) > 0
    own, top_ids, top_values = _reference(load_model(model_dir), weather, out, 3)
    mine = torch.tensor([e.logprob for e in lp["logprobs"]])
    assert torch.allclose(mine, own, atol=1e-2), (mine - own).abs().max()
    assert all(len(e.top) == 3 for e in lp["logprobs"])
    values = torch.tensor([[t.logprob for t in e.top] for e in lp["logprobs"]])
    assert torch.allclose(values, top_values, atol=1e-2)
