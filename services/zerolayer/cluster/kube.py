"""The Kubernetes API calls of `zerolayer cluster`, on the kubernetes Python client: read the
RayService, change it with optimistic concurrency (a 409 conflict reads it again and retries
with the fresh resourceVersion), list its pods, and ask the Ray dashboard of its head for the
Serve replicas through the API server's service proxy."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from zerolayer.errors import ClusterError

__all__ = ["RayServiceClient", "GROUP", "VERSION", "PLURAL"]

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayservices"
Change = Callable[[dict[str, Any]], dict[str, Any]]


class RayServiceClient:
    """One RayService of one namespace."""

    def __init__(
        self,
        name: str,
        namespace: str,
        kubeconfig: str | None = None,
        context: str | None = None,
        timeout_s: float = 10.0,
    ):
        from kubernetes import client, config

        self.name, self.namespace, self.timeout_s = name, namespace, timeout_s
        try:
            api = config.new_client_from_config(config_file=kubeconfig, context=context)
        except config.ConfigException as exc:
            try:  # inside a pod: its service account
                config.load_incluster_config()
                api = client.ApiClient()
            except config.ConfigException:
                raise ClusterError(f"no Kubernetes configuration: {exc}") from exc
        # one try per call: an API server that is down is said at once, not after urllib3's
        # retries with backoff
        api.configuration.retries = False
        api.rest_client.pool_manager.connection_pool_kw["retries"] = False
        self.host = api.configuration.host
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs) with the API's failures as ClusterError (ApiException's status
        kept as .status)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, _request_timeout=self.timeout_s, **kwargs)
        except ApiException as exc:
            err = ClusterError(f"{what}: the API server answered {exc.status}: {_reason(exc)}")
            err.status = exc.status
            raise err from exc
        except (HTTPError, OSError) as exc:
            raise ClusterError(
                f"cannot reach the Kubernetes API server at {self.host}: {type(exc).__name__}"
            ) from exc

    def get(self) -> dict[str, Any]:
        """The RayService as the API server has it now."""
        return self._call(
            f"reading rayservice {self.namespace}/{self.name}",
            self.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            self.name,
        )

    def update(self, change: Change, attempts: int = 5) -> dict[str, Any]:
        """Apply change(current object) -> JSON merge patch, pinned to the resourceVersion it
        was computed from: a 409 (someone else changed it meanwhile, KubeRay writing its
        status included) reads it again and computes the patch anew."""
        for _ in range(attempts):
            current = self.get()
            patch = change(current)
            patch.setdefault("metadata", {})["resourceVersion"] = current["metadata"][
                "resourceVersion"
            ]
            try:
                return self._call(
                    f"changing rayservice {self.namespace}/{self.name}",
                    self.custom.patch_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURAL,
                    self.name,
                    patch,
                )
            except ClusterError as exc:
                if getattr(exc, "status", None) != 409:
                    raise
        raise ClusterError(
            f"rayservice {self.namespace}/{self.name} kept changing under {attempts} tries "
            "(409 conflict); try again"
        )

    def pods(self, selector: str) -> list[dict[str, Any]]:
        """The namespace's pods with these labels, as plain dicts."""
        found = self._call(
            "listing pods", self.core.list_namespaced_pod, self.namespace, label_selector=selector
        )
        return [self.core.api_client.sanitize_for_serialization(p) for p in found.items]

    def serve_details(self, head_service: str) -> dict[str, Any] | None:
        """Ray Serve's applications with their replicas, from the dashboard of the head
        (through the API server's service proxy); None when it does not answer."""
        try:
            # the raw body: the client would turn the JSON into a Python repr of it
            raw = self._call(
                "asking the Ray dashboard",
                self.core.connect_get_namespaced_service_proxy_with_path,
                f"{head_service}:dashboard",
                self.namespace,
                "api/serve/applications/",
                _preload_content=False,
            )
            data = json.loads(raw.data)
        except (ClusterError, ValueError):
            return None
        return data if isinstance(data, dict) else None


def _reason(exc: Any) -> str:
    """The Status message of an API error, else its reason."""
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)
