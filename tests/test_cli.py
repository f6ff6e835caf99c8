"""The zerolayer CLI, run as a user would (a subprocess), against a real redis-server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from zerolayer.store.embedded import EmbeddedRedis
from zerolayer.store.keys import KeyStore

from tests.conftest import clean_env


def zerolayer(
    *args: str, env: dict[str, str], timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zerolayer.cli", *args],
        # The embedded Redis path is under test: a REDIS_URL of the caller's must not interfere.
        env=clean_env(**env),
        capture_output=True,
        text=True,
        # the compiler's commands may first have the model answer the chat corpus's prompts
        timeout=timeout or (900 if args[0] == "collapse" else 120),
    )


@pytest.mark.slow
def test_keys_create_uses_the_running_embedded_redis_and_leaves_it_up(tmp_path: Path) -> None:
    env = {"ZEROLAYER_CACHE_DIR": str(tmp_path)}
    with EmbeddedRedis(tmp_path / "redis") as server:
        run = zerolayer("keys", "create", "--plan", "free", "--name", "ci", env=env)
        assert run.returncode == 0, run.stderr
        key = run.stdout.strip()
        client = server.client()
        record = KeyStore(client).lookup(key)
        assert record is not None and record.plan == "free" and record.name == "ci"
        client.ping()  # still up: the CLI did not stop a server it did not start
        client.close()


@pytest.mark.slow
def test_keys_create_starts_and_stops_embedded_redis_when_none_runs(tmp_path: Path) -> None:
    env = {"ZEROLAYER_CACHE_DIR": str(tmp_path)}
    run = zerolayer("keys", "create", "--plan", "pro", env=env)
    assert run.returncode == 0, run.stderr
    key = run.stdout.strip()
    assert not EmbeddedRedis(tmp_path / "redis").socket.exists()  # stopped again
    with EmbeddedRedis(tmp_path / "redis") as server:  # the AOF kept it
        client = server.client()
        assert KeyStore(client).lookup(key) is not None
        client.close()


@pytest.mark.slow
def test_unknown_plan_is_a_clear_error(tmp_path: Path) -> None:
    run = zerolayer(
        "keys", "create", "--plan", "platinum", env={"ZEROLAYER_CACHE_DIR": str(tmp_path)}
    )
    assert run.returncode == 2
    assert "unknown plan 'platinum'" in run.stderr and "free" in run.stderr


def test_models_import_is_a_no_op_once_imported(model_dir: Path) -> None:
    env = {"ZEROLAYER_CACHE_DIR": str(model_dir.parent.parent)}
    run = zerolayer("models", "import", env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"smollm2-135m: {model_dir}"
    assert "importing" not in run.stderr


@pytest.mark.integration  # runs the collapse compiler
def test_collapse_calibrate_map_and_ablate(model_dir: Path, tmp_path: Path) -> None:
    env = {"ZEROLAYER_CACHE_DIR": str(model_dir.parent.parent)}
    out = tmp_path / "map"
    # two standard domains: the chat domain would have the model answer its prompts first
    small = ["--samples", "2", "--seq-len", "64", "--domains", "docs,zh"]
    run = zerolayer("collapse", "calibrate", *small, "--out", str(out), env=env)
    assert run.returncode == 0, run.stderr
    assert (out / "silence_map.safetensors").exists() and "calibrating" in run.stderr
    run = zerolayer("collapse", "map", "--map", str(out), env=env)
    assert run.returncode == 0, run.stderr
    assert (out / "silence_map.png").exists() and (out / "silence_map.html").exists()
    report = tmp_path / "ablate.json"
    run = zerolayer(
        "collapse",
        "ablate",
        "--map",
        str(out),
        "--level",
        "0.2",
        "--eval-samples",
        "2",
        "--seq-len",
        "64",
        "--domains",
        "docs,zh",
        "--sensitivity",
        "--out",
        str(report),
        env=env,
    )
    assert run.returncode == 0, run.stderr
    import json

    body = json.loads(report.read_text())
    result = body["result"]
    assert result["ppl_delta"] > 0 and result["kl"] > 0
    rows = body["sensitivity"]
    assert [r["layer"] for r in rows] == list(range(30))
    assert all(r["kl"] > 0 and r["level"] == 0.2 for r in rows)


@pytest.mark.slow
def test_keys_list_set_plan_and_revoke(tmp_path: Path) -> None:
    env = {"ZEROLAYER_CACHE_DIR": str(tmp_path)}
    with EmbeddedRedis(tmp_path / "redis") as server:
        key = zerolayer("keys", "create", "--plan", "free", "--name", "app", env=env).stdout.strip()
        client = server.client()
        kid = KeyStore(client).lookup(key).key_id  # type: ignore[union-attr]
        listing = zerolayer("keys", "list", env=env)
        assert listing.returncode == 0, listing.stderr
        row = next(line for line in listing.stdout.splitlines() if line.startswith(kid))
        assert "free" in row and "active" in row and "app" in row and key not in listing.stdout
        moved = zerolayer("keys", "set-plan", kid, "--plan", "pro", env=env)
        assert moved.returncode == 0 and KeyStore(client).lookup(key).plan == "pro"  # type: ignore[union-attr]
        assert zerolayer("keys", "set-plan", kid, "--plan", "gold", env=env).returncode == 2
        assert zerolayer("keys", "revoke", kid, env=env).returncode == 0
        assert KeyStore(client).lookup(key).revoked  # type: ignore[union-attr]
        assert "revoked" in zerolayer("keys", "list", env=env).stdout
        gone = zerolayer("keys", "revoke", "000000000000", env=env)
        assert gone.returncode == 2 and "no API key with id" in gone.stderr
        # a second key of the same tenant, shown in the list; an unknown tenant is refused
        tenant = KeyStore(client).get(kid).owner
        assert tenant in row
        made = zerolayer("keys", "create", "--plan", "pro", "--tenant", tenant, env=env)
        assert made.returncode == 0 and f"tenant {tenant}" in made.stderr
        assert KeyStore(client).lookup(made.stdout.strip()).owner == tenant  # type: ignore[union-attr]
        nope = zerolayer("keys", "create", "--plan", "pro", "--tenant", "tenant_x", env=env)
        assert nope.returncode == 2 and "no tenant with id" in nope.stderr
        client.close()


@pytest.mark.integration  # runs the collapse compiler
def test_traffic_sampling_cli_drift_live_and_from_traffic(
    model_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import asyncio
    import json

    import redis
    import redis.asyncio as aioredis
    from zerolayer.store.traffic import AsyncTrafficStore

    # a Redis of its own: the session's holds other tests' kept prompts
    server = EmbeddedRedis(tmp_path / "redis")
    server.start()
    request.addfinalizer(server.stop)
    redis_url = server.secret_url()
    env = {"ZEROLAYER_CACHE_DIR": str(model_dir.parent.parent), "REDIS_URL": redis_url}
    _, rec = KeyStore(redis.Redis.from_url(redis_url)).create("pro")
    kid = rec.key_id
    on = zerolayer("keys", "sampling", kid, "on", env=env)
    assert on.returncode == 0 and "kept for recalibration (on)" in on.stdout, on.stderr

    async def keep() -> None:
        client = aioredis.from_url(redis_url)
        store = AsyncTrafficStore(client, 3600, 100)
        for i in range(6):
            msg = json.dumps([{"role": "user", "content": f"Question {i}: why is the sky blue?"}])
            await store.keep(kid, False, "smollm2-135m", "dynamic", "chat", msg)
        await client.aclose()

    asyncio.run(keep())
    listed = zerolayer("keys", "traffic", kid, env=env)
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(rows) == 6 and all(r["key_id"] == kid and r["tier"] == "dynamic" for r in rows)

    smap = tmp_path / "map"
    text = tmp_path / "calibration.txt"  # a small map of its own: no standard corpora needed
    text.write_text(
        "\n\n".join(f"Paragraph {i}: rivers carry water to the sea." * 4 for i in range(12))
    )
    run = zerolayer(
        "collapse",
        "calibrate",
        "--samples",
        "2",
        "--seq-len",
        "64",
        "--corpus",
        str(text),
        "--out",
        str(smap),
        env=env,
    )
    assert run.returncode == 0, run.stderr
    drift = tmp_path / "drift"
    run = zerolayer(
        "collapse",
        "drift",
        "--from-traffic",
        "--map",
        str(smap),
        "--samples",
        "2",
        "--seq-len",
        "64",
        "--out",
        str(drift),
        env=env,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads((drift / "drift.json").read_text())
    assert (drift / "drift.png").exists()
    assert report["new"]["corpus"]["name"] == "live-traffic"  # the kept prompts were measured
    assert "6 prompts kept from 1 opted-in" in report["new"]["corpus"]["source"]

    # --live: the replicas' per-channel counts (as a replica's recorder writes them) against
    # the map, one report per tier that has counts
    asyncio.run(_live_counts(redis_url, smap))
    live = zerolayer(
        "collapse",
        "drift",
        "--live",
        "--tier",
        "baseline",
        "dynamic",
        "--map",
        str(smap),
        "--out",
        str(drift),
        env=env,
    )
    assert live.returncode == 0, live.stderr
    assert "baseline: no live activation counts" in live.stdout
    report = json.loads((drift / "live-dynamic" / "drift.json").read_text())
    assert (drift / "live-dynamic" / "drift.png").exists()
    assert report["new"]["tier"] == "dynamic" and report["new"]["layers_measured"] == 30
    assert report["new"]["tokens_per_layer"] == [16] * 30
    assert report["mlp"]["channels_changed"] > 0  # every channel half silent: many changed

    # six kept prompts are too few for a candidate: a clear refusal, before any build work
    few = zerolayer("collapse", "build", "--from-traffic", "--tiers", "dynamic", env=env)
    assert few.returncode != 0 and "at least 12" in few.stderr, few.stderr

    off = zerolayer("keys", "sampling", kid, "off", env=env)
    assert off.returncode == 0 and "6 kept prompts deleted" in off.stdout, off.stdout
    assert zerolayer("keys", "traffic", kid, env=env).stdout.strip() == ""


async def _live_counts(redis_url: str, smap: Path) -> None:
    """What a dynamic-tier replica's recorder writes after 16 sampled tokens: every channel of
    every layer at or under its threshold on half of them."""
    import json

    import redis.asyncio as aioredis
    import torch
    from zerolayer.config import MonitoringConfig
    from zerolayer.replicas.live import LiveRecorder

    layers = len(json.loads((smap / "silence_map.json").read_text())["mlp"]["thresholds"])
    drained = {
        "tokens": 16,
        "passes": 16,
        "under": [8 * 1536] * layers,
        "total": [16 * 1536] * layers,
        "skipped": 0,
        "seen": 0,
        "rows": [16] * layers,
        "channels": [torch.full((1536,), 8) for _ in range(layers)],
    }

    class Engine:
        async def signals(self) -> dict:
            return {"decode": drained}

    client = aioredis.from_url(redis_url)
    rec = LiveRecorder(client, "smollm2-135m:dynamic", Engine(), {}, MonitoringConfig())  # type: ignore[arg-type]
    await rec.flush()
    await client.aclose()


@pytest.mark.slow
def test_usage_and_invoice_commands_read_what_billing_counted(tmp_path: Path) -> None:
    import asyncio
    import csv
    import io
    import json

    import redis.asyncio as aioredis
    from zerolayer.billing.events import EventWriter

    from tests.billing.conftest import NOV_30, biller, drain, event

    env = {"ZEROLAYER_CACHE_DIR": str(tmp_path)}
    with EmbeddedRedis(tmp_path / "redis") as server:
        client = server.client()
        secret, rec = KeyStore(client).create("pro")
        client.close()
        tenant = rec.owner

        async def bill() -> None:
            c = aioredis.from_url(server.secret_url())
            await EventWriter(c, 3600).write(
                event(tenant, NOV_30, key_id=rec.key_id, prompt=1000, completion=1000),
                event(tenant, NOV_30, key_id=rec.key_id, tier="masked", prompt=10, completion=0),
            )
            await drain(biller(c))
            await c.aclose()

        asyncio.run(bill())
        args = ["--start", "2025-11-01", "--end", "2025-11-30", "--group-by", "tier"]
        table = zerolayer("usage", "--key", rec.key_id, *args, env=env)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split()[:2] == ["tier", "requests"]
        assert lines[1].split()[0] == "baseline" and lines[-1].split()[0] == "total"
        report = json.loads(zerolayer("usage", "--tenant", tenant, *args, "--json", env=env).stdout)
        assert report["totals"]["requests"] == 2 and report["totals"]["cost_usd"] == "0.401"
        text = zerolayer("invoice", "2025-11", "--tenant", tenant, env=env)
        assert text.returncode == 0 and "total due $0.40" in text.stdout, text.stderr
        rows = list(
            csv.DictReader(
                io.StringIO(
                    zerolayer(
                        "invoice", "2025-11", "--tenant", tenant, "--format", "csv", env=env
                    ).stdout
                )
            )
        )
        assert [r["tier"] for r in rows] == ["baseline", "masked", ""]
        events = zerolayer("invoice", "2025-11", "--tenant", tenant, "--events", "jsonl", env=env)
        assert len(events.stdout.splitlines()) == 2
        wrong = zerolayer("invoice", "2025-13", "--tenant", tenant, env=env)
        assert wrong.returncode == 2 and "YYYY-MM" in wrong.stderr
        nobody = zerolayer("usage", env=env)
        assert nobody.returncode == 2 and "--tenant" in nobody.stderr
