"""Jobs on a Kubernetes cluster: the executor (the job informer is k8s_watch.py's).

It talks to the cluster through clusters.kube's ``Kube`` (the only importer of the ``kubernetes`` client,
with its retries and backoff); nothing here is retried on top of it.

The executor renders ``manifests.job_manifests`` (validated before they are sent), creates them
idempotently (409 = already there) and reads states back from the operator's conditions and the pods.
Before a department's first job it makes sure of the department's namespace, job volume and
NetworkPolicy (the fence between the department's pods and the portal), once per process.
"""

from __future__ import annotations

import io
import logging
import re
import time
from collections.abc import Iterable, Iterator
from datetime import datetime

from clusters.errors import ExecutorError
from clusters.k8s import (
    JOB_ID_LABEL,
    MANAGED_BY,
    ClusterSettings,
    ManifestError,
    department_manifests,
    job_volume_manifest,
    namespace_manifest,
    network_policy_manifest,
)
from clusters.kube import Kube, KubeError
from clusters.manifest_validation import ManifestInvalid, check_manifests
from jobs.executors import log_reader
from jobs.executors.base import (
    FAILED,
    FINAL_PHASES,
    LOST,
    RUNNING,
    STARTING,
    SUCCEEDED,
    JobSpec,
    ObservedState,
    Placement,
)
from jobs.executors.manifests import REPLICA_INDEX_LABEL, job_manifests

log = logging.getLogger(__name__)

# (apiVersion, kind) -> (plural, namespaced) for the kinds the portal uses; others are guessed (kind + "s").
CANCEL_ANNOTATION = "portal/cancel-requested"


# --------------------------------------------------------------------------------------- executor

