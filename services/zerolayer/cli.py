"""The `zerolayer` command: up, status, models import, keys, usage, invoice, collapse,
cluster."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


def _cluster_config(args: argparse.Namespace) -> PlatformConfig:
    """The config a Kubernetes cluster runs: platform/serve/cluster.yaml instead of local.yaml,
    from the files alone (this machine's REDIS_URL, admin key, ... are not the cluster's)."""
    return load_config(platform_dir=args.platform_dir, serve_file="cluster.yaml", environment=False)


def _cmd_up(args: argparse.Namespace) -> int:
    from zerolayer.serve.launcher import Platform

    stop = threading.Event()

    def on_signal(signum: int, _: object) -> None:
        if stop.is_set():
            return
        stop.set()
        if signum == signal.SIGTERM:  # what systemd, Docker and Kubernetes send
            raise KeyboardInterrupt  # out of a start in progress, like Ctrl-C

    signal.signal(signal.SIGTERM, on_signal)
    platform = Platform(_config(args), on_sigterm=on_signal)
    try:
        platform.start()
        # The key goes to a terminal only: output sent to a file or a log gets its place.
        if sys.stdout.isatty():
            shown = key = platform.key or ""
        else:
            shown, key = f"in {platform.dev_key_path}", f"$(cat {platform.dev_key_path})"
        print(
            f"\nzerolayer is up.\n  base URL: {platform.base_url}\n  API key:  {shown}\n"
            f"  admin key: in {platform.admin_key_source}\n"
            f"  console:  {platform.base_url.removesuffix('/v1')}/console\n"
            f'  try: curl {platform.base_url}/models -H "Authorization: Bearer {key}"\n'
            "Press Ctrl-C to stop.",
            flush=True,
        )
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        # a second Ctrl-C or SIGTERM must not cut the stop short (Redis stops last)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
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


@contextmanager
def _key_store(cfg: PlatformConfig) -> Iterator[Any]:
    """A KeyStore on the platform's Redis (the embedded one is started for the command if no
    platform runs)."""
    from zerolayer.store.embedded import platform_redis
    from zerolayer.store.keys import KeyStore

    with platform_redis(cfg) as client:
        yield KeyStore(client)


def _known_plan(cfg: PlatformConfig, plan: str) -> str:
    if plan not in cfg.plans:
        raise ZerolayerError(f"unknown plan {plan!r}; plans: {', '.join(cfg.plans)}")
    return plan


def _cmd_keys_create(args: argparse.Namespace) -> int:
    cfg = _config(args)
    with _key_store(cfg) as store:
        key, record = store.create(
            _known_plan(cfg, args.plan), name=args.name or "", tenant=args.tenant
        )
    print(key)
    print(
        f"key id {record.key_id}, plan {record.plan}, tenant {record.owner}: store it now, it "
        "is not shown again",
        file=sys.stderr,
    )
    return 0


def _cmd_keys_list(args: argparse.Namespace) -> int:
    with _key_store(_config(args)) as store:
        records = store.list()
    head = f"{'key id':12s}  {'plan':12s}  {'state':8s}  {'created (UTC)':19s}  {'tenant':23s}"
    print(head + "  name")
    for r in records:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.created))
        state = "revoked" if r.revoked else "active"
        print(f"{r.key_id:12s}  {r.plan:12s}  {state:8s}  {created}  {r.owner:23s}  {r.name}")
    return 0


def _traffic(cfg: PlatformConfig, store: Any) -> Any:
    from zerolayer.store.traffic import TrafficStore

    return TrafficStore(store.client, cfg.traffic_sampling.retention_s)


def _cmd_keys_revoke(args: argparse.Namespace) -> int:
    cfg = _config(args)
    with _key_store(cfg) as store:
        record = store.revoke(args.key_id)  # an unknown id is a ZerolayerError (exit 2)
        deleted = _traffic(cfg, store).purge(record.key_id)
    print(
        f"revoked {record.key_id} (plan {record.plan}); every gateway refuses it now; "
        f"{deleted} kept prompts deleted"
    )
    return 0


def _cmd_keys_sampling(args: argparse.Namespace) -> int:
    cfg = _config(args)
    value = {"on": True, "off": False, "plan": None}[args.setting]
    with _key_store(cfg) as store:
        record = store.set_sampling(args.key_id, value)
        deleted = _traffic(cfg, store).purge(record.key_id) if value is False else 0
    plan_default = cfg.plans[record.plan].sample_traffic if record.plan in cfg.plans else False
    state = "kept" if record.samples(plan_default) else "not kept"
    note = f"; {deleted} kept prompts deleted" if value is False else ""
    print(f"{record.key_id}: prompts {state} for recalibration ({args.setting}){note}")
    return 0


def _cmd_keys_traffic(args: argparse.Namespace) -> int:
    import json

    cfg = _config(args)
    with _key_store(cfg) as store:
        store.get(args.key_id)  # an unknown id is a ZerolayerError (exit 2)
        traffic = _traffic(cfg, store)
        if args.delete:
            print(f"{args.key_id}: {traffic.purge(args.key_id)} kept prompts deleted")
            return 0
        for e in traffic.entries(args.key_id):
            print(json.dumps(e.public(), ensure_ascii=False))
    return 0


def _cmd_keys_set_plan(args: argparse.Namespace) -> int:
    cfg = _config(args)
    with _key_store(cfg) as store:
        record = store.set_plan(args.key_id, _known_plan(cfg, args.plan))
    print(f"{record.key_id}: plan {record.plan}")
    return 0


def _billing(cfg: PlatformConfig, args: argparse.Namespace, work: Any) -> Any:
    """Run work(ledger, tenant) on the platform's Redis (its embedded one started for the
    command if no platform runs); the tenant of --tenant, or of --key's key."""
    import asyncio

    from zerolayer.billing.ledger import Ledger
    from zerolayer.store.connect import async_client, sync_client
    from zerolayer.store.embedded import platform_redis_config
    from zerolayer.store.keys import KeyStore, UnknownKey

    with platform_redis_config(cfg) as rc:
        tenant = args.tenant
        if args.key is not None:
            sync = sync_client(rc)
            try:
                tenant = KeyStore(sync).get(args.key).owner
            except UnknownKey as exc:
                raise ZerolayerError(str(exc)) from exc
            finally:
                sync.close()
        if tenant is None:
            raise ZerolayerError("say whose: --tenant TENANT or --key KEY_ID")

        async def main() -> Any:
            client = async_client(rc)
            try:
                return await work(Ledger(client, cfg.billing.close_after_s), tenant)
            finally:
                await client.aclose()

        return asyncio.run(main())


