"""The ``Kube`` wrapper around the official ``kubernetes`` client: the only module that imports it (import-linter
enforces it). Plain dicts in and out, retries of transient answers with backoff, errors as KubeError with
``permanent`` set, watches that end with Gone when their resourceVersion is too old. No Django here."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Mapping

import kubernetes.client
import kubernetes.config
import kubernetes.watch
import urllib3
from kubernetes.client.exceptions import ApiException

from clusters.errors import ExecutorError

log = logging.getLogger(__name__)

KINDS: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Node"): ("nodes", False),
    ("v1", "PersistentVolume"): ("persistentvolumes", False),
    ("v1", "Pod"): ("pods", True),
    ("v1", "Service"): ("services", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("v1", "ResourceQuota"): ("resourcequotas", True),
    ("v1", "Event"): ("events", True),
    ("apps/v1", "Deployment"): ("deployments", True),
    ("apps/v1", "StatefulSet"): ("statefulsets", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("networking.k8s.io/v1", "Ingress"): ("ingresses", True),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("networkpolicies", True),
    ("scheduling.k8s.io/v1", "PriorityClass"): ("priorityclasses", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("clusterroles", False),
    ("kubeflow.org/v1", "PyTorchJob"): ("pytorchjobs", True),
    ("kubeflow.org/v1", "TFJob"): ("tfjobs", True),
    ("kubeflow.org/v2beta1", "MPIJob"): ("mpijobs", True),
    ("serving.kserve.io/v1beta1", "InferenceService"): ("inferenceservices", True),
}
RETRIED_STATUSES = {429, 500, 502, 503, 504}


class KubeError(ExecutorError):
    """An API call that failed; ``status`` is the HTTP status (None: no answer, e.g. a timeout)."""

    def __init__(self, message: str, *, permanent: bool, status: int | None = None):
        super().__init__(message, permanent=permanent)
        self.status = status


class Gone(KubeError):
    """410: the resourceVersion a watch started from is too old; list again."""


def resource_path(api_version: str, kind: str, namespace: str | None = None, name: str | None = None) -> str:
    plural, namespaced = KINDS.get((api_version, kind)) or (kind.lower() + ("es" if kind.endswith("s") else "s"), True)
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return f"{base}/{name}" if name else base


def _message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body)["message"]
    except (TypeError, ValueError, KeyError):
        return f"{exc.status} {exc.reason}".strip()


class Kube:
    """A Kubernetes API client speaking plain dicts; every call retried on transient failures."""

    def __init__(
        self,
        api_client,
        *,
        retries: int = 4,
        backoff_seconds: float = 0.2,
        timeout_seconds: float = 10,
        sleep=time.sleep,
    ):
        self.api = api_client
        self.retries, self.backoff, self.timeout, self.sleep = retries, backoff_seconds, timeout_seconds, sleep
        # urllib3 would silently retry idempotent requests itself: the retries here are the only ones.
        pool = getattr(getattr(api_client, "rest_client", None), "pool_manager", None)
        if pool is not None:
            pool.connection_pool_kw["retries"] = False
        self.core = kubernetes.client.CoreV1Api(api_client)

    @classmethod
    def from_settings(cls, settings: Mapping, **options) -> Kube:
        """From a cluster's settings: ``kube_url`` (+ ``kube_token``, ``kube_ca_file``), ``kubeconfig`` (+
        ``kubeconfig_context``) or ``in_cluster``; by default in-cluster when available, else ~/.kube/config."""
        configuration = kubernetes.client.Configuration()
        try:
            if settings.get("kube_url"):
                configuration.host = settings["kube_url"].rstrip("/")
                if settings.get("kube_token"):
                    configuration.api_key = {"authorization": settings["kube_token"]}
                    configuration.api_key_prefix = {"authorization": "Bearer"}
                if settings.get("kube_ca_file"):
                    configuration.ssl_ca_cert = settings["kube_ca_file"]
            elif settings.get("in_cluster") or (
                not settings.get("kubeconfig") and os.environ.get("KUBERNETES_SERVICE_HOST")
            ):
                kubernetes.config.load_incluster_config(client_configuration=configuration)
            else:
                kubernetes.config.load_kube_config(
                    config_file=settings.get("kubeconfig") or None,
                    context=settings.get("kubeconfig_context") or None,
                    client_configuration=configuration,
                )
        except (kubernetes.config.ConfigException, OSError, TypeError, ValueError) as exc:
            raise KubeError(
                f"Cannot reach the cluster: no usable connection settings ({exc}). Set kube_url, "
                f"kubeconfig or in_cluster in the cluster's settings.",
                permanent=True,
            ) from exc
        configuration.retries = False
        return cls(kubernetes.client.ApiClient(configuration), **options)

    def close(self) -> None:
        self.api.close()

    # -- the one place requests go out

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list | None = None,
        body=None,
        content_type: str = "application/json",
        stream: bool = False,
        timeout: float | None = None,
        retries: int | None = None,
    ):
        retries = self.retries if retries is None else retries
        attempt = 0
        while True:
            try:
                return self.api.call_api(
                    path,
                    method,
                    query_params=query or [],
                    body=body,
                    header_params={"Accept": "application/json", "Content-Type": content_type},
                    response_types_map={200: "object", 201: "object", 202: "object"},
                    auth_settings=["BearerToken"],
                    _return_http_data_only=True,
                    _preload_content=not stream,
                    _request_timeout=timeout or self.timeout,
                )
            except ApiException as exc:
                if exc.status == 0 or exc.status in RETRIED_STATUSES:
                    error = KubeError(f"{method} {path}: {_message(exc)}", permanent=False, status=exc.status)
                else:
                    raise KubeError(
                        _message(exc), permanent=exc.status not in (404, 409, 410), status=exc.status
                    ) from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                error = KubeError(f"{method} {path}: no answer from the API server ({exc})", permanent=False)
            if attempt >= retries:
                raise error
            log.info("retrying %s %s after: %s", method, path, error)
            self.sleep(self.backoff * 2**attempt)
            attempt += 1

    # -- health (clusters.health decides what the answers mean)

    def probe(self, kinds: list[tuple[str, str]], *, timeout: float = 3.0) -> set[str]:
        """Which of ``kinds`` (apiVersion, kind) the API server serves; one try each, no retries (a health check
        must be quick). Raises KubeError when the server does not answer or refuses the portal."""
        self._call("GET", "/version", timeout=timeout, retries=0)
        served = set()
        for api_version, kind in kinds:
            try:
                self._call("GET", resource_path(api_version, kind), query=[("limit", 1)], timeout=timeout, retries=0)
            except KubeError as exc:
                if exc.status != 404:  # 404: no such resource, the CRD is not installed
                    raise
            else:
                served.add(kind)
        return served

    # -- objects

    def create(self, manifest: dict) -> tuple[dict, bool]:
        """Create; (object, True), or (the existing object, False) when it is there already (409)."""
        meta = manifest["metadata"]
        path = resource_path(manifest["apiVersion"], manifest["kind"], meta.get("namespace"))
        try:
            return self._call("POST", path, body=manifest), True
        except KubeError as exc:
            if exc.status != 409:
                raise
        found = self.get(manifest["apiVersion"], manifest["kind"], meta.get("namespace"), meta["name"])
        if found is None:  # deleted in between (a Foreground delete finishing): try once more
            return self._call("POST", path, body=manifest), True
        return found, False

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:
        try:
            return self._call("GET", resource_path(api_version, kind, namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self, api_version: str, kind: str, *, namespace: str | None = None, labels: str = ""
    ) -> tuple[list[dict], str]:
        query = [("labelSelector", labels)] if labels else []
        answer = self._call("GET", resource_path(api_version, kind, namespace), query=query)
        items = answer.get("items") or []
        for item in items:  # list items come without them
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items, answer.get("metadata", {}).get("resourceVersion", "")

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: str = "",
        resource_version: str,
        timeout_seconds: int = 60,
    ) -> Iterator[tuple[str, dict]]:
        """(type, object) events after ``resource_version``, until the server ends the watch; Gone on 410."""
        path = resource_path(api_version, kind, namespace)

        def list_call(**kwargs):
            query = [
                ("watch", "true"),
                ("resourceVersion", kwargs["resource_version"]),
                ("timeoutSeconds", kwargs["timeout_seconds"]),
                ("allowWatchBookmarks", "true"),
            ]
            if labels:
                query.append(("labelSelector", labels))
            # the server holds the watch open up to timeoutSeconds: the read timeout must be longer
            return self._call(
                "GET", path, query=query, stream=True, timeout=(self.timeout, kwargs["timeout_seconds"] + self.timeout)
            )

        watcher = kubernetes.watch.Watch(return_type="object")
        try:
            for event in watcher.stream(list_call, resource_version=resource_version, timeout_seconds=timeout_seconds):
                if event["type"] != "BOOKMARK":
                    yield event["type"], event["raw_object"]
        except ApiException as exc:
            if exc.status == 410:
                raise Gone(f"watch of {kind}: {exc.reason}", permanent=False, status=410) from exc
            raise KubeError(f"watch of {kind}: {exc.reason}", permanent=False, status=exc.status) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(f"watch of {kind} broke: {exc}", permanent=False) from exc
        finally:
            watcher.stop()

    def patch(self, api_version: str, kind: str, namespace: str | None, name: str, body: dict) -> dict:
        """JSON merge patch (RFC 7386): works the same on core kinds and custom resources."""
        return self._call(
            "PATCH",
            resource_path(api_version, kind, namespace, name),
            body=body,
            content_type="application/merge-patch+json",
        )

    def patch_status(self, api_version: str, kind: str, namespace: str | None, name: str, body: dict) -> dict:
        return self._call(
            "PATCH",
            resource_path(api_version, kind, namespace, name) + "/status",
            body=body,
            content_type="application/merge-patch+json",
        )

    def delete(
        self, api_version: str, kind: str, namespace: str | None, name: str, *, propagation: str = "Foreground"
    ) -> bool:
        """Ask for deletion (dependents by ``propagation``); False when it was gone already."""
        try:
            self._call(
                "DELETE",
                resource_path(api_version, kind, namespace, name),
                body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation},
            )
            return True
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise

    # -- pod logs

    def pod_log(self, namespace: str, pod: str, *, container: str | None = None) -> str:
        """The container's log so far; "" while it has not started or when the pod is gone."""
        attempt = 0
        while True:
            try:
                options = {"container": container} if container else {}
                # raw bytes: the client's own "str" deserialization returns the repr of bytes
                response = self.core.read_namespaced_pod_log(
                    pod, namespace, _request_timeout=self.timeout, _preload_content=False, **options
                )
                return response.data.decode(errors="replace")
            except ApiException as exc:
                if exc.status in (400, 404):  # waiting to start / gone
                    return ""
                if exc.status not in RETRIED_STATUSES or attempt >= self.retries:
                    raise KubeError(
                        _message(exc), permanent=exc.status not in RETRIED_STATUSES, status=exc.status
                    ) from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if attempt >= self.retries:
                    raise KubeError(f"log of {pod}: no answer ({exc})", permanent=False) from exc
            self.sleep(self.backoff * 2**attempt)
            attempt += 1

    def follow_pod_log(self, namespace: str, pod: str, *, container: str | None = None) -> Iterator[str]:
        """The log line by line as it is written, until the container ends."""
        options = {"container": container} if container else {}
        try:
            response = self.core.read_namespaced_pod_log(pod, namespace, follow=True, _preload_content=False, **options)
        except ApiException as exc:
            if exc.status in (400, 404):
                return
            raise KubeError(_message(exc), permanent=False, status=exc.status) from exc
        try:
            buffer = b""
            for chunk in response.stream(1024, decode_content=False):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                yield from (line.decode(errors="replace") + "\n" for line in lines)
            if buffer:
                yield buffer.decode(errors="replace")
        finally:
            response.release_conn()
