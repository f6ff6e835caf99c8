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
    return {"tps": {"1": tps}, "vs_baseline": {"1": {"median": ratio}}, "measured": stamp}


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
    assert out["engines"]["torch:dynamic"]["tps"]["1"] == 26.0
    assert out["latency_mode"]["ratio"] == 1.3 and out["latency_mode"]["ppl_delta"] == 0.025
    assert out["dynamic"]["engine"] == "torch" and out["masked"]["tps"]["1"] == 10.0
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


def test_an_entry_has_every_stream_count_with_ratios_spread_and_cost(tiers):
    """Per stream count: the median tokens/s, the median per-round ratio against the same
    engine's baseline and against vLLM's with the lowest and highest round, and the cost per 1M
    completion tokens at the replica-hour price."""
    from decimal import Decimal

    rows = []
    for r, (base, fast, vllm) in enumerate([(100, 150, 50), (80, 100, 40), (120, 210, 60)]):
        row = {}
        for name, tps in (
            ("torch:baseline", base),
            ("torch:dynamic", fast),
            ("vllm:baseline", vllm),
        ):
            row[name] = {f"tps_{s}": tps * s for s in tiers.STREAMS}
            row[name].update(ttft_s=0.1 + r, peak_mem_bytes=1000 + r)
        rows.append(row)
    e = tiers.entry(rows, "torch:dynamic", "torch", 0.02, Decimal("0.36"), "now")
    assert set(e["tps"]) == {str(s) for s in tiers.STREAMS} == {"1", "8", "32", "64"}
    assert e["tps"]["1"] == 150 and e["tps"]["64"] == 150 * 64
    # per-round ratios 1.5, 1.25, 1.75: median 1.5, spread 1.25-1.75
    assert e["vs_baseline"]["32"] == {"median": 1.5, "low": 1.25, "high": 1.75}
    assert e["vs_served_baseline"]["8"] == {"median": 3.0, "low": 2.5, "high": 3.5}
    # $0.36 an hour at 150 tokens/s: 0.36 / (150 x 3600) x 1e6 = $0.666667 per 1M
    assert e["cost_per_1m_completion"]["1"] == "0.666667"
    assert e["peak_mem_bytes"] == 1002 and e["ttft_s"] == 1.1 and e["ppl_delta"] == 0.02


def test_entries_of_the_older_layout_are_left_out_of_a_merge(tiers):
    old = {"engines": {"vllm:masked": {"decode_tps_1": 9.0, "measured": "before"}}, "runs": []}
    new = {"vllm:baseline": _entry(9.0, 1.0, "now")}
    out = tiers.merged(old, new, [], {"measured": "now"}, None)
    assert list(out["engines"]) == ["vllm:baseline"] and "masked" not in out
