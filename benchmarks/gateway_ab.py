"""The gateway path of two revisions, interleaved: whole runs of this tree's benchmarks/gateway.py
over an older commit's code (old) and over this working tree's (new), in pairs whose order is
drawn at random, all against one Redis server started here (the embedded server as `zerolayer
up` starts it, AOF fsynced on every write), so only the platform's code differs. Prints full
p50 and the full/bare ratio per run at 1 and 32 clients, the new/old ratio of full p50 per pair,
and their medians; writes benchmarks/results/<out>.

  .venv/bin/python benchmarks/gateway_ab.py --old REV [--pairs 3] [--repeats 3] [--out NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _run(tree: Path, redis_url: str, repeats: int, out: Path) -> dict[str, Any]:
    """One whole run of this tree's benchmarks/gateway.py over the tree's code (the same
    measurement for both, only the platform differs); its results file."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree / "services"),
        "REDIS_URL": redis_url,
    }
    script = ROOT / "benchmarks" / "gateway.py"
    subprocess.run(
        [sys.executable, str(script), "--repeats", str(repeats), "--out", str(out)],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return json.loads(out.read_text())


def _figures(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """{clients: {"full_p50_ms", "ratio_p50"}} of one run's results file."""
    return {
        name.removeprefix("clients_"): {
            "full_p50_ms": row["full_p50_ms"],
            "ratio_p50": row["ratio_p50"],
        }
        for name, row in result["by_clients"].items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the older commit")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="gateway-hardening-ab.json")
    args = parser.parse_args()

    from zerolayer.store.embedded import EmbeddedRedis

    work = Path(tempfile.mkdtemp(prefix="zl-ab-"))
    old_tree = work / "old"
    subprocess.run(
        ["git", "worktree", "add", "-q", "--detach", str(old_tree), args.old], cwd=ROOT, check=True
    )
    server = EmbeddedRedis(work / "redis")
    server.start()
    runs: list[dict[str, Any]] = []
    try:
        for pair in range(args.pairs):
            order = ["old", "new"]
            random.shuffle(order)
            got = {}
            for which in order:
                tree = old_tree if which == "old" else ROOT
                out = work / f"{which}-{pair}.json"
                got[which] = _figures(_run(tree, server.secret_url(), args.repeats, out))
                print(f"pair {pair + 1} {which}: {got[which]}", flush=True)
            runs.append({"pair": pair + 1, "order": order, **got})
    finally:
        server.stop()
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(old_tree)], cwd=ROOT, check=False
        )
    summary = {}
    for clients in runs[0]["old"]:
        per_pair = [
            r["new"][clients]["full_p50_ms"] / r["old"][clients]["full_p50_ms"] for r in runs
        ]
        summary[clients] = {
            "old_full_p50_ms": [r["old"][clients]["full_p50_ms"] for r in runs],
            "new_full_p50_ms": [r["new"][clients]["full_p50_ms"] for r in runs],
            "old_ratio_p50": [r["old"][clients]["ratio_p50"] for r in runs],
            "new_ratio_p50": [r["new"][clients]["ratio_p50"] for r in runs],
            "new_over_old_per_pair": [round(x, 3) for x in per_pair],
            "new_over_old_median": round(statistics.median(per_pair), 3),
        }
        s = summary[clients]
        print(
            f"{clients} clients: full p50 old {s['old_full_p50_ms']} "
            f"new {s['new_full_p50_ms']} ms; "
            f"new/old per pair {s['new_over_old_per_pair']}, median {s['new_over_old_median']}; "
            f"full/bare old {s['old_ratio_p50']} new {s['new_ratio_p50']}"
        )
    out = ROOT / "benchmarks" / "results" / args.out
    out.write_text(json.dumps({"old": args.old, "runs": runs, "summary": summary}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
