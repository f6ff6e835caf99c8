"""A new user's first start: `zerolayer up` on an empty cache directory (the set-up, .venv,
already done), timed from the command to
  - the first answer of the baseline tier (the model imported, Redis, Ray and the baseline
    replica up), and
  - every tier ready (each missing artifact built by the collapse compiler in the background
    and its tier deployed into the running platform).
It asks the baseline tier every second until it answers, and polls GET /v1/models for the
tiers' states (printing each build step as it changes). Writes
benchmarks/results/first_start.json: {"first_answer_s", "all_tiers_s", "tiers": {tier: s}}.

  .venv/bin/python benchmarks/first_start.py [--timeout-s 5400] [--keep CACHE_DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "first_start.json"
ADMIN = "zla-first-start-benchmark"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timeout-s", type=float, default=5400.0)
    parser.add_argument("--keep", help="use this (empty) cache directory and keep it after")
    args = parser.parse_args()
    cache = Path(args.keep or tempfile.mkdtemp(prefix="zl-first-start-"))
    if cache.exists() and any(cache.iterdir()):
        sys.exit(f"{cache} is not empty: the benchmark measures a first start")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZEROLAYER_")}
    env.update(ZEROLAYER_CACHE_DIR=str(cache), ZEROLAYER_PORT=str(port), ZEROLAYER_ADMIN_KEY=ADMIN)
    log = Path(tempfile.mkdtemp(prefix="zl-first-start-log-")) / "up.log"
    print(f"cache {cache}, log {log}", flush=True)
    t0 = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "zerolayer.cli", "up"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    result: dict[str, Any] = {}
    try:
        result = _watch(proc, base, cache, t0, args.timeout_s)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(180)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    result.update(
        machine={"cpus": os.cpu_count(), "python": platform.python_version()},
        command="benchmarks/first_start.py",
        date=time.strftime("%Y-%m-%d"),
    )
    print(json.dumps(result, indent=1))
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0 if result.get("all_tiers_s") is not None else 1


def _watch(
    proc: subprocess.Popen[bytes], base: str, cache: Path, t0: float, timeout_s: float
) -> dict[str, Any]:
    """Seconds to the first baseline answer and to each tier ready."""
    first: float | None = None
    ready: dict[str, float] = {}
    failed: dict[str, str] = {}
    steps: dict[str, str] = {}
    key_file = cache / "dev-key"
    with httpx.Client(timeout=60) as http:
        while time.monotonic() - t0 < timeout_s:
            if proc.poll() is not None:
                raise SystemExit(f"zerolayer up ended with status {proc.returncode}")
            time.sleep(1.0)
            if not key_file.exists():
                continue
            auth = {"Authorization": f"Bearer {key_file.read_text().strip()}"}
            try:
                if first is None:
                    first = _first_answer(http, base, auth, t0)
                listed = http.get(base + "/v1/models", headers=auth).json()["data"]
            except (httpx.HTTPError, KeyError, ValueError):
                continue
            for m in listed:
                if "tier" not in m:
                    continue
                tier, status = m["tier"], m.get("status", "ready")
                if status == "ready" and tier not in ready:
                    ready[tier] = round(time.monotonic() - t0, 1)
                    print(f"[{ready[tier]:7.1f}s] {tier} ready", flush=True)
                elif status == "failed" and tier not in failed:
                    failed[tier] = m.get("reason", "")
                    print(f"{tier} failed: {failed[tier]}", flush=True)
                elif status == "building" and steps.get(tier) != m.get("step"):
                    steps[tier] = m.get("step")
                    print(f"[{time.monotonic() - t0:7.1f}s] {tier}: {steps[tier]}", flush=True)
            if (
                first is not None
                and listed
                and len(ready) + len(failed) == len([m for m in listed if "tier" in m])
            ):
                break
    return {
        "first_answer_s": first,
        "all_tiers_s": max(ready.values()) if ready and not failed else None,
        "tiers": ready,
        "failed": failed,
    }


def _first_answer(http: httpx.Client, base: str, auth: dict[str, str], t0: float) -> float | None:
    body = {
        "model": "smollm2-135m:baseline",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 8,
    }
    r = http.post(base + "/v1/chat/completions", headers=auth, json=body)
    if r.status_code != 200:
        return None
    took = round(time.monotonic() - t0, 1)
    text = r.json()["choices"][0]["message"]["content"]
    print(f"[{took:7.1f}s] first answer: {text!r}", flush=True)
    return took


if __name__ == "__main__":
    sys.exit(main())