JOB_KINDS = (
    ("kubeflow.org/v1", "PyTorchJob"),
    ("kubeflow.org/v1", "TFJob"),
    ("kubeflow.org/v2beta1", "MPIJob"),
    ("batch/v1", "Job"),
)
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
            raise ExecutorError(
                f"The portal built invalid manifests for job {job.job_id}: {exc}", permanent=True
            ) from exc
        for attempt in (1, 2):
            self._prepare(job.department)
            try:
                for manifest in manifests:
                    self.kube.create(manifest)
                return
            except KubeError as exc:
                # The namespace this process prepared is gone (deleted by an admin, or a new cluster answering at
                # the same address): prepare it again and create the rest (what exists already answers 409, kept).
                if attempt == 2 or exc.status != 404 or "namespaces" not in str(exc):
                    raise
                self._ready.discard(self._ready_key(job.department))

    def _ready_key(self, department: str) -> tuple[str, str]:
        """Which cluster and namespace ``_prepare`` made ready (this process remembers, to prepare each once)."""
        return (self.kube.api.configuration.host, self.settings.namespace(department))

    def _prepare(self, department: str) -> None:
        key = self._ready_key(department)
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
        self._ready.add(self._ready_key(department))

    def _ensure(self, manifest: dict) -> None:
        """Create; a ResourceQuota or NetworkPolicy already there gets the wanted spec (settings change)."""
        try:
            check_manifests([manifest])
        except ManifestInvalid as exc:  # a bug of the portal: retrying cannot help
            raise ExecutorError(f"The portal built an invalid {manifest['kind']}: {exc}", permanent=True) from exc
        found, created = self.kube.create(manifest)
        if (
            not created
            and manifest["kind"] in ("ResourceQuota", "NetworkPolicy")
            and found.get("spec") != manifest["spec"]
        ):
            meta = manifest["metadata"]
            self.kube.patch(
                manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"], {"spec": manifest["spec"]}
            )

    # -- reading back

    def _objects(self, job_ids: Iterable[str]) -> tuple[dict[str, dict], dict[str, list[dict]]]:
        """Job objects and pods by job id, with one list per kind per chunk of ids."""
        ids = sorted(set(job_ids))
        jobs: dict[str, dict] = {}
        pods: dict[str, list[dict]] = {}
        for start in range(0, len(ids), SELECTOR_CHUNK):
            selector = f"{JOB_ID_LABEL} in ({','.join(ids[start : start + SELECTOR_CHUNK])})"
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
        starts = [
            _epoch(s["state"].get("running", s["state"].get("terminated", {})).get("startedAt"))
            for pod in pods
            for s in (pod.get("status") or {}).get("containerStatuses") or []
            if "running" in s["state"] or "terminated" in s["state"]
        ]
        started = min((s for s in starts if s), default=None)
        common = {"commit": self._commit(job_id, pods), "started_at": started}
        ended = status.get("completionTime") or next(
            (c.get("lastTransitionTime") for t, c in conditions.items() if t in ("Failed", "Succeeded")), None
        )
        finished = _epoch(ended)

        if obj["metadata"].get("deletionTimestamp"):  # cancelled or collected: not final until it is gone
            return ObservedState(
                phase=RUNNING if started else STARTING,
                reason="stopping",
                message="Stopping: the job's pods are being deleted.",
                **common,
            )
        lost = next((p for p in pods if (p.get("status") or {}).get("reason") in LOST_POD_REASONS), None)
        if lost and "Succeeded" not in conditions:
            return ObservedState(
                phase=LOST,
                reason="lost",
                finished_at=finished or time.time(),
                **common,
                message=f"Worker {worker_of(lost)} was lost: {lost['status'].get('message') or lost['status']['reason']}",
            )
        if "Failed" in conditions:
            return self._failure(conditions["Failed"], pods, finished, common)
        if "Succeeded" in conditions:
            return ObservedState(
                phase=SUCCEEDED,
                reason="completed",
                exit_code=0,
                finished_at=finished,
                message=conditions["Succeeded"].get("message", ""),
                **common,
            )
        for kind in ("Suspended", "Restarting"):
            if kind in conditions:
                return ObservedState(
                    phase=STARTING, reason=kind.lower(), message=conditions[kind].get("message", ""), **common
                )
        running = bool(pods) and all(
            all(
                "running" in s["state"] or "terminated" in s["state"]
                for s in (p.get("status") or {}).get("containerStatuses") or [{}]
            )
            for p in pods
        )
        if "Running" in conditions and running or (obj["kind"] == "Job" and running and status.get("active")):
            return ObservedState(
                phase=RUNNING, reason="running", message=conditions.get("Running", {}).get("message", ""), **common
            )
        message = conditions.get("Created", {}).get("message", "") or "Waiting for the cluster to start the pods."
        return ObservedState(phase=STARTING, reason="starting", message=message, **common)

    def _failure(self, condition: dict, pods: list[dict], finished: float | None, common: dict) -> ObservedState:
        message = condition.get("message", "")
        if condition.get("reason") == "DeadlineExceeded" or "deadline" in message.lower():
            return ObservedState(
                phase=FAILED,
                reason="deadline_exceeded",
                finished_at=finished,
                **common,
                message=message or "The job ran longer than its maximum runtime.",
            )
        for pod in pods:
            for init in (pod.get("status") or {}).get("initContainerStatuses") or []:
                code = init["state"].get("terminated", {}).get("exitCode")
                if code:
                    reason = {FETCH: "clone_failed", INSTALL: "install_failed"}.get(init["name"], "setup_failed")
                    meta = pod["metadata"]
                    output = self.kube.pod_log(meta["namespace"], meta["name"], container=init["name"])
                    text = (
                        _tail(output)
                        or init["state"]["terminated"].get("message", "")
                        or f"{init['name']} exited with code {code}"
                    )
                    return ObservedState(
                        phase=FAILED,
                        reason=reason,
                        message=text,
                        exit_code=code,
                        finished_at=finished,
                        **{**common, "started_at": None},
                    )
        for pod in pods:
            for main in (pod.get("status") or {}).get("containerStatuses") or []:
                code = main["state"].get("terminated", {}).get("exitCode")
                if code:
                    meta = pod["metadata"]
                    output = _tail(self.kube.pod_log(meta["namespace"], meta["name"], container=main["name"]))
                    text = f"worker {worker_of(pod)} exited with code {code}" + (f":\n{output}" if output else ".")
                    return ObservedState(
                        phase=FAILED,
                        reason="worker_failed",
                        message=text,
                        exit_code=code,
                        finished_at=finished,
                        **common,
                    )
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
            self.kube.patch(
                obj["apiVersion"],
                obj["kind"],
                meta["namespace"],
                meta["name"],
                {"metadata": {"annotations": {CANCEL_ANNOTATION: stamp}}},
            )
        except KubeError as exc:
            if exc.status != 404:
                raise
        self.kube.delete(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"], propagation="Foreground")

    def logs(self, job_id: str, worker: int, since: int = 0) -> Iterator[str]:
        """Complete lines of one worker's setup output then its command's, from byte offset ``since``."""
        data, ended = self._log_bytes(job_id, worker)
        data = data[since:]
        if not ended:
            data = data[: data.rfind(b"\n") + 1]
        return iter(data.decode(errors="replace").splitlines(keepends=True))

    def read_log(
        self,
        job_id: str,
        worker: int,
        *,
        cursor: log_reader.Cursor | None = None,
        tail: int | None = None,
        line_max: int = log_reader.LINE_MAX_BYTES,
    ) -> log_reader.LogRead:
        """The local executor's bounded read, over what the cluster keeps: the kubelet rotates a container's
        log at its containerLogMaxSize (10 MiB by default) and the API serves the current file only."""
        data, ended = self._log_bytes(job_id, worker)
        log = io.BytesIO(data)
        if cursor is None:
            return log_reader.tail(log, tail or 1, end=len(data), final=ended, line_max=line_max)
        return log_reader.forward(log, cursor, end=len(data), final=ended, line_max=line_max)

    def _log_bytes(self, job_id: str, worker: int) -> tuple[bytes, bool]:
        _, pods = self._objects([job_id])
        pod = next((p for p in pods.get(job_id, []) if worker_of(p) == worker), None)
        if pod is None:
            return b"", False
        meta, spec = pod["metadata"], pod["spec"]
        ended = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        names = [c["name"] for c in spec.get("initContainers") or []] + [spec["containers"][0]["name"]]
        text = "".join(self.kube.pod_log(meta["namespace"], meta["name"], container=name) for name in names)
        return text.encode(), ended

    def collect_garbage(self, keep: set[str]) -> list[str]:
        """Delete the portal's job objects whose job id is not in ``keep``; the ids deleted."""
        deleted = []
        for api_version, kind in JOB_KINDS:
            try:
                items, _ = self.kube.list(
                    api_version, kind, labels=f"app.kubernetes.io/managed-by={MANAGED_BY},{JOB_ID_LABEL}"
                )
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
