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

tests/test_ray_private.py checks that the installed Ray still behaves as each function relies
on, so a Ray upgrade that changes one fails there, by name, instead of somewhere in a start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["versioned", "reload_auth_token", "temp_dir_option"]


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
