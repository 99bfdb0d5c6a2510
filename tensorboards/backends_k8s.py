"""TensorBoard on Kubernetes: one Deployment + Service per board in the department's namespace, reading
the jobs' event files from the department's job volume (read-only, one subPath per job: its whole
TensorBoard folder, manifests.job_tensorboard_subpath, which holds one ``run-<index>`` folder per run, so a
board shows every run of a preempted job: ``job_run`` makes that entry). Reached only through the portal's
proxy at the Service's cluster DNS name; the pod is contained like the jobs' (pod_security.py) except
that its root filesystem stays writable: TensorBoard refuses to start without a writable temporary folder
(its ``.tensorboard-info``), and as the unprivileged user it can write only the image's /tmp. Talks to the cluster through
clusters.kube.Kube alone; no Django.

A BoardProcess of this backend: host = "<service>.<namespace>.svc.<cluster domain>", port = the
Service's port, pid None, handle "<namespace>/<name>".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusters import pod_security
from clusters.backends import kube_call, kube_where
from clusters.errors import ExecutorError
from clusters.k8s import DEPARTMENT_LABEL, MANAGED_BY, ClusterSettings
from clusters.manifest_validation import ManifestInvalid, check_manifests
from jobs.executors.k8s_names import job_tensorboard_subpath
from tensorboards.backends import BoardError, BoardProcess, BoardSpec

DEFAULT_IMAGE = "tensorflow/tensorflow:2.18.0"  # ships `tensorboard`; a cluster setting can replace it
BOARD_LABEL = "portal/tensorboard"
PORT, SERVICE_PORT = 6006, 80
RUNS_DIR = "/runs"
LOG_LINES = 20
TEMPLATE_ANNOTATION = "portal/runs"  # the runs a Deployment shows: sync_runs patches it when they change
_RUN_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")  # a path segment, and safe inside --logdir_spec


@dataclass(frozen=True)
class KubeBoardSpec(BoardSpec):
    """A BoardSpec whose runs are (run name, subPath on the department's job volume)."""

    department: str = ""


def job_run(run: str, job_key: str) -> tuple[str, str]:
    """A board entry showing every run of one job: (run name, the job's TensorBoard folder)."""
    return run, job_tensorboard_subpath(job_key)


def board_name(board_id: int) -> str:
    return f"tensorboard-{board_id}"


def board_labels(board_id: int, department: str) -> dict[str, str]:
    return {
        BOARD_LABEL: str(board_id),
        DEPARTMENT_LABEL: department,
        "app.kubernetes.io/name": "tensorboard",
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }


def board_manifests(spec: KubeBoardSpec, cluster: ClusterSettings, *, image: str = DEFAULT_IMAGE) -> list[dict]:
    """The Deployment running ``tensorboard`` over the runs, and the Service the portal's proxy reaches."""
    for run, subpath in spec.runs:
        if not _RUN_NAME.match(run) or subpath.startswith("/") or ".." in subpath.split("/"):
            raise BoardError(f"Run {run!r} at {subpath!r} cannot be shown on a cluster board.", permanent=True)
    name, namespace = board_name(spec.board_id), cluster.namespace(spec.department)
    labels = board_labels(spec.board_id, spec.department)
    selector = {BOARD_LABEL: str(spec.board_id)}
    args = ["--path_prefix", spec.path_prefix, "--bind_all", "--port", str(PORT)]
    if spec.runs:
        args = ["--logdir_spec", ",".join(f"{run}:{RUNS_DIR}/{run}" for run, _ in spec.runs), *args]
    else:  # a job that has not run yet: an empty board, not a crashing one
        args = ["--logdir", RUNS_DIR, *args]
    mounts = [
        {"name": "job-volume", "mountPath": f"{RUNS_DIR}/{run}", "subPath": subpath, "readOnly": True}
        for run, subpath in spec.runs
    ]
    probe = {
        "httpGet": {"path": spec.path_prefix.rstrip("/") + "/", "port": PORT},
        "periodSeconds": 5,
        "failureThreshold": 3,
    }
    container = {
        "name": "tensorboard",
        "image": cluster.image(image),
        "command": ["tensorboard"],
        "args": args,
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "volumeMounts": mounts,
        "readinessProbe": probe,
        "env": [{"name": name, "value": value} for name, value in pod_security.scratch_env().items()],
        "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
        "securityContext": pod_security.container_security_context(read_only_root=False),
    }
    # Read-only per mount, not per volume: kubelet must be able to create the subPath of a job that has
    # not written any event file yet, or the pod would not start.
    pod = {
        "containers": [container],
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security.pod_security_context(cluster.run_as_user, cluster.run_as_group),
        "volumes": [{"name": "job-volume", "persistentVolumeClaim": {"claimName": cluster.job_volume_pvc}}],
    }
    if cluster.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": cluster.image_pull_secret}]
    runs = ",".join(f"{run}={subpath}" for run, subpath in spec.runs)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {TEMPLATE_ANNOTATION: runs},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }
    manifests = [deployment, service]
    try:
        check_manifests(manifests)
    except ManifestInvalid as exc:  # a bug of this builder: never send the cluster what it would refuse
        raise BoardError(f"The TensorBoard manifests are invalid:\n{exc}", permanent=True) from exc
    return manifests


