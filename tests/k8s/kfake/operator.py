"""The operators' and the kubelet's part, moved by the test (never by wall time).

For Kubeflow Training Operator jobs (PyTorchJob, TFJob; the MPI Operator's MPIJob) the pods are named,
labelled (``training.kubeflow.org/job-name``, ``replica-type``, ``replica-index``, ``operator-name``,
``job-role``) and owned the way the operator makes them, and the conditions (Created, Running, Restarting,
Succeeded, Failed; reasons ``<Kind>Created`` ..., DeadlineExceeded) and their messages are the operator's.
For a batch Job it is the Job controller's: ``job-name`` / ``batch.kubernetes.io/*`` labels, ``active``,
Complete / Failed with BackoffLimitExceeded or DeadlineExceeded. The kubelet's part is the pod status:
Pending with init containers waiting (ContainerCreating, PodInitializing), each init container in turn,
Running with a node and IPs, the main container's exit (Completed / Error, exit codes), eviction, and
ending terminating pods (``graceful``); and the container logs.
"""

from __future__ import annotations

import copy
import uuid
from typing import TYPE_CHECKING

from tests.k8s.kfake.api import now_iso

if TYPE_CHECKING:
    from tests.k8s.kfake.fake import KubeFake

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
REPLICA_FIELDS = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}
API_VERSIONS = {
    "PyTorchJob": "kubeflow.org/v1",
    "TFJob": "kubeflow.org/v1",
    "MPIJob": "kubeflow.org/v2beta1",
    "Job": "batch/v1",
}