def _usage_table(report: dict[str, Any]) -> str:
    groups = report["group_by"]
    head = [*groups, "requests", "prompt", "cached", "completion", "cost (USD)"]
    rows = [
        [
            *(str(r[g]) for g in groups),
            str(r["requests"]),
            str(r["prompt_tokens"]),
            str(r["cached_prompt_tokens"]),
            str(r["completion_tokens"]),
            r["cost_usd"],
        ]
        for r in [*report["data"], {**report["totals"], **dict.fromkeys(groups, "total")}]
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _cmd_usage(args: argparse.Namespace) -> int:
    import json
    from datetime import date

    from zerolayer.billing.ledger import parse_day

    cfg = _config(args)
    today = date.today()
    first = parse_day(args.start, "start") if args.start else today.replace(day=1)
    last = parse_day(args.end, "end") if args.end else today
    groups = [g for g in args.group_by.split(",") if g]

    async def work(ledger: Any, tenant: str) -> Any:
        return await ledger.usage(tenant, first, last, groups)

    report = _billing(cfg, args, work)
    print(json.dumps(report, indent=1) if args.json else _usage_table(report))
    return 0


def _cmd_invoice(args: argparse.Namespace) -> int:
    import json
    import time as _time

    from zerolayer.billing.ledger import event_row, invoice_csv, parse_month

    cfg = _config(args)
    month = parse_month(args.month or _time.strftime("%Y-%m", _time.gmtime()))

    async def work(ledger: Any, tenant: str) -> Any:
        inv = await ledger.invoice(tenant, month)
        events = [e async for e in ledger.events(tenant, month)] if args.events else []
        return inv, events

    inv, events = _billing(cfg, args, work)
    if args.events == "jsonl":
        for text in events:
            print(text)
    elif args.events == "csv":
        import csv

        from zerolayer.billing.ledger import EVENT_COLUMNS

        w = csv.DictWriter(sys.stdout, EVENT_COLUMNS, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        for text in events:
            w.writerow(event_row(text))
    elif args.format == "json":
        print(json.dumps(inv, indent=1))
    elif args.format == "csv":
        sys.stdout.write(invoice_csv(inv))
    else:
        print(f"invoice {inv['id']}  {inv['month']}  {inv['status']}")
        for line in inv["lines"]:
            late = f"  (late, from {line['late_from']})" if line["late_from"] else ""
            print(
                f"  {line['model']}:{line['tier']:10s} {line['plan']:10s} "
                f"{line['requests']:8d} requests  {line['prompt_tokens']:10d} prompt  "
                f"{line['completion_tokens']:10d} completion  ${line['amount_usd']}{late}"
            )
        print(f"  subtotal ${inv['subtotal_usd']}   total due ${inv['total_usd']}")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    import json

    import httpx

    from zerolayer.status import fetch_status

    cfg = _config(args)
    url = args.url or f"http://{cfg.host}:{cfg.port}"
    try:
        report, table = fetch_status(url)
    except httpx.HTTPError as exc:
        print(f"no platform answers at {url}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=1) if args.json else table)
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

    status = sub.add_parser("status", help="a running platform's health and per-tier metrics")
    status.add_argument("--url", default=None, help="the platform (default http://HOST:PORT)")
    status.add_argument("--json", action="store_true", help="the report as JSON")
    status.set_defaults(func=_cmd_status)

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
    create.add_argument(
        "--tenant",
        default=None,
        help="make the key for this existing tenant (it sees the tenant's stored responses "
        "and conversations); default: a new tenant",
    )
    create.set_defaults(func=_cmd_keys_create)
    listing = keys.add_parser("list", help="list keys (ids, plans, states; never the keys)")
    listing.set_defaults(func=_cmd_keys_list)
    revoke = keys.add_parser("revoke", help="revoke a key; gateways refuse it at once")
    revoke.add_argument("key_id", help="the key id (`keys list`)")
    revoke.set_defaults(func=_cmd_keys_revoke)
    sampling = keys.add_parser(
        "sampling", help="keep a sample of a key's prompts for recalibration, or not"
    )
    sampling.add_argument("key_id", help="the key id (`keys list`)")
    sampling.add_argument(
        "setting", choices=["on", "off", "plan"], help="off also deletes what was kept"
    )
    sampling.set_defaults(func=_cmd_keys_sampling)
    traffic = keys.add_parser("traffic", help="the prompts kept of a key (JSON lines)")
    traffic.add_argument("key_id", help="the key id (`keys list`)")
    traffic.add_argument("--delete", action="store_true", help="delete them instead")
    traffic.set_defaults(func=_cmd_keys_traffic)
    set_plan = keys.add_parser("set-plan", help="move a key to another plan")
    set_plan.add_argument("key_id", help="the key id (`keys list`)")
    set_plan.add_argument("--plan", required=True, help="plan name from platform/plans.yaml")
    set_plan.set_defaults(func=_cmd_keys_set_plan)

    def whose(cmd: argparse.ArgumentParser) -> None:
        who = cmd.add_mutually_exclusive_group()
        who.add_argument("--tenant", default=None, help="the tenant (`keys list` shows them)")
        who.add_argument("--key", default=None, help="the tenant of this key id")

    usage = sub.add_parser("usage", help="a tenant's metered usage and cost (from billing)")
    whose(usage)
    usage.add_argument("--start", default=None, help="first day, YYYY-MM-DD (default: 1st)")
    usage.add_argument("--end", default=None, help="last day, YYYY-MM-DD (default: today)")
    usage.add_argument(
        "--group-by", default="day", help="comma-separated: day, key, model, tier (default day)"
    )
    usage.add_argument("--json", action="store_true", help="the report as JSON")
    usage.set_defaults(func=_cmd_usage)
    invoice = sub.add_parser("invoice", help="a tenant's invoice of a month, or its events")
    invoice.add_argument("month", nargs="?", default=None, help="YYYY-MM (default: this month)")
    whose(invoice)
    invoice.add_argument("--format", choices=["text", "json", "csv"], default="text")
    invoice.add_argument(
        "--events", choices=["jsonl", "csv"], default=None, help="export the month's events"
    )
    invoice.set_defaults(func=_cmd_invoice)

    from zerolayer.collapse.commands import add_parser as add_collapse

    add_collapse(sub, lambda fn: lambda args: fn(args, _config(args)))

    from zerolayer.cluster.commands import add_parser as add_cluster

    add_cluster(sub, _cluster_config)
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
