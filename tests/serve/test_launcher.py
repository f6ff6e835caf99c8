"""The launcher's keys: the admin key comes from the environment or a private file."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from zerolayer.config import PlatformConfig
from zerolayer.serve.launcher import admin_key


def test_admin_key_is_made_once_in_a_private_file(
    base_config: PlatformConfig, tmp_path: Path
) -> None:
    cfg = base_config.model_copy(update={"admin_key_file": str(tmp_path / "admin-key")})
    key = admin_key(cfg)
    assert key.startswith("zla-") and len(key) > 40
    mode = stat.S_IMODE((tmp_path / "admin-key").stat().st_mode)
    assert mode == 0o600
    assert admin_key(cfg) == key  # reused on the next start


def test_admin_key_from_the_environment_wins_and_is_never_dumped(
    base_config: PlatformConfig, tmp_path: Path
) -> None:
    cfg = base_config.model_copy(
        update={"admin_key": "zla-from-env", "admin_key_file": str(tmp_path / "admin-key")}
    )
    assert admin_key(cfg) == "zla-from-env" and not (tmp_path / "admin-key").exists()
    assert "zla-from-env" not in str(cfg.model_dump())  # deployments get the config dumped


def test_admin_key_variable_reaches_the_config(tmp_path: Path) -> None:
    from zerolayer.config import load_config

    home = str(tmp_path)
    assert load_config(env={"HOME": home, "ZEROLAYER_ADMIN_KEY": "zla-env"}).admin_key == "zla-env"
    assert load_config(env={"HOME": home}).admin_key is None


def test_haproxy_files_stay_private_with_a_socket_path_haproxy_accepts(
    tmp_path: Path, monkeypatch: Any
) -> None:
    import os
    import tempfile

    from zerolayer.config import RayConfig
    from zerolayer.ray_private import haproxy_settings
    from zerolayer.serve import launcher

    for name in haproxy_settings(1, None):
        monkeypatch.setenv(name, "")
    for name in ("ENABLE_HA_PROXY", "HAPROXY_CONFIG_FILE_LOC", "HAPROXY_SOCKET_PATH"):
        monkeypatch.setenv(f"RAY_SERVE_{name}", "")  # restored after the test
    for name in ("SERVER_STATE_BASE", "SERVER_STATE_FILE", "METRICS_PORT"):
        monkeypatch.setenv(f"RAY_SERVE_HAPROXY_{name}", "")
    for tmp in (tmp_path, tmp_path / ("deep-" * 15)):  # the second: too long for the socket
        tmp.mkdir(exist_ok=True)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        monkeypatch.setenv("RAY_SERVE_HAPROXY_STATS_PORT", "8404")  # as a parent platform left
        launcher._haproxy_env(RayConfig(haproxy_connections_per_source=32))
        folder = Path(os.environ["RAY_SERVE_HAPROXY_CONFIG_FILE_LOC"]).parent
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
        assert Path(os.environ["RAY_SERVE_HAPROXY_SOCKET_PATH"]).parent == folder
        # Ray puts the socket one 56-character session folder below the configured one
        socket = Path(os.environ["RAY_SERVE_HAPROXY_SOCKET_PATH"])
        assert len(str(folder / ("x" * 56) / socket.name)) <= 97
        ports = {os.environ[f"RAY_SERVE_HAPROXY_{p}_PORT"] for p in ("STATS", "METRICS")}
        assert "8404" not in ports and len(ports) == 2
        # the settings the worker setup hook hardens HAProxy's template with
        assert {k: os.environ[k] for k in haproxy_settings(10, 32)} == haproxy_settings(10, 32)
    assert not str(folder).startswith(str(tmp_path))  # the long one fell back to /tmp
