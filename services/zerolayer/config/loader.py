"""Loading the config once: files in platform/, then environment variables, then CLI flags. The
only place that reads os.environ."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from zerolayer.config.platform_config import PlatformConfig
from zerolayer.errors import ConfigError

__all__ = ["default_platform_dir", "default_cache_dir", "load_config", "config_from_data"]


def default_platform_dir() -> Path:
    """platform/ of the source tree this package was installed from."""
    return Path(__file__).resolve().parents[3] / "platform"


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/zerolayer, else ~/.cache/zerolayer."""
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    base = env.get("XDG_CACHE_HOME") or str(home / ".cache")
    return Path(base) / "zerolayer"


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError as exc:
        raise ConfigError(f"missing config file {path}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at the top level")
    return data


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "ZEROLAYER_HOST" in env:
        out["host"] = env["ZEROLAYER_HOST"]
    if "ZEROLAYER_PORT" in env:
        out["port"] = int(env["ZEROLAYER_PORT"])
    if "ZEROLAYER_DEV_PLAN" in env:
        out["dev_plan"] = env["ZEROLAYER_DEV_PLAN"]
    if env.get("ZEROLAYER_CACHE_DIR"):
        out["cache_dir"] = env["ZEROLAYER_CACHE_DIR"]
    if env.get("ZEROLAYER_ADMIN_KEY"):
        out["admin_key"] = env["ZEROLAYER_ADMIN_KEY"]
    if env.get("ZEROLAYER_ARTIFACTS_DIR"):
        out["artifacts_dir"] = env["ZEROLAYER_ARTIFACTS_DIR"]
    redis: dict[str, Any] = {}
    if env.get("REDIS_URL"):
        redis["url"] = env["REDIS_URL"]
    if env.get("REDIS_PASSWORD_FILE"):
        redis["password_file"] = env["REDIS_PASSWORD_FILE"]
    if env.get("ZEROLAYER_REDIS_PORT"):
        redis["embedded_port"] = int(env["ZEROLAYER_REDIS_PORT"])
    if redis:
        out["redis"] = redis
    if env.get("RAY_ADDRESS"):
        out["ray"] = {"address": env["RAY_ADDRESS"]}
    if env.get("CC"):
        out["kernels"] = {"cc": env["CC"]}
    if env.get("ZEROLAYER_FILES_URL"):  # an object store's bucket (credentials: AWS_* variables)
        out["files"] = {"url": env["ZEROLAYER_FILES_URL"]}
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _format_validation(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        msg = err["msg"]
        if "TierPrice" in loc or any(p.startswith("literal[") for p in loc):
            # a plan's price is a TierPrice or `auto`: say that once, at the price's own place
            if any(p.startswith("literal[") for p in loc):
                continue
            if err["type"] == "model_type":
                msg = "a price ({prompt_per_1k, completion_per_1k}) or `auto`"
            loc = [p for p in loc if p != "TierPrice"]
        where = ".".join(loc) or "(top level)"
        lines.append(f"  {where}: {msg}")
    return "invalid platform config:\n" + "\n".join(lines)


def _read_serve_file(folder: Path, name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A serve file, on top of the one it names in `extends:` (a file of the same folder): the
    cluster's settings are the local ones plus what differs."""
    if name in seen:
        raise ConfigError(f"serve files extend each other in a loop: {' -> '.join(seen + (name,))}")
    data = _read_yaml(folder / name)
    base = data.pop("extends", None)
    if base is None:
        return data
    return _merge(_read_serve_file(folder, str(base), (*seen, name)), data)


def config_from_data(
    data: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> PlatformConfig:
    """A config already merged from files (the args of a cluster's Serve application), with the
    environment of the process on top: REDIS_URL, ZEROLAYER_ADMIN_KEY, ... from the pod."""
    env = os.environ if env is None else env
    try:
        return PlatformConfig.model_validate(_merge(dict(data), _env_overrides(env)))
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc)) from exc


def load_config(
    platform_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    serve_file: str = "local.yaml",
    environment: bool = True,
) -> PlatformConfig:
    """Load the platform config: files in platform_dir, then env, then overrides (CLI flags).
    environment=False leaves env's settings out (the files alone, as a cluster's serve config
    is generated: a developer's REDIS_URL or admin key must not end up in it)."""
    env = os.environ if env is None else env
    pdir = Path(platform_dir or env.get("ZEROLAYER_PLATFORM_DIR") or default_platform_dir())
    data: dict[str, Any] = {"cache_dir": str(default_cache_dir(env))}
    data = _merge(data, _read_serve_file(pdir / "serve", serve_file))
    data = _merge(data, _read_yaml(pdir / "models.yaml"))
    data = _merge(data, _read_yaml(pdir / "plans.yaml"))
    if environment:
        data = _merge(data, _env_overrides(env))
    data = _merge(data, dict(overrides or {}))
    try:
        return PlatformConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc)) from exc
