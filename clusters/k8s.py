"""What a Kubernetes cluster is to the portal: ``ClusterSettings`` (the keys of Cluster.settings, checked, with
their defaults), the labels every object the portal makes carries, and the per-department objects (namespace,
GPU ResourceQuota, job volume, NetworkPolicy) and priority classes. Pure: no Django, no I/O."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from clusters import pod_security

MANAGED_BY = "gpu-portal"


JOB_ID_LABEL, DEPARTMENT_LABEL = "portal/job-id", "portal/department"


SHARED_GPU_UNITS = ("GiB", "MiB", "percent")


_JSON_TYPES = {int: "an integer", str: "a string", bool: "true or false", dict: "an object", list: "a list"}


_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class ManifestError(ValueError):
    """The job cannot be expressed on this cluster (a person can act on the message)."""


@dataclass(frozen=True)
class ClusterSettings:
    """How the portal uses one Kubernetes cluster: the keys of Cluster.settings, with their defaults."""

    cluster: str = "kubernetes"
    namespace_prefix: str = "portal-"  # department "vision" -> namespace "portal-vision"
    gpu_resource: str = "nvidia.com/gpu"
    # Fractional GPUs: e.g. "aliyun.com/gpu-mem" (ACK cGPU, GiB) or "nvidia.com/gpumem" (HAMi, MiB, which
    # also needs one whole `gpu_resource`: shared_gpu_with_gpu). Empty: fractions cannot run here.
    shared_gpu_resource: str = ""
    shared_gpu_unit: str = "GiB"  # GiB | MiB | percent (of one GPU)
    shared_gpu_with_gpu: bool = False
    gpu_memory_gb: Mapping[str, int] = field(default_factory=dict)  # per GPU type, from the pools
    gpu_node_label: str = "nvidia.com/gpu.product"  # node label holding the GPU type
    gpu_node_values: Mapping[str, str] = field(default_factory=dict)  # GPU type -> label value (default: itself)
    image_registry: str = ""  # prefix for images without a registry host, e.g. "registry.example.com/mirror"
    images: Mapping[str, str] = field(default_factory=dict)  # catalogue image reference -> image to pull
    image_pull_secret: str = ""
    git_image: str = "alpine/git:2.47.2"
    storage_pvcs: Mapping[str, str] = field(default_factory=dict)  # department storage name -> PVC name
    job_volume_pvc: str = "portal-jobs"  # per-namespace PVC: job_volume_layout says what is where
    job_volume_size: str = "100Gi"
    job_volume_storage_class: str = ""
    priority_class_prefix: str = "gpu-portal-"  # portal priority "high" -> PriorityClass "gpu-portal-high"
    restart_policy: str = "Never"  # Never | OnFailure (replicas of operator jobs)
    backoff_limit: int = 0
    ttl_seconds_after_finished: int | None = None
    # Containment (clusters/pod_security.py): the uid and gid (also fsGroup) of every job, board and
    # model-server pod; the images must work as that user (MPI workers: the MPI Operator's mpiuser is 1000).
    run_as_user: int = 1000
    run_as_group: int = 1000
    mpi_ssh_auth_mount_path: str = "/home/mpiuser/.ssh"  # the run_as_user's ~/.ssh in the MPI images
    portal_namespace: str = "gpu-portal"  # the portal's own: department pods cannot reach it, it reaches them
    internal_cidrs: list[str] = field(default_factory=lambda: list(pod_security.DEFAULT_INTERNAL_CIDRS))
    ingress_namespaces: list[str] = field(default_factory=list)  # more namespaces that may reach department pods

    @classmethod
    def from_cluster(
        cls, name: str, settings: Mapping[str, Any], pools: Iterable[tuple[str, int]] = ()
    ) -> ClusterSettings:
        """From a cluster's name, its ``settings`` JSON and its pools as (gpu_type, gpu_memory_gb)."""
        known = {f.name for f in fields(cls)} - {"cluster", "gpu_memory_gb"}
        values = {key: value for key, value in settings.items() if key in known}
        memory = {gpu_type: gb for gpu_type, gb in pools if gb}
        for f in fields(cls):
            if f.name in values and not (values[f.name] is None and f.default is None):
                default = f.default_factory() if callable(f.default_factory) else f.default
                kind = int if default is None else type(default)  # ttl_seconds_after_finished: int or None
                if not isinstance(values[f.name], kind) or (kind is int and isinstance(values[f.name], bool)):
                    raise ManifestError(f"Cluster {name}: setting {f.name} must be {_JSON_TYPES[kind]}.")
        made = cls(cluster=name, gpu_memory_gb={**memory, **settings.get("gpu_memory_gb", {})}, **values)
        if made.shared_gpu_unit not in SHARED_GPU_UNITS:
            raise ManifestError(f"Cluster {name}: shared_gpu_unit must be one of {', '.join(SHARED_GPU_UNITS)}.")
        if made.restart_policy not in ("Never", "OnFailure"):
            raise ManifestError(f"Cluster {name}: restart_policy must be Never or OnFailure.")
        for key in ("run_as_user", "run_as_group"):
            if not 1 <= getattr(made, key) <= 2**31 - 1:
                raise ManifestError(
                    f"Cluster {name}: {key} must be a uid/gid from 1 to 2147483647 (pods never run as root)."
                )
        problems = [pod_security.cidr_problem(cidr) for cidr in made.internal_cidrs]
        if any(problems):
            raise ManifestError(f"Cluster {name}: internal_cidrs: {'; '.join(p for p in problems if p)}.")
        namespaces = [made.portal_namespace, *made.ingress_namespaces]
        if not all(isinstance(ns, str) and _NAMESPACE.match(ns) for ns in namespaces):
            raise ManifestError(f"Cluster {name}: portal_namespace and ingress_namespaces must name namespaces.")
        return made

    def namespace(self, department: str) -> str:
        return f"{self.namespace_prefix}{department}"

    def priority_class(self, priority: str) -> str:
        return f"{self.priority_class_prefix}{priority}"

    def image(self, reference: str) -> str:
        if reference in self.images:
            return self.images[reference]
        first = reference.split("/", 1)[0]
        has_host = "/" in reference and ("." in first or ":" in first or first == "localhost")
        return reference if has_host or not self.image_registry else f"{self.image_registry.rstrip('/')}/{reference}"


