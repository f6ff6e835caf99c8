"""What a previous_response_id chain stores in Redis per byte its client sends, with the scripted
fake engine behind the platform (the answers are 16 short tokens, so the stored bytes are the
clients' inputs and the responses' objects).

For chains of --turns (several lengths), each turn sends --input-chars characters of new input
continuing the previous response (truncation 'auto', so long chains still fit the context). Per
chain length it prints:

  sent       characters of input the client sent over the whole chain
  stored     bytes of the chain's stored responses, every field, read from Redis (HSTRLEN)
  contexts   what a layout that stores each response's whole context (history + input +
             output, as this platform did before) would hold for the same chain: the same
             responses' items, summed per response, computed in this run
  ratio      stored / sent; and contexts / sent beside it

Writes benchmarks/results/storage.json.

  .venv/bin/python benchmarks/storage.py [--turns 4 16 64] [--input-chars 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from gateway import fake_config

RESULTS = Path(__file__).resolve().parent / "results" / "storage.json"
MODEL = "smollm2-135m:baseline"


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--turns", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--input-chars", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    import httpx
    import redis
    from zerolayer.config import load_config
    from zerolayer.serve.launcher import Platform
    from zerolayer.store.connect import sync_client

    cfg = fake_config(load_config(), True)
    platform = Platform(cfg).start()
    root = f"http://{platform.cfg.host}:{platform.cfg.port}"
    client: redis.Redis = sync_client(platform.cfg.redis)
    rows: list[dict[str, Any]] = []

    async def chain(http: Any, turns: int) -> list[str]:
        prev, ids = None, []
        for t in range(turns):
            text = (
                f"turn {t}: "
                + ("rivers, lakes and the sea; " * args.input_chars)[: args.input_chars]
            )
            body: dict[str, Any] = {
                "model": MODEL,
                "input": text,
                "max_output_tokens": 16,
                "truncation": "auto",
            }
            if prev:
                body["previous_response_id"] = prev
            r = await http.post(root + "/v1/responses", json=body)
            r.raise_for_status()
            prev = r.json()["id"]
            ids.append(prev)
        return ids

    async def run() -> None:
        headers = {"Authorization": f"Bearer {platform.key}"}
        async with httpx.AsyncClient(headers=headers, timeout=120) as http:
            for turns in args.turns:
                ids = await chain(http, turns)
                stored = sent = contexts = 0
                history: list[Any] = []
                for rid in ids:
                    key = f"zl:resp:{{{rid}}}"
                    fields = client.hkeys(key)
                    stored += sum(client.hstrlen(key, f) for f in fields)
                    items = json.loads(client.hget(key, "input") or b"[]")
                    obj = json.loads(client.hget(key, "obj") or b"{}")
                    sent += sum(len(i["content"][0]["text"]) for i in items)
                    history += items + obj.get("output", [])
                    # the former layout: obj, input, and the whole context per response
                    contexts += len(_dumps(obj)) + len(_dumps(items)) + len(_dumps(history))
                row = {
                    "turns": turns,
                    "sent_chars": sent,
                    "stored_bytes": stored,
                    "contexts_bytes": contexts,
                    "ratio": round(stored / sent, 3),
                    "contexts_ratio": round(contexts / sent, 3),
                }
                rows.append(row)
                print(
                    f"{turns:3d} turns: sent {sent:9d}  stored {stored:9d} "
                    f"(ratio {row['ratio']:.2f})  whole contexts would be {contexts:10d} "
                    f"(ratio {row['contexts_ratio']:.2f})",
                    flush=True,
                )

    try:
        asyncio.run(run())
    finally:
        platform.stop()
    out = {"input_chars": args.input_chars, "engine": "fake (16 scripted tokens)", "chains": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
