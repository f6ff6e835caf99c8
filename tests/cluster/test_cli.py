"""`zerolayer cluster status | scale | rollout` against a local HTTP server that answers the
Kubernetes API paths they use (no cluster is reachable here): the RayService (get, JSON merge
patch with resourceVersion checks and 409 conflicts), its pods, and the Ray dashboard through the
service proxy. The RayService it holds is the chart's own rendering."""

from __future__ import annotations

import copy
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import yaml
from zerolayer.cli import main

from tests.helm.conftest import one

NS, NAME = "ml", "zl-zerolayer"
RS_PATH = f"/apis/ray.io/v1/namespaces/{NS}/rayservices/{NAME}"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies it."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class FakeKube:
    """The state and the answers of a tiny Kubernetes API server."""

    def __init__(self, rayservice: dict[str, Any]):
        self.obj = rayservice
        self.version = 1
        self.conflicts = 0  # answer this many patches with 409 (someone else wrote first)
        self.patches: list[tuple[str, dict[str, Any]]] = []  # (content type, body)
        self.pods: list[dict[str, Any]] = []
        self.dashboard: dict[str, Any] | None = None
        self.lock = threading.Lock()

    def current(self) -> dict[str, Any]:
        obj = copy.deepcopy(self.obj)
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def bump(self) -> None:
        """Another writer (KubeRay updating the status) changes the object."""
        self.version += 1


class Handler(BaseHTTPRequestHandler):
    kube: FakeKube

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(
            code,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": reason,
                "message": message,
                "code": code,
            },
        )

    def do_GET(self) -> None:  # noqa: N802
        # the path decoded, as Go's server hands it to the API server's routes (%3A, %2F)
        url = urlsplit(self.path)._replace(path=unquote(urlsplit(self.path).path))
        kube = self.kube
        if url.path == RS_PATH:
            with kube.lock:
                return self._send(200, kube.current())
        if url.path == f"/api/v1/namespaces/{NS}/pods":
            selector = parse_qs(url.query).get("labelSelector", [""])[0]
            want = dict(p.split("=", 1) for p in selector.split(",") if p)
            items = [
                p
                for p in kube.pods
                if all(p["metadata"]["labels"].get(k) == v for k, v in want.items())
            ]
            return self._send(
                200,
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "items": items,
                    "metadata": {"resourceVersion": "1"},
                },
            )
        proxy = f"/api/v1/namespaces/{NS}/services/{NAME}-head-svc:dashboard/proxy/"
        if url.path == proxy + "api/serve/applications/" and kube.dashboard is not None:
            return self._send(200, kube.dashboard)
        self._status(404, "NotFound", f"{url.path} not found")

    def do_PATCH(self) -> None:  # noqa: N802
        kube = self.kube
        if urlsplit(self.path).path != RS_PATH:
            return self._status(404, "NotFound", "not found")
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with kube.lock:
            kube.patches.append((self.headers["Content-Type"], copy.deepcopy(body)))
            if kube.conflicts:
                kube.conflicts -= 1
                kube.bump()
                return self._status(409, "Conflict", "the object has been modified")
            sent = body.get("metadata", {}).get("resourceVersion")
            if sent is not None and sent != str(kube.version):
                return self._status(409, "Conflict", "stale resourceVersion")
            body.get("metadata", {}).pop("resourceVersion", None)
            kube.obj = merge_patch(kube.obj, body)
            kube.bump()
            return self._send(200, kube.current())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "op", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "op"}}],
                "current-context": "fake",
            }
        )
    )
    return path


@pytest.fixture
def kube(render: Any, tmp_path: Path) -> Iterator[tuple[FakeKube, list[str]]]:
    """A fake API server holding the chart's RayService (with a running status), and the CLI
    arguments that reach it."""
    objects, _ = render()
    rs = one(objects, "RayService")
    rs["metadata"]["namespace"] = NS
    cluster = f"{NAME}-raycluster-abcde"
    apps = yaml.safe_load(rs["spec"]["serveConfigV2"])["applications"]
    rs["status"] = {
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "UpgradeInProgress", "status": "False"},
        ],
        "activeServiceStatus": {
            "rayClusterName": cluster,
            "applicationStatuses": {
                a["name"]: {
                    "status": "RUNNING",
                    "serveDeploymentStatuses": {
                        d["name"]: {"status": "HEALTHY"} for d in a["deployments"]
                    },
                }
                for a in apps
            },
        },
    }
    fake = FakeKube(rs)
    labels = {"app.kubernetes.io/instance": "zl", "ray.io/cluster": cluster}
    for i, ready in enumerate(["True", "True", "False"]):
        fake.pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"baseline-{i}",
                    "namespace": NS,
                    "labels": {**labels, "ray.io/group": "tier-baseline"},
                },
                "status": {"conditions": [{"type": "Ready", "status": ready}]},
            }
        )
    fake.dashboard = {
        "applications": {
            "smollm2-135m--baseline": {
                "deployments": {
                    "smollm2-135m--baseline": {
                        "replicas": [
                            {"state": "RUNNING"},
                            {"state": "RUNNING"},
                            {"state": "STARTING"},
                        ]
                    }
                }
            }
        }
    }
    handler = type("H", (Handler,), {"kube": fake})
    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    args = [
        "--kubeconfig",
        str(kubeconfig(tmp_path, port)),
        "-n",
        NS,
        "--name",
        NAME,
        "--release",
        "zl",
    ]
    yield fake, args
    server.shutdown()
    server.server_close()


