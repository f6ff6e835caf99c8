"""The Helm chart: every values file renders, every object is valid Kubernetes (and the
RayService valid against KubeRay's CRD), the serveConfigV2 is the platform config's, GPUs go to
the GPU groups alone, Redis keeps what it acknowledged and admits the platform alone, and bad
values are refused with a message that names them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from zerolayer.config import load_config
from zerolayer.serve.cluster import dump_serve_config, serve_config, tier_resource
from zerolayer.serve.launcher import EDGE

from tests.conftest import clean_env
from tests.helm.conftest import CHART, VALUES, one, values_of

CRD = Path(__file__).resolve().parents[1] / "fixtures" / "kuberay" / "ray.io_rayservices.yaml"
KUBE_VERSION = "1.30"


@pytest.fixture(scope="module")
def rayservice_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return v1["schema"]["openAPIV3Schema"]


def _cluster_config() -> Any:
    return load_config(env=clean_env(), serve_file="cluster.yaml", environment=False)


def _pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod template by a name: head, group names, the Job, the StatefulSet."""
    rs = one(objects, "RayService")["spec"]["rayClusterConfig"]
    out = {"head": rs["headGroupSpec"]["template"]["spec"]}
    for g in rs["workerGroupSpecs"]:
        out[g["groupName"]] = g["template"]["spec"]
    for o in objects:
        if o["kind"] in ("Job", "StatefulSet"):
            out[o["kind"]] = o["spec"]["template"]["spec"]
    return out


@pytest.mark.parametrize("values", list(VALUES))
def test_every_values_file_renders_valid_objects(
    render: Any, rayservice_schema: dict[str, Any], values: str
) -> None:
    objects, notes = render(values_of(values))
    kinds = {o["kind"] for o in objects}
    assert {"RayService", "StatefulSet", "Secret", "PersistentVolumeClaim", "Job"} <= kinds or (
        values == "production" and "RayService" in kinds
    )
    for obj in objects:
        if obj["kind"] == "RayService":
            jsonschema.validate(obj, rayservice_schema)  # raises on the first violation
        elif obj["apiVersion"].startswith("monitoring.coreos.com/"):
            assert obj["kind"] in ("ServiceMonitor", "PrometheusRule") and obj["spec"]
        else:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    assert "zerolayer cluster status" in notes and "admin" in notes


def test_a_broken_rayservice_fails_the_crd_schema(
    render: Any, rayservice_schema: dict[str, Any]
) -> None:
    """The schema check can fail: a worker group without maxReplicas is refused."""
    objects, _ = render()
    rs = one(objects, "RayService")
    del rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["maxReplicas"]
    with pytest.raises(jsonschema.ValidationError, match="maxReplicas"):
        jsonschema.validate(rs, rayservice_schema)


@pytest.mark.parametrize("accelerator", ["gpu", "cpu"])
def test_serve_config_is_what_the_platform_config_produces(render: Any, accelerator: str) -> None:
    objects, _ = render({"accelerator": accelerator})
    rendered = one(objects, "RayService")["spec"]["serveConfigV2"]
    expected = serve_config(_cluster_config(), accelerator)  # type: ignore[arg-type]
    assert yaml.safe_load(rendered) == expected
    # the prepare Job and the head's wait read the same text
    cm = one(objects, "ConfigMap", "zl-zerolayer-serve-config")
    assert yaml.safe_load(cm["data"]["serve-config.yaml"]) == expected
    # Ray Serve itself accepts it
    from ray.serve.schema import ServeDeploySchema

    ServeDeploySchema.model_validate(expected)


@pytest.mark.parametrize("accelerator", ["gpu", "cpu"])
def test_the_charts_copy_of_the_serve_config_is_current(accelerator: str) -> None:
    path = CHART / "files" / f"serve-config.{accelerator}.yaml"
    want = dump_serve_config(serve_config(_cluster_config(), accelerator))  # type: ignore[arg-type]
    assert path.read_text() == want, (
        f"{path.name} is stale: run `./zl cluster serve-config --accelerator {accelerator} "
        f"--out helm/zerolayer/files/{path.name}`"
    )


def test_a_serve_config_given_in_values_replaces_the_charts(render: Any) -> None:
    cfg = serve_config(_cluster_config(), "gpu")
    cfg["applications"] = cfg["applications"][:2]  # the platform and one tier
    objects, _ = render({"serveConfig": dump_serve_config(cfg)})
    assert yaml.safe_load(one(objects, "RayService")["spec"]["serveConfigV2"]) == cfg


