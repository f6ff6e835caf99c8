"""The launcher's keys: the admin key comes from the environment or a private file."""

from __future__ import annotations

import stat
from pathlib import Path

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
