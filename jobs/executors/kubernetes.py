"""Jobs on a Kubernetes cluster: the ``Kube`` API wrapper, the executor and a job informer.

The only module that imports the ``kubernetes`` client (DESIGN.md). Other backends (KServe serving,
TensorBoard, image builds) go through ``Kube``, which is generic over kinds: it maps (apiVersion, kind)
to the resource path and talks JSON dicts through ``ApiClient.call_api``, with retries and exponential
backoff on 5xx, 429, timeouts and connection errors. Nothing else is retried: a 4xx is the caller's
mistake and carries the API server's own message.

The executor renders ``manifests.job_manifests`` (validated before they are sent), creates them
idempotently (409 = already there) and reads states back from the operator's conditions and the pods.
Before a department's first job it makes sure of the department's namespace, job volume and
NetworkPolicy (the fence between the department's pods and the portal), once per process.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime

import kubernetes.client
import kubernetes.config
import kubernetes.watch
import urllib3
from kubernetes.client.exceptions import ApiException

from jobs.executors.base import (
    FAILED, FINAL_PHASES, LOST, RUNNING, STARTING, SUCCEEDED, ExecutorError, JobSpec, ObservedState, Placement,
)
from jobs.executors.manifest_validation import ManifestInvalid, check_manifests
from jobs.executors.manifests import (
    JOB_ID_LABEL, MANAGED_BY, REPLICA_INDEX_LABEL, ClusterSettings, ManifestError, department_manifests,
    job_manifests, job_volume_manifest, namespace_manifest, network_policy_manifest,
)

log = logging.getLogger(__name__)

# (apiVersion, kind) -> (plural, namespaced) for the kinds the portal uses; others are guessed (kind + "s").
KINDS: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Namespace"): ("namespaces", False), ("v1", "Node"): ("nodes", False),
    ("v1", "PersistentVolume"): ("persistentvolumes", False), ("v1", "Pod"): ("pods", True),
    ("v1", "Service"): ("services", True), ("v1", "ConfigMap"): ("configmaps", True), ("v1", "Secret"): ("secrets", True),
    ("v1", "ServiceAccount"): ("serviceaccounts", True), ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("v1", "ResourceQuota"): ("resourcequotas", True), ("v1", "Event"): ("events", True),
    ("apps/v1", "Deployment"): ("deployments", True), ("apps/v1", "StatefulSet"): ("statefulsets", True),
    ("batch/v1", "Job"): ("jobs", True), ("networking.k8s.io/v1", "Ingress"): ("ingresses", True),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("networkpolicies", True),
    ("scheduling.k8s.io/v1", "PriorityClass"): ("priorityclasses", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("clusterroles", False),
    ("kubeflow.org/v1", "PyTorchJob"): ("pytorchjobs", True), ("kubeflow.org/v1", "TFJob"): ("tfjobs", True),
    ("kubeflow.org/v2beta1", "MPIJob"): ("mpijobs", True),
    ("serving.kserve.io/v1beta1", "InferenceService"): ("inferenceservices", True),
}
RETRIED_STATUSES = {429, 500, 502, 503, 504}
CANCEL_ANNOTATION = "portal/cancel-requested"


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

    def __init__(self, api_client, *, retries: int = 4, backoff_seconds: float = 0.2, timeout_seconds: float = 10,
                 sleep=time.sleep):
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
            elif settings.get("in_cluster") or (not settings.get("kubeconfig") and os.environ.get("KUBERNETES_SERVICE_HOST")):
                kubernetes.config.load_incluster_config(client_configuration=configuration)
            else:
                kubernetes.config.load_kube_config(
                    config_file=settings.get("kubeconfig") or None, context=settings.get("kubeconfig_context") or None,
                    client_configuration=configuration,
                )
        except (kubernetes.config.ConfigException, OSError, TypeError, ValueError) as exc:
            raise KubeError(f"Cannot reach the cluster: no usable connection settings ({exc}). Set kube_url, "
                            f"kubeconfig or in_cluster in the cluster's settings.", permanent=True) from exc
        configuration.retries = False
        return cls(kubernetes.client.ApiClient(configuration), **options)

    def close(self) -> None:
        self.api.close()

    # -- the one place requests go out

    def _call(self, method: str, path: str, *, query: list | None = None, body=None, content_type: str = "application/json",
              stream: bool = False, timeout: float | None = None):
        attempt = 0
        while True:
            try:
                return self.api.call_api(
                    path, method, query_params=query or [], body=body,
                    header_params={"Accept": "application/json", "Content-Type": content_type},
                    response_types_map={200: "object", 201: "object", 202: "object"}, auth_settings=["BearerToken"],
                    _return_http_data_only=True, _preload_content=not stream,
                    _request_timeout=timeout or self.timeout,
                )
            except ApiException as exc:
                if exc.status == 0 or exc.status in RETRIED_STATUSES:
                    error = KubeError(f"{method} {path}: {_message(exc)}", permanent=False, status=exc.status)
                else:
                    raise KubeError(_message(exc), permanent=exc.status not in (404, 409, 410), status=exc.status) from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                error = KubeError(f"{method} {path}: no answer from the API server ({exc})", permanent=False)
            if attempt >= self.retries:
                raise error
            log.info("retrying %s %s after: %s", method, path, error)
            self.sleep(self.backoff * 2**attempt)
            attempt += 1

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

    def list(self, api_version: str, kind: str, *, namespace: str | None = None, labels: str = "") -> tuple[list[dict], str]:
        query = [("labelSelector", labels)] if labels else []
        answer = self._call("GET", resource_path(api_version, kind, namespace), query=query)
        items = answer.get("items") or []
        for item in items:  # list items come without them
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items, answer.get("metadata", {}).get("resourceVersion", "")

    def watch(self, api_version: str, kind: str, *, namespace: str | None = None, labels: str = "",
              resource_version: str, timeout_seconds: int = 60) -> Iterator[tuple[str, dict]]:
        """(type, object) events after ``resource_version``, until the server ends the watch; Gone on 410."""
        path = resource_path(api_version, kind, namespace)

        def list_call(**kwargs):
            query = [("watch", "true"), ("resourceVersion", kwargs["resource_version"]),
                     ("timeoutSeconds", kwargs["timeout_seconds"]), ("allowWatchBookmarks", "true")]
            if labels:
                query.append(("labelSelector", labels))
            # the server holds the watch open up to timeoutSeconds: the read timeout must be longer
            return self._call("GET", path, query=query, stream=True, timeout=(self.timeout, kwargs["timeout_seconds"] + self.timeout))

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
        return self._call("PATCH", resource_path(api_version, kind, namespace, name), body=body,
                          content_type="application/merge-patch+json")

    def patch_status(self, api_version: str, kind: str, namespace: str | None, name: str, body: dict) -> dict:
        return self._call("PATCH", resource_path(api_version, kind, namespace, name) + "/status", body=body,
                          content_type="application/merge-patch+json")

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str, *, propagation: str = "Foreground") -> bool:
        """Ask for deletion (dependents by ``propagation``); False when it was gone already."""
        try:
            self._call("DELETE", resource_path(api_version, kind, namespace, name),
                       body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation})
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
                response = self.core.read_namespaced_pod_log(pod, namespace, _request_timeout=self.timeout,
                                                             _preload_content=False, **options)
                return response.data.decode(errors="replace")
            except ApiException as exc:
                if exc.status in (400, 404):  # waiting to start / gone
                    return ""
                if exc.status not in RETRIED_STATUSES or attempt >= self.retries:
                    raise KubeError(_message(exc), permanent=exc.status not in RETRIED_STATUSES, status=exc.status) from exc
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


# --------------------------------------------------------------------------------------- executor

JOB_KINDS = (("kubeflow.org/v1", "PyTorchJob"), ("kubeflow.org/v1", "TFJob"), ("kubeflow.org/v2beta1", "MPIJob"),
             ("batch/v1", "Job"))
FETCH, INSTALL = "fetch-code", "install-requirements"  # init container names (manifests.py)
COMMIT_LINE = re.compile(r"^\[portal\] code at commit ([0-9a-f]{7,64})\s*$", re.MULTILINE)
SELECTOR_CHUNK = 50  # job ids per label selector
LOG_LINES = 20  # last lines of a failed worker's log in the job's message
LOST_POD_REASONS = {"Evicted", "NodeLost", "Preempting", "Terminated", "UnexpectedAdmissionError", "Shutdown"}


def _epoch(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def _tail(text: str, lines: int = LOG_LINES) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def worker_of(pod: dict) -> int:
    """The portal's worker (rank) of a pod: PyTorchJob master = 0, its worker-i = i + 1; TFJob worker-i = i;
    MPIJob launcher = 0, worker-i = i + 1; a batch Job's only pod = 0."""
    labels = pod["metadata"].get("labels") or {}
    index = int(labels.get(REPLICA_INDEX_LABEL, "0"))
    owner = next((ref["kind"] for ref in pod["metadata"].get("ownerReferences") or []), "")
    replica = labels.get("training.kubeflow.org/replica-type", "")
    if owner in ("PyTorchJob", "MPIJob") and replica == "worker":
        return index + 1
    return index


