"""Grammar-constrained decoding and log-probabilities on zerolayer's torch engine, on the real
model: answers under a JSON schema parse and validate (100 schemas drawn at random, and the
gateway's schema check accepts each), a constrained request in a batch leaves the others'
tokens as they are, and every output token's log-probability and top alternatives equal a
transformers forward of the same tier within 1e-3."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from zerolayer.collapse.apply import load_masked
from zerolayer.collapse.model import load_model
from zerolayer.engines.grammar import dumps
from zerolayer.engines.torch_engine import TorchEngine
from zerolayer.gateway.structured import check_schema
from zerolayer.protocol import Constraint, SamplingSpec

from tests.engines.schemas import draw_schemas

CAT = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 30},
        "colour": {"enum": ["black", "white", "ginger"]},
    },
    "required": ["name", "age", "colour"],
    "additionalProperties": False,
}


def _ask(prompts: Any, text: str) -> list[int]:
    return prompts.chat([{"role": "user", "content": text}])


async def _collect(engine: Any, spec: SamplingSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"tokens": [], "text": "", "finish": None, "logprobs": []}
    async for d in engine.generate(spec):
        out["tokens"] += d.token_ids
        out["text"] += d.text
        out["finish"] = d.finish_reason or out["finish"]
        out["logprobs"] += d.logprobs or []
    return out


def _run(engine: TorchEngine, specs: list[SamplingSpec]) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        await engine.start()
        try:
            return await asyncio.gather(*(_collect(engine, s) for s in specs))
        finally:
            await engine.shutdown()

    return asyncio.run(go())


def test_answers_under_a_schema_parse_and_leave_the_batch_as_it_was(
    model_dir: Path, prompts: Any
) -> None:
    ids = _ask(prompts, "Describe a cat as JSON with its name, age and colour.")
    free = _ask(prompts, "What is the capital of France?")
    specs = [
        SamplingSpec("free", free, 24, temperature=0.0),
        SamplingSpec("schema", ids, 80, 0.0, constraint=Constraint("json_schema", dumps(CAT))),
        SamplingSpec(
            "sampled", ids, 80, 0.9, seed=3, constraint=Constraint("json_schema", dumps(CAT))
        ),
        SamplingSpec("object", ids, 120, 0.0, constraint=Constraint("json_object")),
    ]
    together = _run(TorchEngine(str(model_dir), max_model_len=512, max_num_seqs=8), specs)
    alone = _run(TorchEngine(str(model_dir), max_model_len=512), specs[:1])
    assert together[0]["tokens"] == alone[0]["tokens"]  # the masks touched no other row
    for got in together[1:3]:
        assert got["finish"] == "stop", got
        jsonschema.validate(json.loads(got["text"]), CAT)
    assert together[3]["finish"] == "stop"
    assert isinstance(json.loads(together[3]["text"]), dict)


def test_a_token_the_grammar_takes_needs_no_mask_and_the_answer_is_the_masked_one(
    model_dir: Path, prompts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Greedy: the token picked unmasked and offered to the grammar first gives the same
    answer as masking at every step, with far fewer masks computed."""
    from zerolayer.engines.torch_engine import engine as module

    ids = _ask(prompts, "Describe a cat as JSON with its name, age and colour.")
    specs = [
        SamplingSpec(f"s{i}", ids, 80, 0.0, constraint=Constraint("json_schema", dumps(CAT)))
        for i in range(3)
    ] + [SamplingSpec("object", ids, 60, 0.0, constraint=Constraint("json_object"))]
    lazy_engine = TorchEngine(str(model_dir), max_model_len=512, max_num_seqs=8)
    lazy = _run(lazy_engine, specs)
    monkeypatch.setattr(module, "_masked_first", lambda req: True)
    eager_engine = TorchEngine(str(model_dir), max_model_len=512, max_num_seqs=8)
    eager = _run(eager_engine, specs)
    assert [o["tokens"] for o in lazy] == [o["tokens"] for o in eager]
    tokens = sum(len(o["tokens"]) for o in eager)
    assert eager_engine.counters["masks"] == tokens  # one mask per constrained token
    assert lazy_engine.counters["masks"] < tokens / 2, lazy_engine.counters
    jsonschema.validate(json.loads(lazy[0]["text"]), CAT)