def namespace_manifest(department: str, cluster: ClusterSettings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": cluster.namespace(department), "labels": _department_labels(department)},
    }


def gpu_quota_manifest(department: str, gpu_limit: int, cluster: ClusterSettings) -> dict[str, Any]:
    """A second guard behind the portal's admission: the most GPUs the department may hold on this cluster.

    That is its nominal plus what it may borrow (``department_gpu_limit``), not the nominal alone: a
    department running on borrowed GPUs that the portal admitted must not have its pods refused.
    """
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "portal-gpus",
            "namespace": cluster.namespace(department),
            "labels": _department_labels(department),
        },
        "spec": {"hard": {f"requests.{cluster.gpu_resource}": str(gpu_limit)}},
    }


def job_volume_manifest(department: str, cluster: ClusterSettings) -> dict[str, Any]:
    """The department's job volume: TensorBoard logs and outputs of every job, read by its TensorBoards."""
    spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": cluster.job_volume_size}}}
    if cluster.job_volume_storage_class:
        spec["storageClassName"] = cluster.job_volume_storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": cluster.job_volume_pvc,
            "namespace": cluster.namespace(department),
            "labels": _department_labels(department),
        },
        "spec": spec,
    }


def department_gpu_limit(quotas: Iterable[tuple[int, int | None, int]]) -> int:
    """The most GPUs a department may hold on a cluster, from its quotas as (nominal, borrowing_limit, pool
    size): nominal + borrowing limit per pool (the whole pool when borrowing is unlimited), capped by the pool."""
    return sum(min(total, total if limit is None else nominal + limit) for nominal, limit, total in quotas)


def network_policy_manifest(department: str, cluster: ClusterSettings) -> dict[str, Any]:
    """The department's pods reach each other, DNS and the outside, never the portal's namespace or the
    cluster's internal networks; only they and the portal reach them (clusters/pod_security.py)."""
    return pod_security.network_policy_manifest(department, cluster, _department_labels(department))


def department_manifests(department: str, gpu_limit: int, cluster: ClusterSettings) -> list[dict[str, Any]]:
    return [
        namespace_manifest(department, cluster),
        gpu_quota_manifest(department, gpu_limit, cluster),
        job_volume_manifest(department, cluster),
        network_policy_manifest(department, cluster),
    ]


def priority_class_manifests(
    priorities: Iterable[tuple[str, int, bool]], cluster: ClusterSettings
) -> list[dict[str, Any]]:
    """The portal's priority classes as (name, value, preemptible).

    preemptionPolicy Never: the portal decides who is evicted (reclaim, priority), never kube-scheduler.
    """
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": cluster.priority_class(name), "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
            "value": value,
            "globalDefault": False,
            "preemptionPolicy": "Never",
            "description": f"GPU Portal priority {name}" + (" (preemptible by the portal)" if preemptible else ""),
        }
        for name, value, preemptible in priorities
    ]


def _department_labels(department: str) -> dict[str, str]:
    return {DEPARTMENT_LABEL: department, "app.kubernetes.io/managed-by": MANAGED_BY}
