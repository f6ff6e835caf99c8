"""The values that cross Ray handles: they survive pickling (as Ray sends them) unchanged, and an
error crosses as a value that raises the same API error on the other side."""

from __future__ import annotations

import pickle

import pytest
from ray import cloudpickle
from zerolayer.errors import ContextLengthExceeded, RateLimited
from zerolayer.protocol import (
    Chunk,
    ChunkOptions,
    Chunks,
    Delta,
    End,
    ErrorValue,
    Failed,
    Prompt,
    PromptInput,
    SamplingSpec,
    Start,
    Target,
)

VALUES = [
    Target("smollm2-135m", "masked", short=True),
    SamplingSpec("chatcmpl-1", [1, 2, 3], 16, 0.5, 0.9, 7, ["\n\n"]),
    PromptInput(messages=[{"role": "user", "content": "Hi"}]),
    PromptInput(prompt=[5, 6]),
    Prompt([1, 2]),
    ChunkOptions(64, 8, final=False),
    Chunks([Chunk("abc", 0, 3, 1)], rest=3),
    Start(3),
    Delta(" Paris", 1),
    End("stop", 3, 7, 0.25, "The capital"),
    Failed(ErrorValue(503, "server_error", "boom", None, "engine_error"), 3, 2),
]


@pytest.mark.parametrize("pickler", [pickle, cloudpickle], ids=["pickle", "cloudpickle"])
def test_every_value_survives_pickling_unchanged(pickler: object) -> None:
    for value in VALUES:
        back = pickler.loads(pickler.dumps(value))  # type: ignore[attr-defined]
        assert type(back) is type(value) and back == value


def test_an_error_crosses_as_a_value_and_raises_the_same_api_error() -> None:
    sent = ContextLengthExceeded("too long", param="messages")
    failed = pickle.loads(pickle.dumps(Failed.of(sent, prompt_tokens=9)))
    assert failed.prompt_tokens == 9
    with pytest.raises(Exception) as caught:
        failed.raise_()
    got = caught.value
    assert (got.status_code, got.error_type, got.code, got.param) == (
        400,
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    )
    assert got.body() == sent.body() == failed.error.body()
    limited = ErrorValue.of(RateLimited("slow down", 3.2, code="requests_per_minute"))
    assert (limited.status, limited.code) == (429, "requests_per_minute")


def test_targets_name_tiers_and_their_short_groups() -> None:
    t = Target("smollm2-135m", "masked")
    assert str(t) == "smollm2-135m:masked" and not t.short
    assert t.group(short=True) == Target("smollm2-135m", "masked", True) != t
    assert {t: 1}[Target("smollm2-135m", "masked")] == 1