class KubernetesBoardBackend:
    def __init__(
        self, kube, cluster: ClusterSettings, *, image: str = DEFAULT_IMAGE, cluster_domain: str = "cluster.local"
    ):
        self.kube = kube  # clusters.kube.Kube
        self.cluster = cluster
        self.image = image
        self.cluster_domain = cluster_domain

    def start(self, spec: KubeBoardSpec) -> BoardProcess:
        deployment, service = board_manifests(spec, self.cluster, image=self.image)
        for manifest in (deployment, service):
            obj, created = self._call(lambda manifest=manifest: self.kube.create(manifest))
            if not created and (obj.get("metadata") or {}).get("deletionTimestamp"):
                raise BoardError(
                    f"TensorBoard {spec.board_id} is still being removed; it starts again once it is gone.",
                    permanent=False,
                )
        self.sync_runs(spec)  # a Deployment left from before may show other runs
        metadata = service["metadata"]
        return BoardProcess(
            host=f"{metadata['name']}.{metadata['namespace']}.svc.{self.cluster_domain}",
            port=SERVICE_PORT,
            handle=f"{metadata['namespace']}/{metadata['name']}",
        )

    def sync_runs(self, spec: KubeBoardSpec) -> None:
        """Give the Deployment the wanted runs (its pod restarts with the new mounts) when they changed."""
        deployment, _ = board_manifests(spec, self.cluster, image=self.image)
        metadata = deployment["metadata"]
        current = self._call(lambda: self.kube.get("apps/v1", "Deployment", metadata["namespace"], metadata["name"]))
        if current is None:
            return
        if (current["metadata"].get("annotations") or {}).get(TEMPLATE_ANNOTATION) == metadata["annotations"][
            TEMPLATE_ANNOTATION
        ]:
            return
        # The whole container list is replaced by a merge patch (lists are atomic in it): args and mounts together.
        patch = {
            "metadata": {"annotations": metadata["annotations"]},
            "spec": {"template": deployment["spec"]["template"]},
        }
        self._call(lambda: self.kube.patch("apps/v1", "Deployment", metadata["namespace"], metadata["name"], patch))

    def alive(self, process: BoardProcess) -> bool:
        deployment = self._deployment(process)
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            return False
        conditions = (deployment.get("status") or {}).get("conditions") or []
        # Kubernetes gave up rolling it out (image not pulled, pod never ready) within progressDeadlineSeconds.
        return not any(c.get("type") == "Progressing" and c.get("status") == "False" for c in conditions)

    def ready(self, process: BoardProcess) -> bool:
        deployment = self._deployment(process)
        return deployment is not None and ((deployment.get("status") or {}).get("availableReplicas") or 0) >= 1

    def stop(self, process: BoardProcess) -> None:
        namespace, name = _where(process)
        self._call(lambda: self.kube.delete("v1", "Service", namespace, name, propagation="Background"))
        self._call(lambda: self.kube.delete("apps/v1", "Deployment", namespace, name, propagation="Background"))

    def output(self, board_id: int) -> str:
        """Why its pod is not up (waiting reasons, e.g. ImagePullBackOff), then its last log lines."""
        lines = []
        try:
            pods, _ = self.kube.list("v1", "Pod", labels=f"{BOARD_LABEL}={board_id}")
            for pod in pods[:1]:
                for status in (pod.get("status") or {}).get("containerStatuses") or []:
                    waiting = (status.get("state") or {}).get("waiting") or {}
                    if waiting.get("reason"):
                        lines.append(f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": "))
                log = self.kube.pod_log(pod["metadata"]["namespace"], pod["metadata"]["name"], container="tensorboard")
                lines += log.splitlines()[-LOG_LINES:]
        except ExecutorError:
            pass  # only used to say why a board died: an unreachable cluster must not hide that it did
        return "\n".join(lines)

    def _deployment(self, process: BoardProcess) -> dict | None:
        namespace, name = _where(process)
        return self._call(lambda: self.kube.get("apps/v1", "Deployment", namespace, name))

    @staticmethod
    def _call(operation):
        return kube_call(operation, BoardError)


def _where(process: BoardProcess) -> tuple[str, str]:
    return kube_where(process.handle, BoardError, "a TensorBoard on a cluster")
