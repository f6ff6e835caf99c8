"""benchmarks/tiers.py's run selection and results merging (a run of some engines merged into
the file a full run wrote)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiers():
    spec = importlib.util.spec_from_file_location("bench_tiers", ROOT / "benchmarks" / "tiers.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_tiers"] = mod
    spec.loader.exec_module(mod)
    return mod


def _entry(tps: float, ratio: float, stamp: str) -> dict:
    return {"decode_tps_1": tps, "ratio_1_vs_baseline": ratio, "measured": stamp}


def test_selection_adds_the_baselines(tiers):
    names = [n for n, _, _ in tiers.selected(["torch:dynamic"])]
    assert names == ["vllm:baseline", "torch:baseline", "torch:dynamic"]
    assert [n for n, _, _ in tiers.selected([])] == [n for n, _, _ in tiers.ENGINES]
    with pytest.raises(SystemExit, match="unknown engine"):
        tiers.selected(["torch:nope"])


def test_merge_keeps_what_the_run_did_not_measure(tiers):
    old_engines = {
        n: _entry(10.0, 1.0, "") for n in ("vllm:baseline", "vllm:masked", "torch:baseline")
    }
    old_engines["torch:dynamic"] = _entry(11.0, 1.1, "")
    old = {
        "engines": old_engines,
        "latency_mode": {"ratio": 1.1},
        "rounds": [{"x": 1}],
        "setup": {"repeats": 5},
    }
    new = {
        "vllm:baseline": _entry(9.0, 1.0, "now"),
        "torch:baseline": _entry(20.0, 1.0, "now"),
        "torch:dynamic": _entry(26.0, 1.3, "now"),
    }
    setup = {"repeats": 3, "measured": "now"}
    out = tiers.merged(old, new, [{"y": 2}], setup, 0.025)
    assert out["engines"]["vllm:masked"] == old_engines["vllm:masked"]  # kept as it was
    assert out["engines"]["torch:dynamic"]["decode_tps_1"] == 26.0
    assert out["latency_mode"]["ratio"] == 1.3 and out["latency_mode"]["ppl_delta"] == 0.025
    assert out["dynamic"]["engine"] == "torch" and out["masked"]["decode_tps_1"] == 10.0
    # the earlier full run stays listed (vllm:masked still comes from it), then this one
    assert [r["setup"]["repeats"] for r in out["runs"]] == [5, 3]
    assert out["runs"][1]["engines"] == sorted(new)
    # a second run of every engine the first one measured drops it from the runs
    again = tiers.merged(out, {**new, "vllm:masked": _entry(10.5, 1.05, "later")}, [], setup, 0.0)
    assert [sorted(r["engines"]) for r in again["runs"]] == [sorted([*new, "vllm:masked"])]


def test_a_run_without_the_dynamic_pair_keeps_latency_mode(tiers):
    old = {"engines": {}, "latency_mode": {"ratio": 1.2}, "runs": []}
    new = {"vllm:baseline": _entry(9.0, 1.0, "now"), "vllm:masked": _entry(9.5, 1.05, "now")}
    out = tiers.merged(old, new, [], {"measured": "now"}, None)
    assert out["latency_mode"] == {"ratio": 1.2}
    assert "dynamic" not in out
