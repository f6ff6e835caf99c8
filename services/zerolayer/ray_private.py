"""The private Ray APIs zerolayer relies on, all of them, in this one module.

Each is here because no public API does the job (checked against Ray 2.60):

- `versioned`: a deployment's code version. Serve draws a random version at every deploy
  unless one is given, and a new version restarts every replica; only Serve's own code may set
  one (`Deployment.options(version=..., _internal=True)`). With a fixed version, a new
  artifact stamp (Serve's user_config) is a lightweight update: `reconfigure`, no restart.
- `reload_auth_token`: Ray reads its token-authentication settings once, at import; a process
  that imported Ray before the launcher set them re-reads them through `ray._raylet`.
- `temp_dir_option`: the folder of a local Ray's session files (logs, sockets), which
  `ray.init` only takes as `_temp_dir`.
- `harden_haproxy` (a Ray worker process's setup hook, `HAPROXY_HOOK`): Ray Serve writes
  HAProxy's configuration from a template in its private module and takes no setting for a
  header timeout, a limit of connections per client address, or the address of its statistics
  and Prometheus listeners (both bound to every interface). The hook rewrites the template in
  the process that renders it (Serve's proxy actor), from the settings the launcher puts in
  the environment (`haproxy_settings`).
- `queue_length`: a request router's last known queue length of a replica. Serve's public
  RequestRouter only says whether a replica has room (`select_available_replicas`); the
  affinity router (replicas/routing.py) needs the lengths to tell a busy preferred replica.

tests/test_ray_private.py checks that the installed Ray still behaves as each function relies
on, so a Ray upgrade that changes one fails there, by name, instead of somewhere in a start."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

__all__ = [
    "HAPROXY_HOOK",
    "harden_haproxy",
    "haproxy_settings",
    "hardened_template",
    "queue_length",
    "reload_auth_token",
    "temp_dir_option",
    "versioned",
]

log = logging.getLogger(__name__)

HAPROXY_HOOK = "zerolayer.ray_private.harden_haproxy"
_HEADER_TIMEOUT = "ZEROLAYER_HAPROXY_HEADER_TIMEOUT_S"
_PER_SOURCE = "ZEROLAYER_HAPROXY_CONNECTIONS_PER_SOURCE"


def queue_length(router: Any, replica_id: Any) -> int | None:
    """A request router's cached queue length of a replica (None: unknown or stale)."""
    length = router._replica_queue_len_cache.get(replica_id)
    return None if length is None else int(length)


def versioned(deployment: Any, version: str) -> Any:
    """The Serve deployment with this fixed code version."""
    return deployment.options(version=version, _internal=True)


def reload_auth_token() -> bool:
    """Make this process's Ray read its token-authentication settings again (RAY_AUTH_MODE,
    RAY_AUTH_TOKEN_PATH); False for a Ray without token authentication."""
    try:
        # ray/_raylet.pyi lists neither; the compiled module has both (tests/test_ray_private.py)
        from ray._raylet import (  # type: ignore[attr-defined]
            AuthenticationTokenLoader,
            Config,
        )
    except ImportError:
        return False
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
    return True


def temp_dir_option(folder: Path) -> dict[str, Any]:
    """ray.init's keyword for the root folder of a local Ray's session files."""
    return {"_temp_dir": str(folder)}


def haproxy_settings(header_timeout_s: int, connections_per_source: int | None) -> dict[str, str]:
    """The environment that harden_haproxy reads (set by the launcher before Ray starts)."""
    return {
        _HEADER_TIMEOUT: str(header_timeout_s),
        _PER_SOURCE: str(connections_per_source or 0),
    }


# what the hook rewrites in Ray's template: each anchor must be there once
_DEFAULTS = "defaults\n    mode http\n"
_FRONTEND = (
    "frontend http_frontend\n    bind {{ config.frontend_host }}:{{ config.frontend_port }}\n"
)
_LISTENERS = {
    "bind :{{ config.metrics_port }}": "bind 127.0.0.1:{{ config.metrics_port }}",
    "bind *:{{ config.stats_port }}": "bind 127.0.0.1:{{ config.stats_port }}",
}


def hardened_template(template: str, header_timeout_s: int, per_source: int) -> str:
    """Ray Serve's HAProxy template with a header timeout (`timeout http-request`: a client
    has this long to send its request line and headers), at most `per_source` open
    connections per client address (0: no limit; more are refused at connect), and the
    statistics and Prometheus listeners on 127.0.0.1 only. ValueError when the template no
    longer has what this rewrites (a Ray upgrade: tests/test_ray_private.py says so)."""
    for anchor in (_DEFAULTS, _FRONTEND, *_LISTENERS):
        if template.count(anchor) != 1:
            raise ValueError(f"Ray's HAProxy template has no single {anchor.strip()!r}")
    out = template.replace(_DEFAULTS, f"{_DEFAULTS}    timeout http-request {header_timeout_s}s\n")
    if per_source > 0:
        out = out.replace(
            _FRONTEND,
            _FRONTEND
            + "    stick-table type ip size 100k expire 60s store conn_cur\n"
            + "    tcp-request connection track-sc0 src\n"
            + f"    tcp-request connection reject if {{ sc0_conn_cur gt {per_source} }}\n",
        )
    for old, new in _LISTENERS.items():
        out = out.replace(old, new)
    return out


def harden_haproxy() -> None:
    """A Ray worker's setup hook: the HAProxy template of this process's Ray Serve, hardened
    (hardened_template) with the launcher's settings; nothing when they are not set (a worker
    of another job) or Serve has no HAProxy. A template it cannot rewrite is left as it is,
    with a warning: the proxy still starts."""
    timeout = os.environ.get(_HEADER_TIMEOUT)
    if not timeout:
        return
    try:
        from ray.serve._private import haproxy
    except ImportError:
        return
    try:
        haproxy.HAPROXY_CONFIG_TEMPLATE = hardened_template(
            haproxy.HAPROXY_CONFIG_TEMPLATE, int(timeout), int(os.environ.get(_PER_SOURCE) or 0)
        )
    except ValueError as exc:
        log.warning("HAProxy's configuration is Ray's own: %s", exc)
