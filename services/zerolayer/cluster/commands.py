"""`zerolayer cluster`: the platform on Kubernetes (the Helm chart in helm/zerolayer).

serve-config   the RayService's serveConfigV2 from the platform config (the chart's copy)
prepare        import the models and build missing artifacts into the cache (the chart's Job);
               --wait: wait until they are there (the Ray pods' init step)
status         the RayService, each Serve application and deployment, replicas per tier
scale          a tier's replica range: its Serve autoscaling and its worker group's pods
rollout        a new Ray cluster with the current spec, traffic switched when it is ready
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from zerolayer.errors import ClusterError

__all__ = ["add_parser", "tier_apps_of", "scale_patch", "status_report", "RESTARTED_AT"]

# set on the head's pod template by `rollout`: a changed template makes KubeRay bring up a new
# cluster (upgradeStrategy NewCluster) and switch the serve Service to it once it is ready
RESTARTED_AT = "zerolayer.io/restarted-at"


def _serve(obj: dict[str, Any]) -> dict[str, Any]:
    raw = (obj.get("spec") or {}).get("serveConfigV2") or ""
    try:
        data = yaml.safe_load(raw) or {}
    except yaml.YAMLError as exc:
        raise ClusterError(f"the RayService's serveConfigV2 is not valid YAML: {exc}") from exc
    return data if isinstance(data, dict) else {}


def tier_apps_of(serve: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The serve config's applications of each tier (its own and its short-request group's)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for app in serve.get("applications") or []:
        tier = (app.get("args") or {}).get("tier")
        if tier:
            out.setdefault(str(tier), []).append(app)
    return out


def _groups(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(
        ((obj.get("spec") or {}).get("rayClusterConfig") or {}).get("workerGroupSpecs") or []
    )


def _group_of(obj: dict[str, Any], tier: str) -> dict[str, Any] | None:
    for g in _groups(obj):
        if g.get("groupName") == f"tier-{tier}":
            return g
    return None


def scale_patch(obj: dict[str, Any], tier: str, low: int, high: int) -> dict[str, Any]:
    """The merge patch that gives the tier low..high Serve replicas, and its worker group the
    pods they need (the group offers `replicas per pod` units of the tier's resource)."""
    from zerolayer.serve.cluster import dump_serve_config, tier_resource

    if low < 0 or high < 1 or low > high:
        raise ClusterError(f"--min {low} --max {high}: need 0 <= min <= max and max >= 1")
    serve = _serve(obj)
    apps = tier_apps_of(serve).get(tier)
    if not apps:
        raise ClusterError(
            f"no tier {tier!r} in the RayService (tiers: {', '.join(sorted(tier_apps_of(serve)))})"
        )
    for app in apps:
        for dep in app.get("deployments") or []:
            auto = dict(dep.get("autoscaling_config") or {})
            auto.update(min_replicas=low, max_replicas=high)
            init = auto.get("initial_replicas")
            if init is not None and not low <= init <= high:
                auto["initial_replicas"] = min(max(init, low), high)
            dep["autoscaling_config"] = auto
            dep.pop("num_replicas", None)
    patch: dict[str, Any] = {"spec": {"serveConfigV2": dump_serve_config(serve)}}
    group = _group_of(obj, tier)
    if group is not None:
        per_pod = max(1, int(float((group.get("resources") or {}).get(tier_resource(tier), 1))))
        groups = _groups(obj)
        for g in groups:
            if g is group:
                g["minReplicas"] = math.ceil(low / per_pod)
                g["maxReplicas"] = max(1, math.ceil(high / per_pod) * len(apps))
                if "replicas" in g:
                    g["replicas"] = min(max(int(g["replicas"]), g["minReplicas"]), g["maxReplicas"])
        # a merge patch replaces a list whole: every group goes, changed or not
        patch["spec"]["rayClusterConfig"] = {"workerGroupSpecs": groups}
    return patch


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def _running(replicas: list[dict[str, Any]]) -> int:
    return sum(1 for r in replicas if r.get("state") == "RUNNING")


def status_report(
    obj: dict[str, Any], pods: list[dict[str, Any]], details: dict[str, Any] | None
) -> dict[str, Any]:
    """What `status` says: the RayService's state, its applications and deployments, and per
    tier the Serve replicas (running, and the autoscaling range) and the worker group's pods."""
    st = obj.get("status") or {}
    active = st.get("activeServiceStatus") or {}
    pending = st.get("pendingServiceStatus") or {}
    serve = _serve(obj)
    live = (details or {}).get("applications") or {}
    apps = {}
    for name, a in (active.get("applicationStatuses") or {}).items():
        deps = {
            d: {"status": ds.get("status"), "message": ds.get("message") or ""}
            for d, ds in (a.get("serveDeploymentStatuses") or {}).items()
        }
        apps[name] = {
            "status": a.get("status"),
            "message": a.get("message") or "",
            "deployments": deps,
        }
    cluster = active.get("rayClusterName")
    tiers = {}
    for tier, tapps in tier_apps_of(serve).items():
        auto = ((tapps[0].get("deployments") or [{}])[0]).get("autoscaling_config") or {}
        group = _group_of(obj, tier) or {}
        gpods = [
            p
            for p in pods
            if (p["metadata"].get("labels") or {}).get("ray.io/group") == f"tier-{tier}"
            and (cluster is None or p["metadata"]["labels"].get("ray.io/cluster") == cluster)
        ]
        ready = sum(1 for p in gpods if _pod_ready(p))
        running = None
        if live:
            running = sum(
                _running(d.get("replicas") or [])
                for a in tapps
                for d in ((live.get(a["name"]) or {}).get("deployments") or {}).values()
            )
        tiers[tier] = {
            "applications": {a["name"]: (apps.get(a["name"]) or {}).get("status") for a in tapps},
            "serve_replicas": running,
            "min_replicas": auto.get("min_replicas"),
            "max_replicas": auto.get("max_replicas"),
            "pods_ready": ready,
            "pods": len(gpods),
            "group_min": group.get("minReplicas"),
            "group_max": group.get("maxReplicas"),
        }
    return {
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"].get("namespace"),
        "ready": _condition(obj, "Ready"),
        "upgrading": _condition(obj, "UpgradeInProgress") == "True" or bool(pending),
        "cluster": cluster,
        "pending_cluster": pending.get("rayClusterName"),
        "applications": apps,
        "tiers": tiers,
    }


def _pod_ready(pod: dict[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def _table(r: dict[str, Any]) -> str:
    ready = {"True": "ready", "False": "not ready"}.get(str(r["ready"]), "state unknown")
    lines = [f"rayservice {r['namespace']}/{r['name']}: {ready}, cluster {r['cluster'] or '-'}"]
    if r["upgrading"]:
        lines.append(f"  upgrade in progress: new cluster {r['pending_cluster'] or '(starting)'}")
    lines.append("")
    lines.append(f"{'application':32s} {'status':14s} deployments")
    for name, a in sorted(r["applications"].items()):
        deps = ", ".join(f"{d} {v['status']}" for d, v in sorted(a["deployments"].items()))
        lines.append(f"{name:32s} {str(a['status']):14s} {deps}")
        for d, v in sorted(a["deployments"].items()):
            if v["message"] and v["status"] != "HEALTHY":
                lines.append(f"  {d}: {v['message'][:200]}")
    lines.append("")
    lines.append(f"{'tier':12s} {'replicas (min-max)':22s} pods ready/all (group min-max)")
    for tier, t in sorted(r["tiers"].items()):
        running = "?" if t["serve_replicas"] is None else str(t["serve_replicas"])
        rng = f"{running} ({t['min_replicas']}-{t['max_replicas']})"
        grp = f"{t['pods_ready']}/{t['pods']} ({t['group_min']}-{t['group_max']})"
        lines.append(f"{tier:12s} {rng:22s} {grp}")
    return "\n".join(lines)


def _client(args: argparse.Namespace) -> Any:
    from zerolayer.cluster.kube import RayServiceClient

    return RayServiceClient(
        args.name, args.namespace, args.kubeconfig, args.context, timeout_s=args.timeout
    )


def _cmd_status(args: argparse.Namespace) -> int:
    rs = _client(args)
    obj = rs.get()
    pods = rs.pods(f"app.kubernetes.io/instance={args.release or args.name}")
    details = rs.serve_details(f"{args.name}-head-svc")
    report = status_report(obj, pods, details)
    print(json.dumps(report, indent=1) if args.json else _table(report))
    return 0


def _cmd_scale(args: argparse.Namespace) -> int:
    rs = _client(args)
    rs.update(lambda obj: scale_patch(obj, args.tier, args.min, args.max))
    print(f"tier {args.tier}: {args.min} to {args.max} replicas (Serve applies it in place)")
    return 0


def _cmd_rollout(args: argparse.Namespace) -> int:
    rs = _client(args)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def restart(_obj: dict[str, Any]) -> dict[str, Any]:
        meta = {"annotations": {RESTARTED_AT: stamp}}
        return {"spec": {"rayClusterConfig": {"headGroupSpec": {"template": {"metadata": meta}}}}}

    rs.update(restart)
    print(f"rollout {stamp}: KubeRay starts a new Ray cluster and moves traffic when it is ready")
    if not args.wait:
        return 0
    deadline = time.monotonic() + args.wait_timeout
    while time.monotonic() < deadline:
        time.sleep(args.poll)
        obj = rs.get()
        report = status_report(obj, [], None)
        if report["ready"] == "True" and not report["upgrading"]:
            print(f"rollout done: serving from cluster {report['cluster']}")
            return 0
        print(f"  waiting: new cluster {report['pending_cluster'] or '(starting)'}", flush=True)
    print(f"the rollout did not finish within {args.wait_timeout:.0f} s", file=sys.stderr)
    return 1


def _cmd_serve_config(args: argparse.Namespace) -> int:
    from zerolayer.serve.cluster import dump_serve_config, serve_config

    text = dump_serve_config(serve_config(args.load_config(args), args.accelerator))
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _serve_file_config(path: str) -> Any:
    from zerolayer.config import config_from_data
    from zerolayer.serve.cluster import platform_config_of

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ClusterError(f"cannot read the serve config {path}: {exc}") from exc
    return config_from_data(platform_config_of(data if isinstance(data, dict) else {}))


def _cmd_prepare(args: argparse.Namespace) -> int:
    from zerolayer.cluster.prepare import prepare, wait_prepared

    # in the chart's pods: the config the RayService runs, not a platform/ folder
    cfg = _serve_file_config(args.serve_config) if args.serve_config else args.load_config(args)
    if args.wait:
        return wait_prepared(cfg, args.wait_timeout, args.poll)
    return prepare(cfg)


def _with_cluster_errors(fn: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except ClusterError as exc:
            print(f"zerolayer cluster: {exc}", file=sys.stderr)
            return 1

    return run


def add_parser(sub: Any, cluster_config: Any) -> None:
    """Register `cluster` and its subcommands; cluster_config(args) loads the config of
    platform/serve/cluster.yaml (when a subcommand needs it)."""
    cl = sub.add_parser("cluster", help="the platform on Kubernetes (helm/zerolayer)")
    cl.set_defaults(load_config=cluster_config)
    cmds = cl.add_subparsers(dest="sub", required=True)

    def kube(p: argparse.ArgumentParser) -> None:
        p.add_argument("--name", default="zerolayer", help="the RayService (default zerolayer)")
        p.add_argument("-n", "--namespace", default="default", help="its namespace")
        p.add_argument("--release", default=None, help="the Helm release (default: --name)")
        p.add_argument("--kubeconfig", default=None, help="kubeconfig (default ~/.kube/config)")
        p.add_argument("--context", default=None, help="kubeconfig context")
        p.add_argument("--timeout", type=float, default=10.0, help="seconds per API call")

    sc = cmds.add_parser("serve-config", help="the RayService's serveConfigV2 (YAML)")
    sc.add_argument("--accelerator", choices=["gpu", "cpu"], default="gpu")
    sc.add_argument("--out", default=None, help="write it here (default: stdout)")
    sc.set_defaults(func=_cmd_serve_config)

    prep = cmds.add_parser("prepare", help="import models, build missing artifacts (once)")
    prep.add_argument("--serve-config", default=None, help="take the config from this file")
    prep.add_argument("--wait", action="store_true", help="only wait until they are there")
    prep.add_argument("--wait-timeout", type=float, default=6 * 3600.0, help="seconds")
    prep.add_argument("--poll", type=float, default=10.0, help="seconds between checks")
    prep.set_defaults(func=_cmd_prepare)

    st = cmds.add_parser("status", help="the RayService, its applications, replicas per tier")
    kube(st)
    st.add_argument("--json", action="store_true", help="the report as JSON")
    st.set_defaults(func=_with_cluster_errors(_cmd_status))

    sc2 = cmds.add_parser("scale", help="set a tier's replica range")
    kube(sc2)
    sc2.add_argument("tier", help="tier name (baseline, masked, dynamic, sparse24, ...)")
    sc2.add_argument("--min", type=int, required=True, help="fewest replicas")
    sc2.add_argument("--max", type=int, required=True, help="most replicas")
    sc2.set_defaults(func=_with_cluster_errors(_cmd_scale))

    ro = cmds.add_parser("rollout", help="a new Ray cluster, traffic moved when it is ready")
    kube(ro)
    ro.add_argument("--wait", action="store_true", help="wait until traffic moved")
    ro.add_argument("--wait-timeout", type=float, default=1800.0, help="seconds")
    ro.add_argument("--poll", type=float, default=10.0, help="seconds between checks")
    ro.set_defaults(func=_with_cluster_errors(_cmd_rollout))
