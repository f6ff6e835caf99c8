"""The private Ray APIs zerolayer relies on (zerolayer.ray_private) still behave as relied on.
A Ray upgrade that changes one fails here, by name. Nothing else in services/ reaches into Ray's
private names (checked on the source)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import ray
import zerolayer
from ray import serve
from zerolayer import ray_private

ROOT = Path(zerolayer.__file__).parent


@serve.deployment
class _Probe:
    def __call__(self) -> str:
        return "ok"


def test_versioned_sets_a_fixed_version() -> None:
    assert ray_private.versioned(_Probe, "v-1").version == "v-1"
    assert ray_private.versioned(_Probe, "v-2").options(num_replicas=2).version == "v-2"


def test_serve_still_refuses_a_public_version() -> None:
    """If this starts passing, Serve takes a version publicly again: use that instead."""
    try:
        _Probe.options(version="v-1")
    except ValueError as exc:
        assert "version" in str(exc)
    else:
        raise AssertionError("Deployment.options(version=...) is public again")


def test_auth_token_reload_is_there() -> None:
    from ray._raylet import AuthenticationTokenLoader, Config

    assert callable(Config.initialize)
    assert callable(AuthenticationTokenLoader.instance().reset_cache)
    assert ray_private.reload_auth_token() is True


def test_ray_init_takes_the_temp_dir_option(tmp_path: Path) -> None:
    (name,) = ray_private.temp_dir_option(tmp_path)
    # ray.init takes it through **kwargs and reads it by name
    assert f'"{name}"' in inspect.getsource(ray.init) or f"'{name}'" in inspect.getsource(ray.init)


def test_the_launcher_submits_through_public_serve() -> None:
    params = inspect.signature(serve.run_many).parameters
    assert "wait_for_applications_running" in params
    assert {"target", "name", "route_prefix", "logging_config"} <= set(
        inspect.signature(serve.RunTarget).parameters
    )


PRIVATE = re.compile(
    r"\bray\.[\w.]*\b_\w+|from ray[\w.]* import .*\b_\w+|\b_internal=|\b_temp_dir\b"
)


def private_uses(root: Path, allowed: Path) -> list[str]:
    """Lines outside `allowed` that name a private Ray API."""
    return [
        f"{p.relative_to(root)}:{n}"
        for p in sorted(root.rglob("*.py"))
        if p != allowed
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]


def test_no_private_ray_api_outside_its_module() -> None:
    assert private_uses(ROOT, ROOT / "ray_private.py") == []


def test_the_check_finds_a_planted_private_use(tmp_path: Path) -> None:
    (tmp_path / "ray_private.py").write_text("from ray._raylet import Config\n")
    (tmp_path / "launcher.py").write_text("from ray.serve.api import _run\n")
    assert private_uses(tmp_path, tmp_path / "ray_private.py") == ["launcher.py:1"]


def test_haproxys_template_is_hardened_where_ray_writes_it() -> None:
    from ray.serve._private import haproxy

    original = haproxy.HAPROXY_CONFIG_TEMPLATE
    out = ray_private.hardened_template(original, 7, 64)
    defaults = out.split("defaults\n", 1)[1].split("\nfrontend ", 1)[0]
    assert "    timeout http-request 7s\n" in defaults
    frontend = out.split("frontend http_frontend\n", 1)[1].split("\nbackend ", 1)[0]
    assert "tcp-request connection track-sc0 src" in frontend
    assert "tcp-request connection reject if { sc0_conn_cur gt 64 }" in frontend
    # the statistics and Prometheus listeners on loopback only
    binds = re.findall(r"^\s*bind (.+)$", out, re.M)
    assert "127.0.0.1:{{ config.metrics_port }}" in binds
    assert "127.0.0.1:{{ config.stats_port }}" in binds
    assert not [b for b in binds if b.startswith((":", "*:"))], binds
    # no limit per source: no table
    assert "sc0_conn_cur" not in ray_private.hardened_template(original, 7, 0)
    # a template without what it rewrites is refused by name
    try:
        ray_private.hardened_template(original.replace("bind *:", "bind 0.0.0.0:"), 7, 64)
    except ValueError as exc:
        assert "stats_port" in str(exc)
    else:
        raise AssertionError("a changed template was rewritten")


def test_the_setup_hook_rewrites_the_template_only_when_the_launcher_asked(
    monkeypatch: Any,
) -> None:
    from ray.serve._private import haproxy

    original = haproxy.HAPROXY_CONFIG_TEMPLATE
    monkeypatch.setattr(haproxy, "HAPROXY_CONFIG_TEMPLATE", original)
    for name in ray_private.haproxy_settings(1, None):
        monkeypatch.delenv(name, raising=False)
    ray_private.harden_haproxy()
    assert haproxy.HAPROXY_CONFIG_TEMPLATE == original  # a worker of another job
    for name, value in ray_private.haproxy_settings(9, 32).items():
        monkeypatch.setenv(name, value)
    ray_private.harden_haproxy()
    assert haproxy.HAPROXY_CONFIG_TEMPLATE == ray_private.hardened_template(original, 9, 32)
    # its name is what the launcher gives ray.init
    module, _, name = ray_private.HAPROXY_HOOK.rpartition(".")
    assert getattr(__import__(module, fromlist=[name]), name) is ray_private.harden_haproxy


def test_a_request_router_keeps_queue_lengths_where_the_affinity_router_reads_them() -> None:
    from ray.serve._private.request_router.common import ReplicaQueueLengthCache
    from ray.serve.request_router import RequestRouter

    assert "self._replica_queue_len_cache = ReplicaQueueLengthCache(" in inspect.getsource(
        RequestRouter.__init__
    )
    cache = ReplicaQueueLengthCache()
    cache.update("replica-1", 3)
    router = type("R", (), {"_replica_queue_len_cache": cache})()
    assert ray_private.queue_length(router, "replica-1") == 3
    assert ray_private.queue_length(router, "replica-2") is None