def test_gpu_requests_and_tolerations_land_on_gpu_groups_only(render: Any) -> None:
    objects, _ = render()
    pods = _pod_specs(objects)
    tiers = [t for t in pods if t.startswith("tier-")]
    assert sorted(tiers) == ["tier-baseline", "tier-dynamic", "tier-masked", "tier-sparse24"]
    for name, spec in pods.items():
        limits = [c.get("resources", {}).get("limits", {}) for c in spec["containers"]]
        tolerations = [t.get("key") for t in spec.get("tolerations") or []]
        gpu = any("nvidia.com/gpu" in lim for lim in limits)
        assert gpu == (name in tiers), name
        assert ("nvidia.com/gpu" in tolerations) == (name in tiers), name
        assert (spec.get("nodeSelector", {}).get("nvidia.com/gpu.present") == "true") == (
            name in tiers
        ), name
    # the sm80+ affinity of the 2:4 tier
    affinity = pods["tier-sparse24"]["affinity"]["nodeAffinity"]
    term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"][0]["key"] == "nvidia.com/gpu.compute.major"


def test_a_cpu_only_cluster_asks_for_no_gpu_anywhere(render: Any) -> None:
    objects, _ = render(values_of("cpu-only"))
    text = yaml.safe_dump(objects)
    assert "nvidia.com" not in text
    serve = yaml.safe_load(one(objects, "RayService")["spec"]["serveConfigV2"])
    for app in serve["applications"]:
        for dep in app["deployments"]:
            assert dep["ray_actor_options"].get("num_gpus", 0) == 0


