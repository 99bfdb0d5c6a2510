"""Job spec + placement + cluster settings -> Kubernetes manifests (plain dicts). Pure: no Django, no I/O.

What a job becomes on a cluster:
- framework ``pytorch`` (or any multi-worker job of another framework except tensorflow and mpi): a
  PyTorchJob (kubeflow.org/v1), one Master and ``workers - 1`` Workers, container ``pytorch``;
- ``tensorflow``: a TFJob (kubeflow.org/v1), ``workers`` Workers, container ``tensorflow``;
- ``mpi``: an MPIJob (kubeflow.org/v2beta1, the standalone MPI Operator): a Launcher that runs the command
  (``mpirun ...``) and ``workers`` Workers running sshd, each with the code and requirements;
- anything else with one worker: a batch/v1 Job.

Every pod fetches the code in an init container (git, at the resolved commit when there is one) and
installs the requirements with the job's own image into a shared emptyDir that the main container
puts on PYTHONPATH. The code URL, ref and requirements travel only as environment values and argv
items of constant scripts, never inside a shell string.

The job environment contract (docs/architecture.md) on Kubernetes:
- set here: PORTAL_JOB_ID, PORTAL_JOB_NAME, LOCAL_RANK (one process per pod: 0), CUDA_VISIBLE_DEVICES
  (0..n-1: the device plugin shows a container only its own GPUs; "" without GPUs),
  PORTAL_GPU_FRACTION (shared GPUs), PORTAL_DATA_<NAME> (each mount's path), PYTHONPATH for the
  requirements, HOME and TMPDIR (/tmp, an emptyDir: the root filesystem is read-only);
- on the department's job volume (``job_volume_layout``): PORTAL_OUTPUT_DIR per run,
  PORTAL_CHECKPOINT_DIR per job (kept across the runs of a preempted job), TENSORBOARD_LOG_DIR per run
  inside the job's TensorBoard folder (a board mounts the folder and shows every run);
  PORTAL_RUN_INDEX (0, then 1 after the first preemption ...) and PORTAL_RESUMED=1 on a re-run;
- set by the Training Operator: WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT (PyTorchJob), TF_CONFIG (TFJob);
- TFJob: WORLD_SIZE, MASTER_ADDR (worker 0's service) and MASTER_PORT are set here, RANK from the pod's
  replica-index label (downward API);
- MPIJob: WORLD_SIZE is set here; each MPI process's rank is OMPI_COMM_WORLD_RANK (set by mpirun);
- batch/v1 Job: WORLD_SIZE=1, RANK=0, MASTER_ADDR=127.0.0.1, MASTER_PORT set here.
max_runtime_seconds becomes activeDeadlineSeconds, which counts from the job's start (fetching code
and installing requirements included), while the local executor counts from the command's start.
The placement's nodes are not pinned: the portal's admission reserved the GPUs, kube-scheduler picks
the nodes within the GPU type's node selector. Every pod is contained as clusters/pod_security.py says.
The job's kind, name, labels and job-volume layout are k8s_names.py's; the names the job's own env cannot
override, job_env.py's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from clusters import pod_security
from clusters.k8s import ClusterSettings, ManifestError
from core.code_url import GIT_ALLOW_PROTOCOL
from jobs.executors.base import JobSpec, Placement
from jobs.executors.job_env import PORTAL_SET_ENV
from jobs.executors.k8s_names import (
    CHECKPOINT_DIR,
    CODE_DIR,
    OUTPUT_DIR,
    PACKAGES_DIR,
    TENSORBOARD_DIR,
    WORKSPACE,
    job_key,
    job_volume_layout,
    kind_for,
    labels,
    resource_name,
)

REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"  # put on every pod by both operators
PYTORCH_PORT, TF_PORT, LOCAL_PORT = 23456, 2222, 29500

# Constant scripts: everything that comes from the job is in $PORTAL_CODE_URL, $PORTAL_CODE_REF or "$@".
FETCH_SCRIPT = """set -eu
git clone --quiet -- "$PORTAL_CODE_URL" "$PORTAL_CODE_DIR"
if [ -n "${PORTAL_CODE_REF:-}" ]; then git -C "$PORTAL_CODE_DIR" checkout --quiet "$PORTAL_CODE_REF" --; fi
echo "[portal] code at commit $(git -C "$PORTAL_CODE_DIR" rev-parse --verify HEAD)"
"""
INSTALL_SCRIPT = """set -eu
mkdir -p "$PORTAL_PACKAGES_DIR"
if [ -f "$PORTAL_CODE_DIR/requirements.txt" ]; then set -- -r "$PORTAL_CODE_DIR/requirements.txt" -- "$@"; else set -- -- "$@"; fi
if [ "$#" -gt 1 ] || [ "$1" != "--" ]; then
  python -m pip install --no-input --disable-pip-version-check --target "$PORTAL_PACKAGES_DIR" "$@"