class Operator:
    """The Training Operator, the Job controller and the kubelet, moved by the test (never by wall time).

    Jobs are addressed by (kind, namespace, name); pods by (namespace, pod name).
    ``graceful = True`` keeps deleted running pods terminating until ``terminate_pods()``.
    """

    def __init__(self, fake: KubeFake):
        self.fake = fake
        self.graceful = False

    # -- jobs

    def job(self, kind: str, namespace: str, name: str) -> dict:
        obj = self.fake.get(API_VERSIONS[kind], kind, namespace, name)
        if obj is None:
            raise KeyError(f"no {kind} {namespace}/{name}")
        return obj

    def create_pods(self, kind: str, namespace: str, name: str) -> list[str]:
        """The pods of a job (Pending, init containers waiting), owned by it; the Created condition."""
        job = self.job(kind, namespace, name)
        made = []
        with self.fake.lock:
            if kind == "Job":
                replicas = [("", 0, job["spec"]["template"], f"{name}-{uuid.uuid4().hex[:5]}")]
            else:
                replicas = []
                for rtype, rspec in job["spec"][REPLICA_FIELDS[kind]].items():
                    for index in range(rspec.get("replicas", 1)):
                        pod_name = f"{name}-launcher" if rtype == "Launcher" else f"{name}-{rtype.lower()}-{index}"
                        replicas.append((rtype, index, rspec["template"], pod_name))
            for rtype, index, template, pod_name in replicas:
                if self.fake.get("v1", "Pod", namespace, pod_name):
                    continue
                labels = dict(template.get("metadata", {}).get("labels") or {})
                if kind == "Job":
                    labels.update(
                        {
                            "batch.kubernetes.io/job-name": name,
                            "job-name": name,
                            "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
                        }
                    )
                else:
                    labels.update(
                        {
                            JOB_NAME_LABEL: name,
                            REPLICA_TYPE_LABEL: rtype.lower(),
                            REPLICA_INDEX_LABEL: str(index),
                            OPERATOR_LABEL: f"{kind.lower()}-controller",
                        }
                    )
                    if rtype in ("Master", "Launcher") or (kind == "TFJob" and index == 0):
                        labels["training.kubeflow.org/job-role"] = "master"
                spec = copy.deepcopy(template["spec"])
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod_name,
                        "namespace": namespace,
                        "labels": labels,
                        "ownerReferences": [
                            {
                                "apiVersion": job["apiVersion"],
                                "kind": kind,
                                "name": name,
                                "uid": job["metadata"]["uid"],
                                "controller": True,
                                "blockOwnerDeletion": True,
                            }
                        ],
                    },
                    "spec": spec,
                    "status": {
                        "phase": "Pending",
                        "initContainerStatuses": [
                            _waiting(c, "PodInitializing" if i else "ContainerCreating")
                            for i, c in enumerate(spec.get("initContainers", []))
                        ],
                        "containerStatuses": [_waiting(c, "PodInitializing") for c in spec.get("containers", [])],
                    },
                }
                self.fake._create(pod)
                made.append(pod_name)
            job = self.job(kind, namespace, name)
            status = job.setdefault("status", {})
            if kind == "Job":
                status.update(active=len(replicas), startTime=status.get("startTime") or now_iso())
            else:
                status.setdefault("startTime", now_iso())
                status["replicaStatuses"] = {r: {"active": 0} for r in job["spec"][REPLICA_FIELDS[kind]]}
                _condition(status, "Created", f"{kind}Created", f"{kind} {name} is created.")
            self.fake.update(job, status=True)
        return made

    def pods(self, kind: str, namespace: str, name: str) -> list[str]:
        job = self.job(kind, namespace, name)
        with self.fake.lock:
            return sorted(
                o["metadata"]["name"]
                for o in self.fake.list("v1", "Pod", namespace)
                if any(r["uid"] == job["metadata"]["uid"] for r in o["metadata"].get("ownerReferences", []))
            )

    def set_condition(
        self, kind: str, namespace: str, name: str, type_: str, reason: str = "", message: str = ""
    ) -> dict:
        """Set a job condition the way the operator does (Running / Restarting / Succeeded / Failed /
        Suspended, or Complete / Failed for a batch Job); an ending also sets completionTime and, for
        Training Operator jobs, turns Running False."""
        with self.fake.lock:
            job = self.job(kind, namespace, name)
            status = job.setdefault("status", {})
            reason = reason or (f"{kind}{type_}" if kind != "Job" else type_)
            message = message or f"{kind} {name} is {type_.lower()}."
            _condition(status, type_, reason, message)
            if type_ in ("Succeeded", "Failed", "Complete"):
                status["completionTime"] = now_iso()
                for other in status.get("conditions", []):
                    if other["type"] in ("Running", "Restarting") and other["type"] != type_:
                        other["status"] = "False"
                if kind == "Job":
                    status["active"] = 0
            return self.fake.update(job, status=True)

    def succeed(self, kind: str, namespace: str, name: str) -> dict:
        return self.set_condition(
            kind,
            namespace,
            name,
            "Complete" if kind == "Job" else "Succeeded",
            message=f"{kind} {name} successfully completed." if kind != "Job" else "",
        )

    def fail(self, kind: str, namespace: str, name: str, reason: str = "", message: str = "") -> dict:
        if not message:
            message = (
                f"{kind} {name} is failed because 1 Worker replica(s) failed."
                if kind != "Job"
                else "Job has reached the specified backoff limit"
            )
        return self.set_condition(
            kind,
            namespace,
            name,
            "Failed",
            reason or (f"{kind}Failed" if kind != "Job" else "BackoffLimitExceeded"),
            message,
        )

    def exceed_deadline(self, kind: str, namespace: str, name: str) -> dict:
        """activeDeadlineSeconds passed: the operator kills the pods and fails the job with DeadlineExceeded."""
        for pod in self.pods(kind, namespace, name):
            self.fake.delete("v1", "Pod", namespace, pod)
        return self.set_condition(
            kind,
            namespace,
            name,
            "Failed",
            "DeadlineExceeded",
            f"{kind} {name} has failed because it was active longer than specified deadline"
            if kind != "Job"
            else "Job was active longer than specified deadline",
        )

    # -- pods (the kubelet)

    def _pod(self, namespace: str, pod: str) -> dict:
        obj = self.fake.get("v1", "Pod", namespace, pod)
        if obj is None:
            raise KeyError(f"no pod {namespace}/{pod}")
        return obj

    def log(self, namespace: str, pod: str, text: str, container: str | None = None) -> None:
        """Append output to a container's log (default: the pod's main container)."""
        with self.fake.lock:
            container = container or self._pod(namespace, pod)["spec"]["containers"][0]["name"]
            key = (namespace, pod, container)
            self.fake.store.logs[key] = self.fake.store.logs.get(key, "") + text
            self.fake._record(("", "v1", "pods-log"), "LOG", {"metadata": {"resourceVersion": str(self.fake.store.rv)}})

    def init_done(
        self, namespace: str, pod: str, container: str, *, exit_code: int = 0, log: str = "", message: str = ""
    ) -> dict:
        """An init container ends: the next one runs; a failure fails the pod (restartPolicy Never)."""
        with self.fake.lock:
            if log:
                self.log(namespace, pod, log, container)
            obj = self._pod(namespace, pod)
            statuses = obj["status"]["initContainerStatuses"]
            index = next(i for i, s in enumerate(statuses) if s["name"] == container)
            statuses[index].update(state={"terminated": _terminated(exit_code, message)}, ready=exit_code == 0)
            if exit_code:
                obj["status"].update(phase="Failed", reason="", message="")
                for status in obj["status"]["containerStatuses"]:
                    status["state"] = {"waiting": {"reason": "PodInitializing"}}
            elif index + 1 < len(statuses):
                statuses[index + 1]["state"] = {"running": {"startedAt": now_iso()}}
            obj["status"].setdefault("conditions", [])
            return self.fake.update(obj, status=True)

    def run(self, namespace: str, pod: str, *, log: str = "", fetch_log: str = "") -> dict:
        """Init containers done (fetch-code prints ``fetch_log``), the main containers run: pod Running."""
        with self.fake.lock:
            obj = self._pod(namespace, pod)
            for status in obj["status"].get("initContainerStatuses", []):
                if "terminated" not in status["state"]:
                    text = fetch_log if status["name"] == "fetch-code" else ""
                    self.init_done(namespace, pod, status["name"], log=text)
            obj = self._pod(namespace, pod)
            for status in obj["status"]["containerStatuses"]:
                status.update(state={"running": {"startedAt": now_iso()}}, ready=True, started=True)
            obj["status"].update(
                phase="Running",
                startTime=obj["status"].get("startTime") or now_iso(),
                podIP="10.0.0.1",
                hostIP="10.0.1.1",
            )
            obj["spec"]["nodeName"] = obj["spec"].get("nodeName") or "gpu-node-1"
            self.fake.update(obj)
            if log:
                self.log(namespace, pod, log)
            return self._pod(namespace, pod)

    def exit(self, namespace: str, pod: str, exit_code: int = 0, *, log: str = "", reason: str = "") -> dict:
        """The main container ends: pod Succeeded (0) or Failed."""
        with self.fake.lock:
            if log:
                self.log(namespace, pod, log)
            obj = self._pod(namespace, pod)
            for status in obj["status"]["containerStatuses"]:
                started = status["state"].get("running", {}).get("startedAt", now_iso())
                status.update(
                    state={"terminated": {**_terminated(exit_code, "", reason), "startedAt": started}},
                    ready=False,
                    started=False,
                )
            obj["status"]["phase"] = "Failed" if exit_code else "Succeeded"
            return self.fake.update(obj, status=True)

    def evict(self, namespace: str, pod: str, message: str = "The node was low on resource: memory.") -> dict:
        with self.fake.lock:
            obj = self._pod(namespace, pod)
            for status in obj["status"]["containerStatuses"]:
                status.update(state={"terminated": _terminated(137, "", "ContainerStatusUnknown")}, ready=False)
            obj["status"].update(phase="Failed", reason="Evicted", message=message)
            return self.fake.update(obj, status=True)

    def terminate_pods(self, namespace: str | None = None) -> list[str]:
        """The kubelet ends every terminating pod (exit 143 after SIGTERM); owners then finish deleting."""
        ended = []
        with self.fake.lock:
            for (resource, ns, name), obj in list(self.fake.store.objects.items()):
                if (
                    resource == ("", "v1", "pods")
                    and obj["metadata"].get("deletionTimestamp")
                    and (namespace is None or ns == namespace)
                ):
                    self.fake._remove((resource, ns, name))
                    ended.append(name)
        return ended


def _waiting(container: dict, reason: str) -> dict:
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": reason}},
    }


def _terminated(exit_code: int, message: str, reason: str = "") -> dict:
    state = {
        "exitCode": exit_code,
        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        "startedAt": now_iso(),
        "finishedAt": now_iso(),
    }
    if message:
        state["message"] = message
    return state


def _condition(status: dict, type_: str, reason: str, message: str) -> None:
    conditions = status.setdefault("conditions", [])
    stamp = now_iso()
    for condition in conditions:
        if condition["type"] == type_:
            condition.update(status="True", reason=reason, message=message, lastUpdateTime=stamp)
            return
    conditions.append(
        {
            "type": type_,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastUpdateTime": stamp,
            "lastTransitionTime": stamp,
        }
    )