def test_each_replica_lands_on_its_own_group(render: Any) -> None:
    """Every tier deployment asks for its tier's Ray resource, which its group alone offers (as
    many units as replicasPerPod); the GPUs a pod has cover its replicas'; the platform's
    deployments ask for the platform group's resource."""
    objects, _ = render()
    rs = one(objects, "RayService")["spec"]
    groups = {g["groupName"]: g for g in rs["rayClusterConfig"]["workerGroupSpecs"]}
    serve = yaml.safe_load(rs["serveConfigV2"])
    for app in serve["applications"]:
        tier = app["args"].get("tier")
        for dep in app["deployments"]:
            res = dep["ray_actor_options"]["resources"]
            if tier is None:
                assert set(res) == {"zerolayer_platform"}
                assert "zerolayer_platform" in groups["platform"]["resources"]
                continue
            assert res == {tier_resource(tier): 1}
            group = groups[f"tier-{tier}"]
            per_pod = int(group["resources"][tier_resource(tier)])
            others = [g for n, g in groups.items() if n != f"tier-{tier}"]
            assert all(tier_resource(tier) not in g.get("resources", {}) for g in others)
            gpus = group["template"]["spec"]["containers"][0]["resources"]["limits"]
            assert gpus["nvidia.com/gpu"] >= dep["ray_actor_options"]["num_gpus"] * per_pod
            # the tier's own range from models.yaml's cluster block, never a local one
            want = _cluster_config().models[app["args"]["model"]].tiers[tier].cluster
            assert dep["autoscaling_config"] == want.autoscaling_config.model_dump(
                exclude_none=True
            )
    head = rs["rayClusterConfig"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    assert rs["rayClusterConfig"]["enableInTreeAutoscaling"] is True
    assert rs["upgradeStrategy"]["type"] == "NewCluster"


def test_pods_get_the_cluster_config_paths_and_secrets(render: Any) -> None:
    objects, _ = render()
    cfg = _cluster_config()
    for name, spec in _pod_specs(objects).items():
        if name in ("StatefulSet",):
            continue
        for c in spec["containers"] + spec.get("initContainers", []):
            mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
            assert mounts["cache"] == cfg.cache_dir, name
            env = {e["name"]: e for e in c.get("env", [])}
            if name == "Job":
                continue  # the prepare Job needs neither Redis nor the admin key
            assert env["RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"]["value"] == EDGE
            assert env["REDIS_URL"]["value"] == "redis://zl-zerolayer-redis:6379/0"
            assert env["REDIS_PASSWORD_FILE"]["value"].startswith(mounts["redis-password"])
            ref = env["ZEROLAYER_ADMIN_KEY"]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": "zl-zerolayer-admin", "key": "admin-key"}
    # the generated admin key lives in a Secret, never in values
    secret = one(objects, "Secret", "zl-zerolayer-admin")
    import base64

    key = base64.b64decode(secret["data"]["admin-key"]).decode()
    assert key.startswith("zla-") and len(key) == 44
    assert key not in yaml.safe_dump(values_of("default") or {})


def test_an_existing_admin_secret_and_external_redis(render: Any) -> None:
    objects, _ = render(
        {
            "adminKey": {"existingSecret": "ops-admin", "secretKey": "key"},
            "redis": {"enabled": False, "external": {"existingSecret": "ops-redis"}},
            "gcsFaultTolerance": {"redisAddress": "gcs-redis:6379", "redisPasswordSecret": "gcs"},
        }
    )
    assert not [o for o in objects if o["kind"] == "StatefulSet"]
    assert not [o for o in objects if o["kind"] == "Secret"]
    assert not [o for o in objects if o["kind"] == "NetworkPolicy"]
    env = {e["name"]: e for e in _pod_specs(objects)["head"]["containers"][0]["env"]}
    assert env["REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "ops-redis", "key": "url"}
    assert "REDIS_PASSWORD_FILE" not in env
    assert env["ZEROLAYER_ADMIN_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "ops-admin"
    gcs = one(objects, "RayService")["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]
    assert gcs["redisAddress"] == "gcs-redis:6379"
    assert gcs["redisPassword"]["valueFrom"]["secretKeyRef"]["name"] == "gcs"


def test_files_in_a_bucket_reach_every_ray_pod_with_its_credentials(render: Any) -> None:
    objects, _ = render()
    env = {e["name"] for e in _pod_specs(objects)["head"]["containers"][0]["env"]}
    assert not {"ZEROLAYER_FILES_URL", "AWS_ACCESS_KEY_ID"} & env  # the shared cache volume
    objects, _ = render({"files": {"url": "s3://zl-files/prod", "existingSecret": "zl-s3"}})

    for name, spec in _pod_specs(objects).items():
        if name in ("StatefulSet", "Job"):
            continue
        env = {e["name"]: e for e in spec["containers"][0]["env"]}
        assert env["ZEROLAYER_FILES_URL"]["value"] == "s3://zl-files/prod", name
        ref = env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "zl-s3", "key": "secret-access-key"}
        assert env["AWS_ENDPOINT_URL"]["valueFrom"]["secretKeyRef"]["optional"] is True
        # what the platform reads from that environment
        plain = {k: v["value"] for k, v in env.items() if "value" in v}
        assert load_config(env=clean_env(**plain)).files.url == "s3://zl-files/prod"


def test_redis_keeps_every_acknowledged_write_and_admits_the_platform_alone(
    render: Any,
) -> None:
    objects, _ = render()
    sts = one(objects, "StatefulSet")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    command = " ".join(container["args"])
    assert "--appendonly yes" in command and "--appendfsync always" in command
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    gcs = one(objects, "RayService")["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]
    assert gcs["redisAddress"] == "zl-zerolayer-redis:6379"
    policy = one(objects, "NetworkPolicy")
    redis_labels = sts["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert all(redis_labels.get(k) == v for k, v in selector.items())
    (rule,) = policy["spec"]["ingress"]
    allowed = rule["from"][0]["podSelector"]["matchLabels"]
    assert rule["ports"] == [{"port": 6379, "protocol": "TCP"}]

    def admitted(labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in allowed.items())

    rs = one(objects, "RayService")["spec"]["rayClusterConfig"]
    templates = [rs["headGroupSpec"]["template"]] + [g["template"] for g in rs["workerGroupSpecs"]]
    assert all(admitted(t["metadata"]["labels"]) for t in templates)
    job = one(objects, "Job")["spec"]["template"]["metadata"]["labels"]
    assert not admitted(job) and not admitted(redis_labels)  # nothing else is let in


def test_containers_run_unprivileged(render: Any) -> None:
    objects, _ = render()
    for name, spec in _pod_specs(objects).items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert c["resources"]["limits"], name


def test_production_values_add_ingress_and_monitoring(render: Any) -> None:
    objects, notes = render(values_of("production"))
    ingress = one(objects, "Ingress")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    rs = one(objects, "RayService")["spec"]
    assert backend["name"] == rs["serveService"]["metadata"]["name"]
    monitor = one(objects, "ServiceMonitor")
    labels = rs["serveService"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    rule = one(objects, "PrometheusRule")
    shipped = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    assert rule["spec"] == shipped
    assert one(objects, "ConfigMap", "zl-zerolayer-dashboard")["data"]["zerolayer.json"]
    assert "https://api.zerolayer.example.com/v1" in notes
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim"]  # existingClaim


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"accelerator": "tpu"}, "accelerator"),
        ({"tiers": {"baseline": {"minReplicas": "one"}}}, "minReplicas"),
        ({"redis": {"appendfsync": "never"}}, "appendfsync"),
        ({"replicaCount": 3}, "replicaCount"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"cache": {"size": "lots"}}, "size"),
        ({"tiers": {"baseline": None}}, "baseline"),
        (
            {"redis": {"enabled": False}, "gcsFaultTolerance": {"enabled": False}},
            "redis.external.existingSecret",
        ),
        (
            {"redis": {"enabled": False, "external": {"existingSecret": "r"}}},
            "gcsFaultTolerance.redisAddress",
        ),
        ({"files": {"url": "/mnt/files"}}, "files.url"),
    ],
)
def test_bad_values_are_refused_with_a_clear_message(
    render: Any, values: dict[str, Any], message: str
) -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=message):
        render(values)


def test_the_chart_lints_clean() -> None:
    import helm_python as helm

    report = helm.lint(str(CHART), strict=True)
    assert not report["errors"]
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
