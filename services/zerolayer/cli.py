"""The `zerolayer` command: up, models import, keys create, collapse."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from zerolayer.config import PlatformConfig, load_config
from zerolayer.errors import ZerolayerError

__all__ = ["main"]


def _config(args: argparse.Namespace) -> PlatformConfig:
    overrides = {}
    if getattr(args, "port", None) is not None:
        overrides["port"] = args.port
    if getattr(args, "host", None) is not None:
        overrides["host"] = args.host
    return load_config(platform_dir=args.platform_dir, overrides=overrides)


def _cmd_up(args: argparse.Namespace) -> int:
    from zerolayer.serve.launcher import Platform

    platform = Platform(_config(args))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        platform.start()
        print(
            f"\nzerolayer is up.\n  base URL: {platform.base_url}\n  API key:  {platform.key}\n"
            f"  try: curl {platform.base_url}/models -H 'Authorization: Bearer {platform.key}'\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        print("stopping zerolayer ...", file=sys.stderr, flush=True)
        platform.stop()
        print("stopped.", file=sys.stderr, flush=True)
    return 0


def _cmd_models_import(args: argparse.Namespace) -> int:
    from zerolayer.models.importer import import_model

    cfg = _config(args)
    names = args.names or list(cfg.models)
    for name in names:
        if name not in cfg.models:
            raise ZerolayerError(
                f"unknown model {name!r}; platform/models.yaml has {list(cfg.models)}"
            )
        out = import_model(name, cfg.models[name], cfg.model_dir(name), force=args.force)
        print(f"{name}: {out}")
    return 0


def _cmd_keys_create(args: argparse.Namespace) -> int:
    import redis

    from zerolayer.store.embedded import EmbeddedRedis
    from zerolayer.store.keys import KeyStore

    cfg = _config(args)
    if args.plan not in cfg.plans:
        raise ZerolayerError(f"unknown plan {args.plan!r}; plans: {', '.join(cfg.plans)}")
    embedded = None
    url = cfg.redis.url
    if url is None:
        embedded = EmbeddedRedis(cfg.redis_data_dir(), cfg.redis.embedded_port)
        url = embedded.start()
    try:
        client = redis.Redis.from_url(url)
        key, record = KeyStore(client).create(args.plan, name=args.name or "")
        client.close()
    finally:
        if embedded is not None:
            embedded.stop()
    print(key)
    print(
        f"key id {record.key_id}, plan {record.plan}: store it now, it is not shown again",
        file=sys.stderr,
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zerolayer", description=__doc__)
    p.add_argument(
        "--platform-dir",
        type=Path,
        default=None,
        help="folder with models.yaml, plans.yaml, serve/ (default: the repo's platform/)",
    )
    sub = p.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start Redis, Ray Serve and every tier; Ctrl-C stops")
    up.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=None, help="HTTP port (default 8000)")
    up.set_defaults(func=_cmd_up)

    models = sub.add_parser("models", help="model artifacts").add_subparsers(
        dest="sub", required=True
    )
    imp = models.add_parser("import", help="import models into the cache (once)")
    imp.add_argument("names", nargs="*", help="models to import (default: all in models.yaml)")
    imp.add_argument("--force", action="store_true", help="import again even if present")
    imp.set_defaults(func=_cmd_models_import)

    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="sub", required=True)
    create = keys.add_parser("create", help="create a key; it is printed once")
    create.add_argument("--plan", required=True, help="plan name from platform/plans.yaml")
    create.add_argument("--name", default=None, help="a label for the key")
    create.set_defaults(func=_cmd_keys_create)
    from zerolayer.collapse.commands import add_parser as add_collapse

    add_collapse(sub, lambda fn: lambda args: fn(args, _config(args)))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except ZerolayerError as exc:
        print(f"zerolayer: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