fi
"""
_ENV_UNSAFE = re.compile(r"[^A-Z0-9]")
_JOB_ID = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")  # a label value; also a safe subPath
_RESERVED = PORTAL_SET_ENV | {"PYTHONPATH", "NVIDIA_VISIBLE_DEVICES"}


# ------------------------------------------------------------------------------------------ the job


def job_manifests(
    job: JobSpec,
    placement: Placement,
    cluster: ClusterSettings,
    *,
    gpu_type: str | None = None,
    priority: str | None = None,
    tensorboard: bool | None = None,
    commit: str | None = None,
) -> list[dict[str, Any]]:
    """The manifests that run ``job``: one PyTorchJob / TFJob / MPIJob / batch Job.

    ``gpu_type``, ``priority``, ``tensorboard`` and ``commit`` default to the spec's own values.

    ``commit`` (the resolved commit of an earlier run, e.g. after a preemption) wins over the job's ref.
    TENSORBOARD_LOG_DIR is set either way (it is part of the contract); without ``tensorboard`` it is
    an emptyDir that no board reads instead of the job volume.
    """
    if not _JOB_ID.match(job.job_id):
        raise ManifestError(
            f"Job id {job.job_id!r} cannot label Kubernetes objects (1-63 letters, digits, '-', '_', '.')."
        )
    if not _JOB_ID.match(job_key(job)) or job.run_index < 0:
        raise ManifestError(
            f"Job key {job.job_key!r} / run index {job.run_index} cannot name folders on the job volume."
        )
    if len(placement.workers) != job.workers:
        raise ManifestError(f"Job {job.job_id} has {job.workers} workers but a placement for {len(placement.workers)}.")
    kind = kind_for(job)
    name = resource_name(job)
    pod = _PodBuilder(
        job,
        cluster,
        gpu_type=job.gpu_type if gpu_type is None else gpu_type,
        priority=job.priority if priority is None else priority,
        commit=commit or job.commit,
        name=name,
        tensorboard=job.tensorboard if tensorboard is None else tensorboard,
    )
    metadata = {"name": name, "namespace": cluster.namespace(job.department), "labels": labels(job)}
    run_policy = {"cleanPodPolicy": "Running", "backoffLimit": cluster.backoff_limit}
    if job.max_runtime_seconds:
        run_policy["activeDeadlineSeconds"] = job.max_runtime_seconds
    if cluster.ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = cluster.ttl_seconds_after_finished

    def replica(count: int, template: dict[str, Any]) -> dict[str, Any]:
        return {"replicas": count, "restartPolicy": cluster.restart_policy, "template": template}

    if kind == "PyTorchJob":
        specs = {"Master": replica(1, pod.template("pytorch", kind))}
        if job.workers > 1:
            specs["Worker"] = replica(job.workers - 1, pod.template("pytorch", kind))
        spec: dict[str, Any] = {"nprocPerNode": "1", "pytorchReplicaSpecs": specs, "runPolicy": run_policy}
        return [{"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": metadata, "spec": spec}]
    if kind == "TFJob":
        spec = {
            "tfReplicaSpecs": {"Worker": replica(job.workers, pod.template("tensorflow", kind))},
            "runPolicy": run_policy,
        }
        return [{"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": metadata, "spec": spec}]
    if kind == "MPIJob":
        spec = {
            "slotsPerWorker": 1,
            "runLauncherAsWorker": False,
            "sshAuthMountPath": cluster.mpi_ssh_auth_mount_path,
            "mpiImplementation": "OpenMPI",
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": run_policy,
            "mpiReplicaSpecs": {
                "Launcher": replica(1, pod.template("launcher", kind, gpus=False)),
                "Worker": replica(job.workers, pod.template("worker", kind, command=["/usr/sbin/sshd", "-De"])),
            },
        }
        return [{"apiVersion": "kubeflow.org/v2beta1", "kind": kind, "metadata": metadata, "spec": spec}]
    template = pod.template("main", kind)
    template["spec"]["restartPolicy"] = "Never"
    spec = {"backoffLimit": cluster.backoff_limit, "template": template}
    if job.max_runtime_seconds:
        spec["activeDeadlineSeconds"] = job.max_runtime_seconds
    if cluster.ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = cluster.ttl_seconds_after_finished
    return [{"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}]


@dataclass
class _PodBuilder:
    job: JobSpec
    cluster: ClusterSettings
    gpu_type: str
    priority: str | None
    commit: str | None
    name: str
    tensorboard: bool

    def template(
        self, container: str, kind: str, *, gpus: bool = True, command: list[str] | None = None
    ) -> dict[str, Any]:
        job, cluster = self.job, self.cluster
        gpu_count = job.gpus_per_worker if gpus else 0
        main = {
            "name": container,
            "image": cluster.image(job.image),
            "workingDir": CODE_DIR,
            "command": command or ["bash", "-c", job.command],
            "env": self.env(kind, gpu_count),
            "volumeMounts": self.mounts(),
            "resources": {"limits": self.gpu_limits(gpu_count)} if gpu_count else {},
            "securityContext": pod_security.container_security_context(),
        }
        if kind == "PyTorchJob":
            main["ports"] = [{"name": "pytorchjob-port", "containerPort": PYTORCH_PORT, "protocol": "TCP"}]
        elif kind == "TFJob":
            main["ports"] = [{"name": "tfjob-port", "containerPort": TF_PORT, "protocol": "TCP"}]
        spec = {
            "initContainers": self.init_containers(),
            "containers": [main],
            "volumes": self.volumes(),
            "terminationGracePeriodSeconds": job.grace_seconds,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "securityContext": pod_security.pod_security_context(cluster.run_as_user, cluster.run_as_group),
        }
        if gpu_count:
            spec["nodeSelector"] = {cluster.gpu_node_label: cluster.gpu_node_values.get(self.gpu_type, self.gpu_type)}
        if self.priority:
            spec["priorityClassName"] = cluster.priority_class(self.priority)
        if cluster.image_pull_secret:
            spec["imagePullSecrets"] = [{"name": cluster.image_pull_secret}]
        return {"metadata": {"labels": labels(job)}, "spec": spec}

    def gpu_limits(self, gpus: float) -> dict[str, str]:
        cluster = self.cluster
        if gpus >= 1:
            if gpus != int(gpus):
                raise ManifestError(f"Above 1, a worker needs whole GPUs (asked for {gpus:g}).")
            return {cluster.gpu_resource: str(int(gpus))}
        if not cluster.shared_gpu_resource:
            raise ManifestError(
                f"Cluster {cluster.cluster} has no shared-GPU resource configured "
                f"(shared_gpu_resource): ask for whole GPUs."
            )
        if cluster.shared_gpu_unit == "percent":
            amount = max(1, round(gpus * 100))
        else:
            memory = cluster.gpu_memory_gb.get(self.gpu_type)
            if not memory:
                raise ManifestError(
                    f"Cluster {cluster.cluster}: the GPU memory of {self.gpu_type} GPUs is not known "
                    f"(set the pool's GPU memory); it is needed for fractional GPUs."
                )
            amount = max(1, math.floor(gpus * memory * (1024 if cluster.shared_gpu_unit == "MiB" else 1)))
        limits = {cluster.shared_gpu_resource: str(amount)}
        if cluster.shared_gpu_with_gpu:
            limits[cluster.gpu_resource] = "1"
        return limits

    def env(self, kind: str, gpus: float) -> list[dict[str, Any]]:
        job = self.job
        values = {**pod_security.scratch_env(), **{k: v for k, v in job.env.items() if k not in _RESERVED}}
        values.update(
            {
                "PORTAL_JOB_ID": job.job_id,
                "PORTAL_JOB_NAME": job.name,
                "LOCAL_RANK": "0",
                "CUDA_VISIBLE_DEVICES": ",".join(str(index) for index in range(math.ceil(gpus))),
                "TENSORBOARD_LOG_DIR": TENSORBOARD_DIR,
                "PORTAL_OUTPUT_DIR": OUTPUT_DIR,
                "PYTHONPATH": PACKAGES_DIR,
                "PORTAL_CHECKPOINT_DIR": CHECKPOINT_DIR,
                "PORTAL_RUN_INDEX": str(job.run_index),
            }
        )
        if job.run_index > 0:
            values["PORTAL_RESUMED"] = "1"
        if kind != "PyTorchJob":  # the operator sets it there
            values["PYTHONUNBUFFERED"] = "1"
        if not gpus:
            values["NVIDIA_VISIBLE_DEVICES"] = "void"  # or a GPU node's default runtime shows them all
        elif gpus < 1:
            values["PORTAL_GPU_FRACTION"] = str(gpus)
        for mount in job.mounts:
            values["PORTAL_DATA_" + _ENV_UNSAFE.sub("_", mount.name.upper())] = mount.path
        rank = None
        if kind == "TFJob":
            values.update(
                {"WORLD_SIZE": str(job.workers), "MASTER_ADDR": f"{self.name}-worker-0", "MASTER_PORT": str(TF_PORT)}
            )
            rank = {
                "name": "RANK",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{REPLICA_INDEX_LABEL}']"}},
            }
        elif kind == "MPIJob":
            values["WORLD_SIZE"] = str(job.workers)
        elif kind == "Job":
            values.update({"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(LOCAL_PORT)})
        return [{"name": k, "value": v} for k, v in values.items()] + ([rank] if rank else [])

    def init_containers(self) -> list[dict[str, Any]]:
        job, cluster = self.job, self.cluster
        ref = self.commit or job.code_ref or ""

        def env(**values: str) -> list[dict[str, Any]]:
            values.update(PORTAL_CODE_DIR=CODE_DIR, PORTAL_PACKAGES_DIR=PACKAGES_DIR, **pod_security.scratch_env())
            return [{"name": name, "value": value} for name, value in values.items()]

        # Both write only to the workspace and /tmp (git's and pip's caches, pip's build folders): their
        # root filesystems are read-only like the main container's.
        mounts = [{"name": "workspace", "mountPath": WORKSPACE}, pod_security.scratch_mount()]
        fetch = {
            "name": "fetch-code",
            "image": cluster.image(cluster.git_image),
            "command": ["sh", "-c", FETCH_SCRIPT],
            "env": env(
                PORTAL_CODE_URL=job.code_url,
                PORTAL_CODE_REF=ref,
                GIT_TERMINAL_PROMPT="0",
                GIT_ALLOW_PROTOCOL=GIT_ALLOW_PROTOCOL,
            ),
            "volumeMounts": mounts,
            "securityContext": pod_security.container_security_context(),
        }
        install = {
            "name": "install-requirements",
            "image": cluster.image(job.image),
            "command": ["sh", "-c", INSTALL_SCRIPT, "install-requirements", *job.requirements],
            "env": env(PIP_NO_INPUT="1"),
            "volumeMounts": mounts,
            "securityContext": pod_security.container_security_context(),
        }
        return [fetch, install]

    def mounts(self) -> list[dict[str, Any]]:
        mounts = [{"name": "workspace", "mountPath": WORKSPACE}, pod_security.scratch_mount()]
        for path, subpath in job_volume_layout(self.job).items():
            if path == TENSORBOARD_DIR and not self.tensorboard:
                mounts.append({"name": "tensorboard", "mountPath": TENSORBOARD_DIR})
            else:
                mounts.append({"name": "job-volume", "mountPath": path, "subPath": subpath})
        for index, mount in enumerate(self.job.mounts):
            if mount.path.rstrip("/") == "/portal" or mount.path.startswith("/portal/"):
                raise ManifestError(f"Storage {mount.name}: /portal is the portal's own; mount it elsewhere.")
            if mount.path.rstrip("/") == pod_security.SCRATCH_DIR:
                raise ManifestError(
                    f"Storage {mount.name}: {pod_security.SCRATCH_DIR} is the job's scratch space; mount it elsewhere."
                )
            mounts.append({"name": f"data-{index}", "mountPath": mount.path, "readOnly": mount.read_only})
        return mounts

    def volumes(self) -> list[dict[str, Any]]:
        volumes = [
            {"name": "workspace", "emptyDir": {}},
            pod_security.scratch_volume(),
            {"name": "job-volume", "persistentVolumeClaim": {"claimName": self.cluster.job_volume_pvc}},
            *([] if self.tensorboard else [{"name": "tensorboard", "emptyDir": {}}]),
        ]
        for index, mount in enumerate(self.job.mounts):
            claim: dict[str, Any] = {"claimName": self.pvc_of(mount.name, mount.source)}
            if mount.read_only:
                claim["readOnly"] = True
            volumes.append({"name": f"data-{index}", "persistentVolumeClaim": claim})
        return volumes

    def pvc_of(self, storage: str, source: str) -> str:
        if storage in self.cluster.storage_pvcs:
            return self.cluster.storage_pvcs[storage]
        if source and not source.startswith("/"):
            return source  # a PVC storage: its claim name
        raise ManifestError(
            f"Storage {storage} is a local path; cluster {self.cluster.cluster} needs a PVC for it "
            f"(add it to the cluster's storage_pvcs setting)."
        )


# ------------------------------------------------------------------------------ the department side