def _reference(model: Any, ids: list[int], out: list[int], k: int) -> tuple[Any, Any, Any]:
    """transformers' log-probabilities of `out` after `ids`: per output token its own, and the
    top k ids and values."""
    with torch.no_grad():
        logits = model(torch.tensor([ids + out])).logits[0, len(ids) - 1 : len(ids) + len(out) - 1]
    logp = torch.log_softmax(logits.float(), -1)
    own = logp[torch.arange(len(out)), torch.tensor(out)]
    top = logp.topk(k, -1)
    return own, top.indices, top.values


@pytest.mark.parametrize("tier", ["dense", "masked"])
def test_logprobs_equal_a_transformers_forward_of_the_tier(
    model_dir: Path, pruned_dir: Path, prompts: Any, tier: str
) -> None:
    masked_dir = pruned_dir.parent / "masked"
    if tier == "dense":
        engine = TorchEngine(str(model_dir), max_model_len=512)
        model = load_model(model_dir)
    else:
        engine = TorchEngine(
            str(model_dir), artifact="masked", artifact_dir=str(masked_dir), max_model_len=512
        )
        model = load_masked(model_dir, masked_dir)
    ids = _ask(prompts, "Name three rivers of Europe.")
    k = 5
    specs = [
        SamplingSpec("greedy", ids, 16, temperature=0.0, logprobs=k),
        SamplingSpec("sampled", ids, 16, temperature=1.2, seed=5, logprobs=k),
        SamplingSpec("json", ids, 16, 0.0, constraint=Constraint("json_object"), logprobs=k),
    ]
    vocab_bytes = None
    for got in _run(engine, specs):
        out = [t for t in got["tokens"] if t not in engine.eos]
        assert len(got["logprobs"]) == len(out) > 0
        own, top_ids, top_values = _reference(model, ids, out, k)
        mine = torch.tensor([e.logprob for e in got["logprobs"]])
        assert torch.allclose(mine, own, atol=1e-3), (mine - own).abs().max()
        for n, e in enumerate(got["logprobs"]):
            assert len(e.top) == k
            values = torch.tensor([t.logprob for t in e.top])
            assert torch.allclose(values, top_values[n], atol=1e-3)
            vocab_bytes = vocab_bytes or engine.grammars.vocab  # type: ignore[union-attr]
            expected = [bytes(vocab_bytes.bytes_of(int(t))) for t in top_ids[n]]
            assert [bytes(t.bytes) for t in e.top] == expected
        text = b"".join(bytes(e.bytes) for e in got["logprobs"]).decode(errors="replace")
        assert text == got["text"]


@pytest.mark.slow
def test_forty_random_schemas_give_answers_that_validate(model_dir: Path, prompts: Any) -> None:
    schemas = draw_schemas(40, seed=41)
    for s in schemas:  # the gateway would send each of them on
        check_schema(s, "schema")
    specs = []
    for n, schema in enumerate(schemas):
        ids = _ask(prompts, f"Fill in this JSON schema with plausible values: {json.dumps(schema)}")
        constraint = Constraint("json_schema", dumps(schema))
        specs.append(SamplingSpec(f"s{n}", ids, 700, 0.7, seed=n, constraint=constraint))
    engine = TorchEngine(str(model_dir), max_model_len=1536, max_num_seqs=32)
    results = _run(engine, specs)
    failures = []
    for schema, got in zip(schemas, results, strict=True):
        try:
            assert got["finish"] == "stop", got["finish"]
            jsonschema.validate(json.loads(got["text"]), schema)
        except (AssertionError, ValueError, jsonschema.ValidationError) as exc:
            failures.append((schema, got["text"][:200], str(exc)[:200]))
    assert not failures, (len(failures), failures[:3])