class KubernetesExecutor:
    """The Executor protocol on a cluster with the Kubeflow Training Operator (and the MPI Operator)."""

    _ready: set[tuple[str, str]] = set()  # (API host, namespace) prepared by this process
    _commits: dict[str, str] = {}  # job id -> commit read from its fetch log

    def __init__(self, kube: Kube, settings: ClusterSettings):
        self.kube, self.settings = kube, settings

    # -- launch

    def launch(self, job: JobSpec, placement: Placement) -> None:
        try:
            manifests = job_manifests(job, placement, self.settings)
            check_manifests(manifests)
        except ManifestError as exc:
            raise ExecutorError(str(exc), permanent=True) from exc
        except ManifestInvalid as exc:  # a bug of the portal: retrying cannot help
            raise ExecutorError(f"The portal built invalid manifests for job {job.job_id}: {exc}", permanent=True) from exc
        self._prepare(job.department)
        for manifest in manifests:
            self.kube.create(manifest)

    def _prepare(self, department: str) -> None:
        key = (self.kube.api.configuration.host, self.settings.namespace(department))
        if key in self._ready:
            return
        self.kube.create(namespace_manifest(department, self.settings))
        self.kube.create(job_volume_manifest(department, self.settings))
        self._ensure(network_policy_manifest(department, self.settings))
        self._ready.add(key)

    def ensure_department(self, department: str, nominal_gpus: int) -> None:
        """Namespace, job volume, GPU ResourceQuota and NetworkPolicy (created, or their spec updated)."""
        for manifest in department_manifests(department, nominal_gpus, self.settings):
            self._ensure(manifest)
        self._ready.add((self.kube.api.configuration.host, self.settings.namespace(department)))

    def _ensure(self, manifest: dict) -> None:
        """Create; a ResourceQuota or NetworkPolicy already there gets the wanted spec (settings change)."""
        try:
            check_manifests([manifest])
        except ManifestInvalid as exc:  # a bug of the portal: retrying cannot help
            raise ExecutorError(f"The portal built an invalid {manifest['kind']}: {exc}", permanent=True) from exc
        found, created = self.kube.create(manifest)
        if not created and manifest["kind"] in ("ResourceQuota", "NetworkPolicy") and found.get("spec") != manifest["spec"]:
            meta = manifest["metadata"]
            self.kube.patch(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"], {"spec": manifest["spec"]})

    # -- reading back

    def _objects(self, job_ids: Iterable[str]) -> tuple[dict[str, dict], dict[str, list[dict]]]:
        """Job objects and pods by job id, with one list per kind per chunk of ids."""
        ids = sorted(set(job_ids))
        jobs: dict[str, dict] = {}
        pods: dict[str, list[dict]] = {}
        for start in range(0, len(ids), SELECTOR_CHUNK):
            selector = f"{JOB_ID_LABEL} in ({','.join(ids[start:start + SELECTOR_CHUNK])})"
            for api_version, kind in JOB_KINDS:
                try:
                    items, _ = self.kube.list(api_version, kind, labels=selector)
                except KubeError as exc:
                    if exc.status == 404:  # this operator is not installed
                        continue
                    raise
                for item in items:
                    jobs[item["metadata"]["labels"][JOB_ID_LABEL]] = item
            for pod in self.kube.list("v1", "Pod", labels=selector)[0]:
                pods.setdefault(pod["metadata"]["labels"][JOB_ID_LABEL], []).append(pod)
        return jobs, pods

    def poll(self, job_ids: list[str]) -> dict[str, ObservedState]:
        jobs, pods = self._objects(job_ids)
        states = {job_id: self._state(job_id, obj, pods.get(job_id, [])) for job_id, obj in jobs.items()}
        for job_id, state in states.items():
            if state.phase in FINAL_PHASES:  # reported with its ending: no need to remember it (bounded cache)
                self._commits.pop(job_id, None)
        return states

    def _state(self, job_id: str, obj: dict, pods: list[dict]) -> ObservedState:
        status = obj.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or [] if c.get("status") == "True"}
        if "Complete" in conditions:  # batch/v1 Job
            conditions["Succeeded"] = conditions["Complete"]
        pods = sorted(pods, key=worker_of)
        starts = [_epoch(s["state"].get("running", s["state"].get("terminated", {})).get("startedAt"))
                  for pod in pods for s in (pod.get("status") or {}).get("containerStatuses") or []
                  if "running" in s["state"] or "terminated" in s["state"]]
        started = min((s for s in starts if s), default=None)
        common = {"commit": self._commit(job_id, pods), "started_at": started}
        ended = status.get("completionTime") or next(
            (c.get("lastTransitionTime") for t, c in conditions.items() if t in ("Failed", "Succeeded")), None)
        finished = _epoch(ended)

        if obj["metadata"].get("deletionTimestamp"):  # cancelled or collected: not final until it is gone
            return ObservedState(phase=RUNNING if started else STARTING, reason="stopping",
                                 message="Stopping: the job's pods are being deleted.", **common)
        lost = next((p for p in pods if (p.get("status") or {}).get("reason") in LOST_POD_REASONS), None)
        if lost and "Succeeded" not in conditions:
            return ObservedState(phase=LOST, reason="lost", finished_at=finished or time.time(), **common,
                                 message=f"Worker {worker_of(lost)} was lost: {lost['status'].get('message') or lost['status']['reason']}")
        if "Failed" in conditions:
            return self._failure(conditions["Failed"], pods, finished, common)
        if "Succeeded" in conditions:
            return ObservedState(phase=SUCCEEDED, reason="completed", exit_code=0, finished_at=finished,
                                 message=conditions["Succeeded"].get("message", ""), **common)
        for kind in ("Suspended", "Restarting"):
            if kind in conditions:
                return ObservedState(phase=STARTING, reason=kind.lower(), message=conditions[kind].get("message", ""), **common)
        running = bool(pods) and all(
            all("running" in s["state"] or "terminated" in s["state"] for s in (p.get("status") or {}).get("containerStatuses") or [{}])
            for p in pods)
        if "Running" in conditions and running or (obj["kind"] == "Job" and running and status.get("active")):
            return ObservedState(phase=RUNNING, reason="running", message=conditions.get("Running", {}).get("message", ""), **common)
        message = conditions.get("Created", {}).get("message", "") or "Waiting for the cluster to start the pods."
        return ObservedState(phase=STARTING, reason="starting", message=message, **common)

    def _failure(self, condition: dict, pods: list[dict], finished: float | None, common: dict) -> ObservedState:
        message = condition.get("message", "")
        if condition.get("reason") == "DeadlineExceeded" or "deadline" in message.lower():
            return ObservedState(phase=FAILED, reason="deadline_exceeded", finished_at=finished, **common,
                                 message=message or "The job ran longer than its maximum runtime.")
        for pod in pods:
            for init in (pod.get("status") or {}).get("initContainerStatuses") or []:
                code = init["state"].get("terminated", {}).get("exitCode")
                if code:
                    reason = {FETCH: "clone_failed", INSTALL: "install_failed"}.get(init["name"], "setup_failed")
                    meta = pod["metadata"]
                    output = self.kube.pod_log(meta["namespace"], meta["name"], container=init["name"])
                    text = _tail(output) or init["state"]["terminated"].get("message", "") or f"{init['name']} exited with code {code}"
                    return ObservedState(phase=FAILED, reason=reason, message=text, exit_code=code, finished_at=finished,
                                         **{**common, "started_at": None})
        for pod in pods:
            for main in (pod.get("status") or {}).get("containerStatuses") or []:
                code = main["state"].get("terminated", {}).get("exitCode")
                if code:
                    meta = pod["metadata"]
                    output = _tail(self.kube.pod_log(meta["namespace"], meta["name"], container=main["name"]))
                    text = f"worker {worker_of(pod)} exited with code {code}" + (f":\n{output}" if output else ".")
                    return ObservedState(phase=FAILED, reason="worker_failed", message=text, exit_code=code,
                                         finished_at=finished, **common)
        return ObservedState(phase=FAILED, reason="failed", message=message, finished_at=finished, **common)

    def _commit(self, job_id: str, pods: list[dict]) -> str | None:
        """The commit the fetch-code init container printed (read once per job and process)."""
        if job_id in self._commits:
            return self._commits[job_id]
        for pod in pods:
            for init in (pod.get("status") or {}).get("initContainerStatuses") or []:
                if init["name"] == FETCH and init["state"].get("terminated", {}).get("exitCode") == 0:
                    meta = pod["metadata"]
                    found = COMMIT_LINE.search(self.kube.pod_log(meta["namespace"], meta["name"], container=FETCH))
                    if found:
                        self._commits[job_id] = found[1]
                        return found[1]
        return None

    # -- cancel, logs, garbage

    def cancel(self, job_id: str, grace_seconds: int) -> None:
        """Mark the job, then delete it with Foreground propagation: its pods get their grace period."""
        jobs, _ = self._objects([job_id])
        obj = jobs.get(job_id)
        if obj is None:
            return
        meta = obj["metadata"]
        stamp = datetime.now().astimezone().isoformat(timespec="seconds")
        try:
            self.kube.patch(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"],
                            {"metadata": {"annotations": {CANCEL_ANNOTATION: stamp}}})
        except KubeError as exc:
            if exc.status != 404:
                raise
        self.kube.delete(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"], propagation="Foreground")

    def logs(self, job_id: str, worker: int, since: int = 0) -> Iterator[str]:
        """Complete lines of one worker's setup output then its command's, from byte offset ``since``."""
        _, pods = self._objects([job_id])
        pod = next((p for p in pods.get(job_id, []) if worker_of(p) == worker), None)
        if pod is None:
            return iter(())
        meta, spec = pod["metadata"], pod["spec"]
        ended = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        names = [c["name"] for c in spec.get("initContainers") or []] + [spec["containers"][0]["name"]]
        text = "".join(self.kube.pod_log(meta["namespace"], meta["name"], container=name) for name in names)
        data = text.encode()[since:]
        if not ended:
            data = data[: data.rfind(b"\n") + 1]
        return iter(data.decode(errors="replace").splitlines(keepends=True))

    def collect_garbage(self, keep: set[str]) -> list[str]:
        """Delete the portal's job objects whose job id is not in ``keep``; the ids deleted."""
        deleted = []
        for api_version, kind in JOB_KINDS:
            try:
                items, _ = self.kube.list(api_version, kind, labels=f"app.kubernetes.io/managed-by={MANAGED_BY},{JOB_ID_LABEL}")
            except KubeError as exc:
                if exc.status == 404:
                    continue
                raise
            for item in items:
                meta = item["metadata"]
                job_id = meta["labels"][JOB_ID_LABEL]
                if job_id not in keep and not meta.get("deletionTimestamp"):
                    if self.kube.delete(api_version, kind, meta["namespace"], meta["name"], propagation="Foreground"):
                        deleted.append(job_id)
        return sorted(set(deleted))


# ---------------------------------------------------------------------------------------- informer


class JobWatcher:
    """List, then watch from the list's resourceVersion; re-list on 410 Gone; reconnect with backoff.

    Calls ``on_change(job_id)`` for every portal job whose object or pods changed (after a re-list: for
    every one listed, as changes during the gap are unknown). One thread per kind while ``run`` runs.
    """

    def __init__(self, kube: Kube, kinds: Iterable[tuple[str, str]] = (*JOB_KINDS, ("v1", "Pod")), *,
                 on_change: Callable[[str], None], timeout_seconds: int = 60, backoff_seconds: float = 1,
                 max_backoff_seconds: float = 60):
        self.kube, self.kinds, self.on_change = kube, tuple(kinds), on_change
        self.timeout, self.backoff, self.max_backoff = timeout_seconds, backoff_seconds, max_backoff_seconds
        self.lists = 0  # how many times a kind was (re-)listed, for tests and logs
        self._lock = threading.Lock()

    def run(self, stop: threading.Event) -> None:
        threads = [threading.Thread(target=self.run_kind, args=(api_version, kind, stop), daemon=True,
                                    name=f"watch-{kind}") for api_version, kind in self.kinds]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def run_kind(self, api_version: str, kind: str, stop: threading.Event) -> None:
        selector = f"app.kubernetes.io/managed-by={MANAGED_BY},{JOB_ID_LABEL}"
        if kind == "Pod":
            selector = JOB_ID_LABEL
        version, failures = None, 0
        while not stop.is_set():
            try:
                if version is None:
                    items, version = self.kube.list(api_version, kind, labels=selector)
                    with self._lock:
                        self.lists += 1
                    for job_id in sorted({item["metadata"]["labels"][JOB_ID_LABEL] for item in items}):
                        self.on_change(job_id)
                for _, obj in self.kube.watch(api_version, kind, labels=selector, resource_version=version,
                                              timeout_seconds=self.timeout):
                    version = obj["metadata"].get("resourceVersion") or version
                    job_id = (obj["metadata"].get("labels") or {}).get(JOB_ID_LABEL)
                    if job_id:
                        self.on_change(job_id)
                    if stop.is_set():
                        return
                failures = 0
            except Gone:
                log.info("watch of %s expired: listing again", kind)
                version = None
            except KubeError as exc:
                if exc.status == 404 and kind != "Pod":
                    log.info("%s is not served by this cluster: not watched", kind)
                    return
                failures += 1
                delay = min(self.max_backoff, self.backoff * 2 ** (failures - 1))
                log.warning("watch of %s failed (%s); again in %.1f s", kind, exc.message, delay)
                stop.wait(delay)  # then watch on from the same version: a 410 says when a re-list is needed