def test_status_shows_applications_and_replicas_per_tier(
    kube: tuple[FakeKube, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, args = kube
    assert main(["cluster", "status", *args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ready"] == "True" and report["upgrading"] is False
    assert report["applications"]["zerolayer"]["deployments"]["gateway"]["status"] == "HEALTHY"
    base = report["tiers"]["baseline"]
    assert base["serve_replicas"] == 2  # RUNNING ones, from the dashboard
    assert (base["min_replicas"], base["max_replicas"]) == (1, 8)  # models.yaml's cluster block
    assert (base["pods_ready"], base["pods"]) == (2, 3)
    assert set(report["tiers"]) == {"baseline", "masked", "dynamic", "sparse24"}
    assert main(["cluster", "status", *args]) == 0
    table = capsys.readouterr().out
    assert f"rayservice {NS}/{NAME}: ready" in table
    assert "baseline" in table and "2 (1-8)" in table


def test_scale_patches_serve_autoscaling_and_the_worker_group(
    kube: tuple[FakeKube, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, args = kube
    assert main(["cluster", "scale", *args, "baseline", "--min", "2", "--max", "6"]) == 0
    ctype, body = fake.patches[-1]
    assert ctype.startswith("application/merge-patch+json")
    assert body["metadata"]["resourceVersion"] == "1"
    serve = yaml.safe_load(fake.obj["spec"]["serveConfigV2"])
    for app in serve["applications"]:
        for dep in app["deployments"]:
            auto = dep.get("autoscaling_config") or {}
            if app["args"].get("tier") == "baseline":
                assert (auto["min_replicas"], auto["max_replicas"]) == (2, 6)
            elif app["args"].get("tier") == "masked":
                assert (auto["min_replicas"], auto["max_replicas"]) == (1, 8)  # untouched
    groups = {g["groupName"]: g for g in fake.obj["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    assert (groups["tier-baseline"]["minReplicas"], groups["tier-baseline"]["maxReplicas"]) == (
        2,
        6,
    )
    assert groups["tier-masked"]["maxReplicas"] == 8 and len(groups) == 5  # all groups kept
    assert "2 to 6 replicas" in capsys.readouterr().out


def test_a_conflict_is_retried_with_the_fresh_resource_version(
    kube: tuple[FakeKube, list[str]],
) -> None:
    fake, args = kube
    fake.conflicts = 2  # KubeRay writes twice between our read and our patch
    assert main(["cluster", "scale", *args, "dynamic", "--min", "1", "--max", "3"]) == 0
    sent = [b["metadata"]["resourceVersion"] for _, b in fake.patches]
    assert sent == ["1", "2", "3"]  # each try read the object again
    serve = yaml.safe_load(fake.obj["spec"]["serveConfigV2"])
    (app,) = [a for a in serve["applications"] if a["args"].get("tier") == "dynamic"]
    assert app["deployments"][0]["autoscaling_config"]["max_replicas"] == 3


def test_endless_conflicts_and_bad_requests_end_with_exit_1(
    kube: tuple[FakeKube, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, args = kube
    fake.conflicts = 100
    assert main(["cluster", "scale", *args, "masked", "--min", "1", "--max", "2"]) == 1
    assert "409" in capsys.readouterr().err
    fake.conflicts = 0
    assert main(["cluster", "scale", *args, "turbo", "--min", "1", "--max", "2"]) == 1
    assert "no tier 'turbo'" in capsys.readouterr().err
    assert main(["cluster", "scale", *args, "masked", "--min", "3", "--max", "2"]) == 1
    assert "min <= max" in capsys.readouterr().err
    assert main(["cluster", "status", *args[:-4], "--name", "other", "-n", NS]) == 1
    assert "404" in capsys.readouterr().err


def test_rollout_changes_the_head_template(
    kube: tuple[FakeKube, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    from zerolayer.cluster.commands import RESTARTED_AT

    fake, args = kube
    before = copy.deepcopy(fake.obj["spec"]["rayClusterConfig"]["workerGroupSpecs"])
    assert main(["cluster", "rollout", *args]) == 0
    head = fake.obj["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]
    assert head["metadata"]["annotations"][RESTARTED_AT]
    assert head["metadata"]["labels"]["app.kubernetes.io/instance"] == "zl"  # merged, not lost
    assert fake.obj["spec"]["rayClusterConfig"]["workerGroupSpecs"] == before
    assert main(["cluster", "rollout", *args, "--wait", "--poll", "0.05"]) == 0
    assert "rollout done" in capsys.readouterr().out


def test_an_unreachable_api_server_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = kubeconfig(tmp_path, free_port())  # nothing listens there
    for cmd in (["status"], ["scale", "baseline", "--min", "1", "--max", "2"], ["rollout"]):
        head, rest = cmd[:1], cmd[1:]
        code = main(["cluster", *head, "--kubeconfig", str(config), "--timeout", "2", *rest])
        assert code == 1
        err = capsys.readouterr().err
        assert "cannot reach the Kubernetes API server at http://127.0.0.1:" in err
        assert "Traceback" not in err
