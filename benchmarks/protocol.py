"""What the typed hop values cost to pickle, against the dicts tagged by an "event" string that
crossed Ray handles before (the same fields, built here as the old code built them).

One request's traffic: the prepared request (a 40-token prompt), then a replica's Start, 64
Deltas and End, each value pickled on its own as it crosses a handle on its own. Each round
pickles and unpickles it N times with cloudpickle (what Ray uses for handle arguments and
streamed items) and with the standard library's pickle, typed and dict, in a shuffled order;
prints bytes per request and, per pickler, the median ratio typed/dict of the time per request
with its spread; writes benchmarks/results/protocol.json.

  .venv/bin/python benchmarks/protocol.py [--repeats 7] [--n 2000]
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import statistics
import time
from pathlib import Path
from typing import Any

from ray import cloudpickle
from zerolayer.protocol import Delta, End, SamplingSpec, Start

PROMPT = list(range(1000, 1040))


def typed() -> list[Any]:
    out: list[Any] = [SamplingSpec("chatcmpl-0123456789abcdef", PROMPT, 64, 0.7, 0.9, None, [])]
    out.append(Start(40))
    out += [Delta(" word", 1) for _ in range(64)]
    out.append(End("length", 40, 64, 0.81))
    return out


def dicts() -> list[Any]:
    req = {
        "request_id": "chatcmpl-0123456789abcdef",
        "prompt_token_ids": PROMPT,
        "max_tokens": 64,
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": None,
        "stop": [],
    }
    out: list[Any] = [req, {"event": "start", "prompt_tokens": 40}]
    out += [{"event": "delta", "text": " word", "tokens": 1} for _ in range(64)]
    out.append(
        {
            "event": "end",
            "finish_reason": "length",
            "prompt_tokens": 40,
            "completion_tokens": 64,
            "queue_s": 0.02,
        }
    )
    return out


PICKLERS: dict[str, Any] = {"cloudpickle": cloudpickle, "pickle": pickle}


def per_request_us(values: list[Any], n: int, pickler: Any) -> float:
    """Microseconds to pickle and unpickle every value of one request, each on its own."""
    t0 = time.perf_counter()
    for _ in range(n):
        for v in values:
            pickler.loads(pickler.dumps(v))
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--n", type=int, default=2000, help="requests per measurement")
    args = ap.parse_args()
    kinds = {"typed": typed(), "dict": dicts()}
    size = {k: sum(len(cloudpickle.dumps(v)) for v in vals) for k, vals in kinds.items()}
    runs = [(p, k) for p in PICKLERS for k in kinds]
    for p, k in runs:  # warm-up
        per_request_us(kinds[k], args.n // 10, PICKLERS[p])
    rows = []
    rng = random.Random(0)
    for rnd in range(1, args.repeats + 1):
        rng.shuffle(runs)
        got = {f"{p}_{k}_us": per_request_us(kinds[k], args.n, PICKLERS[p]) for p, k in runs}
        row: dict[str, Any] = {"round": rnd, **{k: round(v, 1) for k, v in got.items()}}
        for p in PICKLERS:
            row[f"{p}_ratio"] = got[f"{p}_typed_us"] / got[f"{p}_dict_us"]
        rows.append(row)
        print(
            f"round {rnd}: "
            + "  ".join(
                f"{p} typed {got[f'{p}_typed_us']:6.1f} us dict {got[f'{p}_dict_us']:6.1f} us "
                f"ratio {row[f'{p}_ratio']:.2f}"
                for p in PICKLERS
            ),
            flush=True,
        )
    summary: dict[str, Any] = {"bytes_per_request": size, "values_per_request": len(kinds["typed"])}
    for p in PICKLERS:
        ratios = [r[f"{p}_ratio"] for r in rows]
        summary[p] = {
            "median_typed_us": round(statistics.median(r[f"{p}_typed_us"] for r in rows), 1),
            "median_dict_us": round(statistics.median(r[f"{p}_dict_us"] for r in rows), 1),
            "median_ratio_typed_over_dict": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        }
        print(f"{p}: {summary[p]}")
    summary["rounds"] = rows
    print(f"bytes per request: typed {size['typed']}, dict {size['dict']}")
    out = Path(__file__).parent / "results" / "protocol.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
