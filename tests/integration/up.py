"""`zerolayer up` run as a user runs it (its own process, cache, Redis and Ray), for the tests
that break it (test_faults_platform) or watch its first start (test_first_start)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml
from zerolayer.store.embedded import EmbeddedRedis

from tests.conftest import clean_env, free_port

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "zla-up-admin"
PRICE = {"prompt_per_1k": 0.10, "completion_per_1k": 0.30}


def platform_dir(
    out: Path,
    model_dir: Path,
    tiers: dict[str, dict[str, Any]],
    collapse: dict[str, Any] | None = None,
    gateway: dict[str, Any] | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """platform/ with these tiers of the default model (each over the torch engine settings of
    the repo's sparse24 tier), every plan on all of them, and the given settings (`gateway`'s,
    and other sections of serve/local.yaml in `settings`)."""
    shutil.copytree(ROOT / "platform", out)
    models = yaml.safe_load((out / "models.yaml").read_text())
    model = models["models"]["smollm2-135m"]
    model["source"] = {"kind": "hf-dir", "path": str(model_dir)}
    model["tiers"] = {t: dict(model["tiers"]["sparse24"], **tc) for t, tc in tiers.items()}
    model["collapse"].update(collapse or {})
    (out / "models.yaml").write_text(yaml.safe_dump(models))
    plans = yaml.safe_load((out / "plans.yaml").read_text())
    first = next(iter(tiers))
    for plan in plans["plans"].values():
        plan.update(tiers=list(tiers), default_tier=first, prices=dict.fromkeys(tiers, PRICE))
    (out / "plans.yaml").write_text(yaml.safe_dump(plans))
    local = yaml.safe_load((out / "serve" / "local.yaml").read_text())
    local.setdefault("gateway", {}).update(gateway or {})
    for section, values in (settings or {}).items():
        local[section] = {**(local.get(section) or {}), **values}
    (out / "serve" / "local.yaml").write_text(yaml.safe_dump(local))
    return out


def start_batch(v1: str, key: str, lines: list[dict[str, Any]], name: str = "in.jsonl") -> str:
    """Upload `lines` as a batch file and create a chat batch of it at `v1` (a platform's
    /v1 URL) with plain HTTP; the batch's id."""
    import json

    auth = {"Authorization": f"Bearer {key}"}
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    made = httpx.post(
        v1 + "/files",
        headers=auth,
        files={"file": (name, data)},
        data={"purpose": "batch"},
        timeout=60,
    )
    assert made.status_code == 200, made.text
    body = {
        "input_file_id": made.json()["id"],
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }
    created = httpx.post(v1 + "/batches", headers=auth, json=body, timeout=60)
    assert created.status_code == 200, created.text
    bid: str = created.json()["id"]
    return bid


def wait(check: Any, timeout_s: float, what: str, every_s: float = 0.2) -> Any:
    """check()'s first truthy answer; fails the test after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every_s)


class Up:
    """A running `zerolayer up` and what the tests need of it."""

    def __init__(self, cache: Path, platform: Path):
        self.cache = cache
        self.platform = platform
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = cache / "up.log"
        self.redis = EmbeddedRedis(cache / "redis")
        self.proc: subprocess.Popen[str] | None = None
        self.offset = 0  # where this start's lines begin in the log

    def start(self) -> Up:
        """Run `zerolayer up` (it returns at once; `ready` waits for it)."""
        env = clean_env(
            ZEROLAYER_CACHE_DIR=str(self.cache),
            ZEROLAYER_PLATFORM_DIR=str(self.platform),
            ZEROLAYER_PORT=str(self.port),
            ZEROLAYER_ADMIN_KEY=ADMIN,
        )
        self.offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "zerolayer.cli", "up"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        return self

    def ready(self, timeout_s: float = 840) -> Up:
        """Wait for 'zerolayer is up'; fails with the log's end if it stopped instead."""
        assert self.proc is not None
        proc = self.proc
        try:
            wait(
                lambda: "zerolayer is up" in self.text() or proc.poll() is not None, timeout_s, "up"
            )
            assert proc.poll() is None, self.text()[-3000:]
        except BaseException:
            self.kill()
            raise
        return self

    def text(self) -> str:
        """What this start has printed so far."""
        with self.log.open() as f:
            f.seek(self.offset)
            return f.read()

    def stop(self, timeout_s: float = 120) -> int:
        """SIGTERM, as systemd or Kubernetes stop it; its exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout_s)

    def kill(self) -> None:
        """SIGKILL it and everything it started (a test that failed half way)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        for p in psutil.process_iter(["cmdline"]):
            if str(self.cache) in " ".join(p.info["cmdline"] or []):
                p.kill()

    def key(self, plan: str = "pro") -> tuple[str, str]:
        r = httpx.post(
            self.base + "/admin/keys",
            headers={"Authorization": f"Bearer {ADMIN}"},
            json={"plan": plan},
            timeout=30,
        )
        r.raise_for_status()
        return r.json()["key"], r.json()["key_id"]

    def chat(
        self,
        key: str,
        content: str,
        model: str = "smollm2-135m",
        stream: bool = False,
        max_tokens: int = 64,
        timeout: float = 120,
    ) -> httpx.Response:
        """One chat request at temperature 0."""
        body = {
            "model": model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": stream,
        }
        return httpx.post(
            self.base + "/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout,
        )

    def client(self) -> Any:
        return self.redis.client(socket_timeout=5)

    def counters(self, key_id: str) -> tuple[int, int]:
        """(leases held, nano-USD spent this month) of a key."""
        c = self.client()
        try:
            spend = sum(int(c.get(k) or 0) for k in c.scan_iter(f"zl:rl:{{{key_id}}}:cost:*"))
            return int(c.zcard(f"zl:rl:{{{key_id}}}:conc")), spend
        finally:
            c.close()

    def processes(self) -> list[psutil.Process]:
        assert self.proc is not None
        return [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(True)]


def replicas(name: str) -> list[psutil.Process]:
    """Processes of a Ray Serve deployment's replicas (Ray's process title names the
    application, the deployment, and the method it runs: ServeReplica:<app>:<deployment>.<m>)."""
    title = re.compile(rf"ServeReplica:[^:\s]+:{re.escape(name)}(\.|\s|$)")
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if title.search(" ".join(p.info["cmdline"] or [])):
            out.append(p)
    return out
