"""What the gateway path costs, with the scripted fake engine behind it (no model time):

  full: HTTP -> Ray Serve proxy -> gateway (key look-up, plan limits in Redis, admission
        control, tokenfix (in the gateway, as platform/serve/local.yaml has it, or its own
        deployment with --tokenfix-deployment), replica handle call, settlement, metrics) -> replica
  bare: HTTP -> Ray Serve proxy -> a minimal ingress that templates and tokenizes the prompt and
        makes one handle call to the same replica deployment (logging as the platform's
        applications do: no access-log line per request)

Both answer the same chat request with the same 16 scripted tokens. Each round runs both paths, in
an order drawn anew per round (seeded by --seed), at 1 and at 32 concurrent clients, after one
warm-up round each; each round sends --requests requests per client count and records every
request's latency. Prints p50/p99 per
round and the median of the per-round ratios full/bare; writes benchmarks/results/gateway.json.

Where the time goes: around each load the CPU time of the machine's processes is read
(serving.py's CpuMeter, psutil) and split by role (the gateway replica, the bare ingress, the tier
replica, the HTTP proxy, Redis, this client, the rest of Ray), as CPU milliseconds per request.
At 32 clients both paths are bound by the machine's cores, so their latency ratio follows their
CPU per request.

  .venv/bin/python benchmarks/gateway.py [--repeats 3] [--requests 320] [--tokenfix-deployment]
                                         [--no-haproxy] [--seed N] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from fastapi import Request  # module level: the route's annotation is resolved here
from serving import CpuMeter  # this folder's: CPU seconds of each process between two reads

RESULTS = Path(__file__).resolve().parent / "results" / "gateway.json"
SCRIPT = [f" token{i}" for i in range(16)]
BODY = {
    "model": "smollm2-135m:baseline",
    "messages": [{"role": "user", "content": "What is the capital of France?"}],
    "max_tokens": 16,
}
BENCH_PLAN = {
    "description": "benchmark: every limit on, none reached",
    "tiers": ["baseline"],
    "default_tier": "baseline",
    "prices": {"baseline": {"prompt_per_1k": 0.1, "completion_per_1k": 0.3}},
    "limits": {
        "requests_per_minute": 10**7,
        "tokens_per_minute": 10**9,
        "concurrent_requests": 10**4,
        "monthly_budget_usd": 10**6,
    },
    "priority": 0,
}


def fake_config(cfg: Any, tokenfix_in_gateway: bool, haproxy: bool = True) -> Any:
    """The platform config with one fake-engine tier and a benchmark plan."""
    data = cfg.model_dump()
    data["tokenfix"]["in_gateway"] = tokenfix_in_gateway
    if not haproxy:  # HTTP through Ray's Python proxy actor, as before HAProxy was the default
        data["ray"]["haproxy"] = False
    model = data["models"][cfg.default_model]
    model["tiers"] = {
        "baseline": {
            "engine": "fake",
            "artifact": "dense",
            "fake_script": SCRIPT,
            "max_ongoing_requests": 256,
            "ray_actor_options": {"num_cpus": 0.5, "num_gpus": 0},
        }
    }
    data["models"] = {cfg.default_model: model}
    data["plans"] = {"bench": BENCH_PLAN}
    data["dev_plan"] = "bench"
    data["gateway"]["max_ongoing_requests"] = 512
    return type(cfg).model_validate(data)


def bare_app(target_app: str, deployment: str, model_dir: str) -> Any:
    """An ingress that tokenizes the chat request and sends it to the replica with one handle
    call."""
    from fastapi import FastAPI
    from ray import serve
    from zerolayer.protocol import SamplingSpec

    api = FastAPI()

    @serve.deployment(name="bare", max_ongoing_requests=512, ray_actor_options={"num_cpus": 0.5})
    @serve.ingress(api)
    class Bare:
        def __init__(self) -> None:
            from zerolayer.tokenfix.prompt import PromptBuilder

            self.replica = serve.get_deployment_handle(deployment, app_name=target_app)
            self.prompts = PromptBuilder(model_dir)
            self.n = 0

        @api.post("/v1/chat/completions")
        async def chat(self, request: Request) -> dict[str, Any]:
            body = await request.json()
            self.n += 1
            ids = self.prompts.chat(body["messages"])
            spec = SamplingSpec(f"bare-{self.n}", ids, body["max_tokens"])
            res = await self.replica.complete.remote(spec)
            return {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": res.text}}],
                "usage": {"completion_tokens": res.completion_tokens},
            }

    return Bare.bind()


async def load(url: str, key: str, clients: int, requests: int) -> list[float]:
    """Latencies (s) of `requests` requests sent by `clients` concurrent clients."""
    import httpx

    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=120, limits=limits) as http:
        queue = list(range(requests))

        async def client() -> None:
            while queue:
                queue.pop()
                t0 = time.perf_counter()
                r = await http.post(url, json=BODY)
                latencies.append(time.perf_counter() - t0)
                if r.status_code != 200:
                    raise RuntimeError(f"{url}: {r.status_code} {r.text[:200]}")
                got = r.json()["choices"][0]["message"]["content"]
                if got != "".join(SCRIPT):
                    raise RuntimeError(f"{url}: unexpected reply {got!r}")

        await asyncio.gather(*(client() for _ in range(clients)))
    return latencies


_ROLES = (
    ("gateway", ("ServeReplica:", ":gateway")),
    ("bare", ("ServeReplica:bare",)),
    ("tier", ("ServeReplica:", "--baseline")),
    ("replica_other", ("ServeReplica:",)),
    ("proxy", ("ProxyActor",)),
    ("haproxy", ("haproxy",)),
    ("redis", ("valkey-server",)),
    ("redis", ("redis-server",)),
)


def _role(cmdline: str) -> str:
    for role, marks in _ROLES:
        if all(m in cmdline for m in marks):
            return role
    return "ray_other" if ("ray" in cmdline or "raylet" in cmdline) else "other"


def cpu_ms_per_request(meter: CpuMeter, phase: str, n: int) -> dict[str, float]:
    """CPU ms per request by role of one measured phase (roles under 0.05 ms left out)."""
    got: dict[str, float] = {}
    for group, sec in meter.totals.get(phase, {}).items():
        role = "client" if group.startswith("bench ") else _role(group)
        got[role] = got.get(role, 0.0) + sec * 1000 / n
    return {r: round(v, 2) for r, v in sorted(got.items()) if v >= 0.05}


def pct(values: list[float], q: float) -> float:
    """The q-quantile in milliseconds (nearest rank)."""
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=3, help="measured rounds per client count")
    ap.add_argument("--requests", type=int, default=320, help="requests per round")
    ap.add_argument(
        "--tokenfix-deployment",
        action="store_true",
        help="tokenfix as its own deployment (one more handle call) instead of inside the "
        "gateway, as platform/serve/local.yaml has it",
    )
    ap.add_argument(
        "--no-haproxy",
        action="store_true",
        help="HTTP through Ray's Python proxy actor instead of HAProxy (both paths)",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the paths' order per round")
    ap.add_argument("--out", type=Path, default=None, help=f"default {RESULTS}")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    mode = "deployment" if args.tokenfix_deployment else "in_gateway"
    out_path = args.out or (
        RESULTS.with_name("gateway-tokenfix-deployment.json")
        if args.tokenfix_deployment
        else RESULTS
    )

    from ray import serve
    from zerolayer.config import load_config
    from zerolayer.serve.app import deployment_name
    from zerolayer.serve.launcher import Platform

    cfg = fake_config(load_config(), not args.tokenfix_deployment, not args.no_haproxy)
    platform = Platform(cfg).start()
    results: dict[str, Any] = {}
    try:
        tier = deployment_name(cfg.default_model, "baseline")  # the tier's application too
        serve.run(
            bare_app(tier, tier, str(cfg.model_dir(cfg.default_model))),
            name="bare",
            route_prefix="/bare",
            # as the platform's applications log: no access-log line per request
            logging_config={"enable_access_log": False, "log_level": "WARNING"},
        )
        root = f"http://{cfg.host}:{cfg.port}"
        urls = {"bare": root + "/bare/v1/chat/completions", "full": root + "/v1/chat/completions"}
        key = platform.key or ""
        loop = asyncio.new_event_loop()
        for clients in (1, 32):
            n = args.requests if clients > 1 else max(50, args.requests // 4)
            rows = []
            cpus: list[dict[str, dict[str, float]]] = []
            orders: list[list[str]] = []
            for rnd in range(args.repeats + 1):
                row: dict[str, float] = {}
                cpu: dict[str, dict[str, float]] = {}
                order = rng.sample(("bare", "full"), 2)
                for name in order:
                    meter = CpuMeter()
                    meter.start()
                    lat = loop.run_until_complete(load(urls[name], key, clients, n))
                    meter.stop(name)
                    cpu[name] = cpu_ms_per_request(meter, name, n)
                    row[f"{name}_p50_ms"] = round(pct(lat, 0.5), 2)
                    row[f"{name}_p99_ms"] = round(pct(lat, 0.99), 2)
                    row[f"{name}_cpu_ms"] = round(sum(cpu[name].values()), 2)
                row["ratio_p50"] = round(row["full_p50_ms"] / row["bare_p50_ms"], 3)
                row["ratio_p99"] = round(row["full_p99_ms"] / row["bare_p99_ms"], 3)
                row["ratio_cpu"] = round(row["full_cpu_ms"] / row["bare_cpu_ms"], 3)
                label = "warm-up" if rnd == 0 else f"round {rnd}"
                print(
                    f"{clients:2d} clients {label:8s} bare p50 {row['bare_p50_ms']:7.2f} ms "
                    f"p99 {row['bare_p99_ms']:7.2f}  full p50 {row['full_p50_ms']:7.2f} ms "
                    f"p99 {row['full_p99_ms']:7.2f}  ratio p50 {row['ratio_p50']:.3f}  "
                    f"cpu/request bare {row['bare_cpu_ms']:.2f} full {row['full_cpu_ms']:.2f} ms"
                    f"  ({' then '.join(order)})",
                    flush=True,
                )
                if rnd:
                    rows.append(row)
                    cpus.append(cpu)
                    orders.append(order)
            summary = {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
            by_role = {
                name: {
                    role: round(statistics.median(c[name].get(role, 0.0) for c in cpus), 2)
                    for role in sorted({r for c in cpus for r in c[name]})
                }
                for name in ("bare", "full")
            }
            print(f"{clients:2d} clients cpu ms/request by role (median): {json.dumps(by_role)}")
            results[f"clients_{clients}"] = {
                **summary,
                "cpu_ms_per_request_by_role": by_role,
                "rounds": rows,
                "orders": orders,
                "requests": n,
            }
    finally:
        platform.stop()
    at32 = results["clients_32"]
    out = {
        **{k: at32[k] for k in ("bare_p50_ms", "full_p50_ms", "bare_p99_ms", "full_p99_ms")},
        "ratio_p50": at32["ratio_p50"],
        "target_ratio_p50": 1.5,
        "tokenfix": mode,
        "http": "python proxy" if args.no_haproxy else "haproxy",
        "seed": args.seed,
        "by_clients": results,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "by_clients"}))


if __name__ == "__main__":
    main()
